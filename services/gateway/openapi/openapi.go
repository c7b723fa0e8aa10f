// Package openapi embeds jobmesh's REST API document, OpenAPI 3.0, which scripts/gen.sh
// generates from every service's proto (protoc-gen-openapiv2, then openapigen).
package openapi

import (
	_ "embed"
	"encoding/json"
	"fmt"
)

// JSON is the document as generated; its info.version is "dev".
//
//go:embed openapi.json
var JSON []byte

// Versioned returns the document with info.version set to version, the build's version.
func Versioned(version string) ([]byte, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(JSON, &doc); err != nil {
		return nil, fmt.Errorf("openapi: %w", err)
	}
	var info map[string]any
	if err := json.Unmarshal(doc["info"], &info); err != nil {
		return nil, fmt.Errorf("openapi: info: %w", err)
	}
	info["version"] = version
	b, err := json.Marshal(info)
	if err != nil {
		return nil, err
	}
	doc["info"] = b
	return json.Marshal(doc)
}
