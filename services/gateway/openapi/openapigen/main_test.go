package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

func TestSummarize(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ id, summary, desc, wantSum, wantDesc string }{
		{"JobService_GetJob", "GetJob returns one job.", "", "Returns one job.", ""},
		{"JobService_UpdateJob", "UpdateJob changes the fields named in update_mask.\nA stale version is refused.", "",
			"Changes the fields named in update_mask.", "A stale version is refused."},
		{"LogService_ClearRuns", "ClearRuns deletes runs older than a time, e.g. a week. Or all.", "More.",
			"Deletes runs older than a time, e.g. a week.", "Or all.\n\nMore."},
	} {
		sum, desc := summarize(c.id, c.summary, c.desc)
		if sum != c.wantSum || desc != c.wantDesc {
			t.Errorf("summarize(%q) = %q, %q; want %q, %q", c.summary, sum, desc, c.wantSum, c.wantDesc)
		}
	}
}

// TestRenameSchemas: v1 prefixes and the Status and Any names go, every reference follows, and a
// name that would clash keeps its prefix.
func TestRenameSchemas(t *testing.T) {
	t.Parallel()
	in := `{"definitions":{"v1Job":{"properties":{"s":{"$ref":"#/definitions/v1Schedule"}}},"v1Schedule":{},"Schedule":{},
		"rpcStatus":{"properties":{"details":{"items":{"$ref":"#/definitions/protobufAny"}}}},"protobufAny":{}},
		"paths":{"/x":{"get":{"responses":{"default":{"schema":{"$ref":"#/definitions/rpcStatus"}}}}}}}`
	out, err := renameSchemas([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Definitions map[string]json.RawMessage `json:"definitions"`
	}
	if err := json.Unmarshal(out, &d); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"Job", "v1Schedule", "Schedule", "Status", "Any"} {
		if d.Definitions[name] == nil {
			t.Errorf("no definition %s in %s", name, out)
		}
	}
	for _, ref := range []string{`#/definitions/v1Schedule"`, `#/definitions/Any"`, `#/definitions/Status"`} {
		if !strings.Contains(string(out), ref) {
			t.Errorf("no reference %s in %s", ref, out)
		}
	}
	if strings.Contains(string(out), "rpcStatus") || strings.Contains(string(out), "protobufAny") {
		t.Errorf("old names left in %s", out)
	}
}

// TestCleanPathParams: PATCH /things/{thing.id} becomes PATCH /things/{id}, beside the GET
// already there, with its parameter renamed.
func TestCleanPathParams(t *testing.T) {
	t.Parallel()
	param := func(name string) openapi3.Parameters {
		return openapi3.Parameters{{Value: &openapi3.Parameter{Name: name, In: "path", Required: true}}}
	}
	doc := &openapi3.T{Paths: openapi3.NewPaths(
		openapi3.WithPath("/things/{id}", &openapi3.PathItem{Get: &openapi3.Operation{OperationID: "get", Parameters: param("id")}}),
		openapi3.WithPath("/things/{thing.id}", &openapi3.PathItem{Patch: &openapi3.Operation{OperationID: "patch", Parameters: param("thing.id")}}),
	)}
	if err := cleanPathParams(doc); err != nil {
		t.Fatal(err)
	}
	item := doc.Paths.Value("/things/{id}")
	if doc.Paths.Len() != 1 || item == nil || item.Get == nil || item.Patch == nil || item.Patch.Parameters[0].Value.Name != "id" {
		t.Errorf("paths %v, want GET and PATCH on /things/{id} with the parameter id", doc.Paths.Keys())
	}
	clash := &openapi3.T{Paths: openapi3.NewPaths(
		openapi3.WithPath("/things/{id}", &openapi3.PathItem{Patch: &openapi3.Operation{OperationID: "a"}}),
		openapi3.WithPath("/things/{thing.id}", &openapi3.PathItem{Patch: &openapi3.Operation{OperationID: "b"}}),
	)}
	if err := cleanPathParams(clash); err == nil {
		t.Error("two PATCH on one path: no error")
	}
}
