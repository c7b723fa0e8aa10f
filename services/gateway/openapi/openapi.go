// Package openapi embeds the merged OpenAPI (Swagger 2.0) document that buf generates from every
// service's proto (buf.gen.yaml: protoc-gen-openapiv2 with allow_merge).
package openapi

import _ "embed"

// JSON is the merged OpenAPI document.
//
//go:embed jobmesh.swagger.json
var JSON []byte
