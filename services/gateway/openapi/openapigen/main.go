// Command openapigen turns the Swagger 2.0 document that protoc-gen-openapiv2 makes from the
// protos into the OpenAPI 3.0 document the gateway serves (services/gateway/openapi/openapi.json).
// It converts with kin-openapi and adds what the protos do not say: the title and description,
// the bearer security scheme (on every operation but the anonymous ones), the error responses
// each operation can give, clean path parameter names ({id}, not {job.id}), short summaries and
// request examples. It validates the result before writing it. scripts/gen.sh runs it, offline;
// the gateway binary does not link it.
//
//	go run ./services/gateway/openapi/openapigen -in jobmesh.swagger.json -out openapi.json
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"unicode"

	"github.com/getkin/kin-openapi/openapi2"
	"github.com/getkin/kin-openapi/openapi2conv"
	"github.com/getkin/kin-openapi/openapi3"
)

func main() {
	in := flag.String("in", "", "Swagger 2.0 document made by protoc-gen-openapiv2 (required)")
	out := flag.String("out", "", "OpenAPI 3 document to write (required)")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "openapigen:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	if in == "" || out == "" {
		return errors.New("-in and -out are required")
	}
	raw, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	doc, err := convert(raw)
	if err != nil {
		return err
	}
	b, err := encode(doc)
	if err != nil {
		return err
	}
	if err := validate(b); err != nil {
		return fmt.Errorf("the document made is invalid: %w", err)
	}
	return os.WriteFile(out, b, 0o644)
}

// convert makes the complete OpenAPI 3 document from the Swagger 2.0 one.
func convert(swagger []byte) (*openapi3.T, error) {
	swagger, err := renameSchemas(swagger)
	if err != nil {
		return nil, err
	}
	var doc2 openapi2.T
	if err := json.Unmarshal(swagger, &doc2); err != nil {
		return nil, fmt.Errorf("read the Swagger document: %w", err)
	}
	doc, err := openapi2conv.ToV3(&doc2)
	if err != nil {
		return nil, fmt.Errorf("convert to OpenAPI 3: %w", err)
	}
	if err := complete(doc); err != nil {
		return nil, err
	}
	return doc, nil
}

// encode writes doc as indented JSON (keys sorted, so the output is stable).
func encode(doc *openapi3.T) ([]byte, error) {
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		return nil, err
	}
	buf.WriteByte('\n')
	// json.Marshal escapes <, > and & for HTML; the document is not HTML.
	out := bytes.ReplaceAll(buf.Bytes(), []byte(`\u003c`), []byte("<"))
	out = bytes.ReplaceAll(out, []byte(`\u003e`), []byte(">"))
	return bytes.ReplaceAll(out, []byte(`\u0026`), []byte("&")), nil
}

// validate loads b as a client would and checks it against the OpenAPI 3 rules, examples
// included.
func validate(b []byte) error {
	doc, err := openapi3.NewLoader().LoadFromData(b)
	if err != nil {
		return err
	}
	return doc.Validate(context.Background())
}

// renameSchemas gives the schemas short names: "v1Job" becomes "Job" (the protos' package
// version says nothing to a REST client), "rpcStatus" "Status" and "protobufAny" "Any". A name
// that would clash keeps its prefix.
func renameSchemas(swagger []byte) ([]byte, error) {
	var d map[string]any
	if err := json.Unmarshal(swagger, &d); err != nil {
		return nil, fmt.Errorf("read the Swagger document: %w", err)
	}
	defs, _ := d["definitions"].(map[string]any)
	names := map[string]string{}
	taken := map[string]bool{}
	for name := range defs {
		taken[name] = true
	}
	keys := make([]string, 0, len(defs))
	for name := range defs {
		keys = append(keys, name)
	}
	sort.Strings(keys)
	for _, name := range keys {
		short := map[string]string{"rpcStatus": "Status", "protobufAny": "Any"}[name]
		if short == "" {
			short = strings.TrimPrefix(name, "v1")
		}
		if short == name || short == "" || taken[short] {
			continue
		}
		names[name] = short
		taken[short] = true
	}
	for old, short := range names {
		defs[short] = defs[old]
		delete(defs, old)
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if s, ok := e.(string); ok && k == "$ref" {
					if short, ok := names[strings.TrimPrefix(s, "#/definitions/")]; ok {
						v[k] = "#/definitions/" + short
					}
					continue
				}
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(d)
	return json.Marshal(d)
}

// apiDescription is the document's description: what a client needs before the first call.
const apiDescription = `REST API of jobmesh, a distributed job scheduler. Every service's gRPC API is
served here as JSON by the gateway, under /api/v1.

**Authentication.** Log in with ` + "`POST /api/v1/auth/login`" + ` and send the token it returns as
` + "`Authorization: Bearer <token>`" + ` on every other call. For automation, create an API token
(` + "`POST /api/v1/api-tokens`" + `) and send it the same way. What a token may do depends on its user's
role (viewer, operator, admin) and executor groups (docs/auth.md).

**Errors.** An error answers with an HTTP status and a body of the Status schema. Its ` + "`details`" + `
hold a ` + "`google.rpc.ErrorInfo`" + ` (domain ` + "`jobmesh.dev`" + `) whose ` + "`reason`" + ` is a stable
word to branch on (JOB_NOT_FOUND, VERSION_CONFLICT, TOKEN_INVALID, …; the list is in
docs/auth.md), and for invalid input a ` + "`google.rpc.BadRequest`" + ` naming every bad field.

**Conventions.** Field names are the protos' (snake_case); 64-bit integers are JSON strings; enums
are their names; times are RFC 3339.`

// anonymous are the operations that take no token.
var anonymous = map[string]bool{"AuthService_Login": true}

// throttled are the operations that can answer 429 (docs/auth.md, login throttling).
var throttled = map[string]bool{"AuthService_Login": true, "AuthService_ChangePassword": true}

// conflicts are the operations that can answer 409.
var conflicts = map[string]bool{
	"JobService_UpdateJob":                true, // VERSION_CONFLICT
	"RegistryService_CreateExecutorGroup": true, // EXECUTOR_GROUP_EXISTS
	"RegistryService_UpdateExecutorGroup": true, // EXECUTOR_GROUP_EXISTS
}

// examples are request bodies shown with their operations.
var examples = map[string]any{
	"AuthService_Login": map[string]any{"username": "admin", "password": "the password jobmesh dev printed"},
	"JobService_CreateJob": map[string]any{
		"group_id": "1", "name": "nightly report", "author": "ana",
		"schedule":        map[string]any{"type": "SCHEDULE_TYPE_CRON", "expression": "0 0 3 * * ?", "time_zone": "Europe/Berlin"},
		"glue_type":       "GLUE_TYPE_GLUE_SHELL",
		"glue_source":     "#!/bin/bash\necho \"report for $1\"",
		"glue_remark":     "first version",
		"params":          "daily",
		"timeout_seconds": 600, "retry_count": 2,
	},
	"JobService_UpdateJob":       map[string]any{"version": "3", "params": "weekly"},
	"JobService_TriggerJob":      map[string]any{"params": "2026-01-31", "trigger_type": "TRIGGER_TYPE_API"},
	"AuthService_CreateApiToken": map[string]any{"name": "ci"},
	"RegistryService_CreateExecutorGroup": map[string]any{
		"app_name": "billing", "title": "Billing workers", "address_type": "ADDRESS_TYPE_AUTO",
		"access_token": "a secret of at least 32 characters, shared with the group's executors",
	},
}

// errorResponses are the shared error responses: name → status, description and an example
// reason.
var errorResponses = []struct {
	name, status, desc, reason, message string
	code                                int
}{
	{"BadRequest", "400", "Invalid input (INVALID_ARGUMENT: the ErrorInfo's metadata.field and a BadRequest name the fields), or a state that does not allow the call (FAILED_PRECONDITION, LAST_ADMIN, RUN_ENDED).",
		"INVALID_ARGUMENT", "name: required", 3},
	{"Unauthorized", "401", "No token (TOKEN_MISSING), or one that is unknown, expired or revoked (TOKEN_INVALID); for a login, a wrong user name or password (LOGIN_FAILED).",
		"TOKEN_INVALID", "invalid or expired token", 16},
	{"Forbidden", "403", "The token's user lacks the role (ROLE_REQUIRED) or the executor group (GROUP_NOT_ALLOWED) the call needs.",
		"ROLE_REQUIRED", "/jobmesh.scheduler.v1.JobService/CreateJob: needs the operator role", 7},
	{"NotFound", "404", "Nothing has the id in the path (JOB_NOT_FOUND, RUN_NOT_FOUND, EXECUTOR_GROUP_NOT_FOUND, USER_NOT_FOUND, API_TOKEN_NOT_FOUND, GLUE_VERSION_NOT_FOUND).",
		"JOB_NOT_FOUND", "job 42: not found", 5},
	{"Conflict", "409", "The job changed since the version the update was based on (VERSION_CONFLICT), or another executor group has the app name (EXECUTOR_GROUP_EXISTS).",
		"VERSION_CONFLICT", "job 42 is at version 4, the update was based on 3: conflict", 10},
	{"TooManyRequests", "429", "Too many failed password attempts (LOGIN_THROTTLED), or too many at once (SERVER_BUSY); retry later.",
		"LOGIN_THROTTLED", "too many failed attempts; retry in 30s", 8},
	{"Error", "default", "Any other error: UNAVAILABLE (503) while a service cannot be reached, INTERNAL (500), …; the ErrorInfo's reason says which.",
		"UNAVAILABLE", "connection refused", 14},
}

// pathParam matches a path parameter that names a field of a message in the body ({job.id}).
var pathParam = regexp.MustCompile(`\{([a-z_]+)\.([a-z_]+)\}`)

func complete(doc *openapi3.T) error {
	doc.Info = &openapi3.Info{
		Title:       "jobmesh API",
		Description: apiDescription,
		// The gateway stamps its build's version into the document it serves.
		Version: "dev",
	}
	doc.Servers = openapi3.Servers{{URL: "/", Description: "the gateway that serves this document"}}
	if doc.Components == nil {
		doc.Components = &openapi3.Components{}
	}
	doc.Components.SecuritySchemes = openapi3.SecuritySchemes{"bearerAuth": {Value: &openapi3.SecurityScheme{
		Type: "http", Scheme: "bearer",
		Description: "A session token from POST /api/v1/auth/login (jms_…) or an API token (jmt_…), as `Authorization: Bearer <token>`.",
	}}}
	doc.Security = openapi3.SecurityRequirements{{"bearerAuth": []string{}}}
	errorComponents(doc)
	status := doc.Components.Schemas["Status"]
	if status == nil || status.Value == nil {
		return errors.New("no Status schema in the Swagger document")
	}
	status.Value.Description = "An error: its gRPC code, a message for people, and details. The first detail is a " +
		"google.rpc.ErrorInfo (domain jobmesh.dev) whose reason is stable; invalid input adds a google.rpc.BadRequest."

	if err := cleanPathParams(doc); err != nil {
		return err
	}
	used := map[string]bool{}
	seen := map[string]bool{}
	for _, path := range doc.Paths.Keys() {
		for _, op := range doc.Paths.Value(path).Operations() {
			for _, t := range op.Tags {
				used[t] = true
			}
			seen[op.OperationID] = true
			if err := completeOperation(op, strings.Contains(path, "{")); err != nil {
				return fmt.Errorf("%s: %w", op.OperationID, err)
			}
		}
	}
	for _, table := range []map[string]bool{anonymous, throttled, conflicts} {
		for id := range table {
			if !seen[id] {
				return fmt.Errorf("%s is not an operation", id)
			}
		}
	}
	for id := range examples {
		if !seen[id] {
			return fmt.Errorf("example for %s, which is not an operation", id)
		}
	}
	addGatewayPaths(doc)
	var tags openapi3.Tags
	for _, t := range doc.Tags {
		if used[t.Name] { // not the services without REST routes (executors', ingestion)
			t.Description = oneLine(t.Description)
			tags = append(tags, t)
		}
	}
	doc.Tags = append(tags, &openapi3.Tag{Name: "Gateway", Description: "The gateway itself: health and this document."})
	return nil
}

// cleanPathParams renames the path parameters that name a field of the body's message:
// /jobs/{job.id} becomes /jobs/{id} (the same URL, so the routes are unchanged), joining the
// path's other operations.
func cleanPathParams(doc *openapi3.T) error {
	for _, path := range doc.Paths.Keys() {
		item := doc.Paths.Value(path)
		clean := path
		for _, m := range pathParam.FindAllStringSubmatch(path, -1) {
			field := m[2]
			if strings.Contains(clean, "{"+field+"}") {
				field = m[1] + "_" + m[2]
			}
			clean = strings.Replace(clean, m[0], "{"+field+"}", 1)
			for _, op := range item.Operations() {
				for _, p := range op.Parameters {
					if p.Value != nil && p.Value.In == "path" && p.Value.Name == m[1]+"."+m[2] {
						p.Value.Name = field
					}
				}
			}
		}
		if clean == path {
			continue
		}
		doc.Paths.Delete(path)
		into := doc.Paths.Value(clean)
		if into == nil {
			into = &openapi3.PathItem{}
			doc.Paths.Set(clean, into)
		}
		for method, op := range item.Operations() {
			if into.GetOperation(method) != nil {
				return fmt.Errorf("path %s: %s %s is taken", path, method, clean)
			}
			into.SetOperation(method, op)
		}
	}
	return nil
}

func completeOperation(op *openapi3.Operation, hasPathParam bool) error {
	id := op.OperationID
	op.Summary, op.Description = summarize(id, op.Summary, op.Description)
	if anonymous[id] {
		op.Security = &openapi3.SecurityRequirements{} // no token
	}
	if rb := op.RequestBody; rb != nil && rb.Value != nil {
		delete(rb.Value.Extensions, "x-originalParamName")
		if ex, ok := examples[id]; ok {
			mt := rb.Value.Content.Get("application/json")
			if mt == nil {
				return errors.New("an example for a request without a JSON body")
			}
			mt.Example = ex
		}
	} else if _, ok := examples[id]; ok {
		return errors.New("an example for a request without a body")
	}
	stream := isStream(op)
	ref := func(status, name string) {
		if stream {
			name = "Stream" + name // its errors come wrapped as its results do
		}
		op.Responses.Set(status, &openapi3.ResponseRef{Ref: "#/components/responses/" + name})
	}
	if op.RequestBody != nil || len(op.Parameters) > 0 {
		ref("400", "BadRequest")
	}
	ref("401", "Unauthorized")
	if !anonymous[id] {
		ref("403", "Forbidden")
	}
	if hasPathParam {
		ref("404", "NotFound")
	}
	if conflicts[id] {
		ref("409", "Conflict")
	}
	if throttled[id] {
		ref("429", "TooManyRequests")
	}
	ref("default", "Error")
	if stream {
		op.Description = strings.TrimSpace(op.Description + "\n\nThe response is a stream: one JSON object per line, each holding a result or an error.")
		ok := op.Responses.Value("200").Value
		ok.Description = ptr("A stream of results, one JSON object per line.")
		s := ok.Content.Get("application/json").Schema.Value
		s.Title = strings.Replace(s.Title, "of v1", "of ", 1) // the schemas lost their prefix
	}
	return nil
}

func ptr(s string) *string { return &s }

// isStream reports whether op answers with a stream (protoc-gen-openapiv2 titles the message
// of each line "Stream result of …").
func isStream(op *openapi3.Operation) bool {
	ok := op.Responses.Value("200")
	if ok == nil || ok.Value == nil {
		return false
	}
	mt := ok.Value.Content.Get("application/json")
	return mt != nil && mt.Schema != nil && mt.Schema.Value != nil && strings.HasPrefix(mt.Schema.Value.Title, "Stream result of")
}

// summarize turns protoc-gen-openapiv2's summary, the RPC's whole comment ("UpdateJob changes
// … . A stale version …"), into a one-sentence summary without the method name and a description
// of the rest.
func summarize(opID, summary, description string) (string, string) {
	text := strings.TrimSpace(oneLine(summary))
	if name := opID[strings.Index(opID, "_")+1:]; strings.HasPrefix(text, name+" ") {
		r := []rune(strings.TrimPrefix(text, name+" "))
		r[0] = unicode.ToUpper(r[0])
		text = string(r)
	}
	first, rest := text, ""
	for i := 0; ; {
		j := strings.Index(text[i:], ". ")
		if j < 0 {
			break
		}
		i += j
		if strings.HasSuffix(text[:i], "e.g") || strings.HasSuffix(text[:i], "i.e") {
			i += 2 // not the end of a sentence
			continue
		}
		first, rest = text[:i+1], text[i+2:]
		break
	}
	if description != "" {
		rest = strings.TrimSpace(rest + "\n\n" + description)
	}
	return first, rest
}

// oneLine joins a proto comment's lines into paragraphs.
func oneLine(s string) string {
	paras := strings.Split(s, "\n\n")
	for i, p := range paras {
		paras[i] = strings.Join(strings.Fields(p), " ")
	}
	return strings.Join(paras, "\n\n")
}

// errorComponents adds the shared error responses.
func errorComponents(doc *openapi3.T) {
	doc.Components.Responses = openapi3.ResponseBodies{}
	if doc.Components.Schemas == nil {
		doc.Components.Schemas = openapi3.Schemas{}
	}
	doc.Components.Schemas["StreamError"] = &openapi3.SchemaRef{Value: &openapi3.Schema{
		Type:        &openapi3.Types{"object"},
		Description: "The error of a streamed response (grpc-gateway wraps it, as it wraps each result): a Status under `error`.",
		Properties:  openapi3.Schemas{"error": {Ref: "#/components/schemas/Status"}},
	}}
	for _, e := range errorResponses {
		desc := e.desc
		example := map[string]any{
			"code": e.code, "message": e.message,
			"details": []any{map[string]any{
				"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": e.reason, "domain": "jobmesh.dev", "metadata": map[string]any{},
			}},
		}
		doc.Components.Responses[e.name] = &openapi3.ResponseRef{Value: &openapi3.Response{
			Description: &desc,
			Content: openapi3.Content{"application/json": &openapi3.MediaType{
				Schema:  &openapi3.SchemaRef{Ref: "#/components/schemas/Status"},
				Example: example,
			}},
		}}
		// A stream operation answers the same errors, wrapped: {"error": Status}.
		doc.Components.Responses["Stream"+e.name] = &openapi3.ResponseRef{Value: &openapi3.Response{
			Description: &desc,
			Content: openapi3.Content{"application/json": &openapi3.MediaType{
				Schema:  &openapi3.SchemaRef{Ref: "#/components/schemas/StreamError"},
				Example: map[string]any{"error": example},
			}},
		}}
	}
}

// addGatewayPaths documents what the gateway serves beside the services: health and this
// document, both without a token.
func addGatewayPaths(doc *openapi3.T) {
	noToken := &openapi3.SecurityRequirements{}
	health := openapi3.NewResponses()
	health.Delete("default")
	health.Set("200", &openapi3.ResponseRef{Value: &openapi3.Response{
		Description: ptr("The gateway is up."),
		Content: openapi3.Content{"text/plain": &openapi3.MediaType{
			Schema: &openapi3.SchemaRef{Value: &openapi3.Schema{Type: &openapi3.Types{"string"}}}, Example: "ok\n",
		}},
	}})
	doc.Paths.Set("/healthz", &openapi3.PathItem{Get: &openapi3.Operation{
		OperationID: "Gateway_Health", Tags: []string{"Gateway"}, Security: noToken,
		Summary:   "Tells that the gateway is up (the services behind it may not be).",
		Responses: health,
	}})
	spec := openapi3.NewResponses()
	spec.Delete("default")
	spec.Set("200", &openapi3.ResponseRef{Value: &openapi3.Response{
		Description: ptr("This document."),
		Content: openapi3.Content{"application/json": &openapi3.MediaType{
			Schema: &openapi3.SchemaRef{Value: &openapi3.Schema{Type: &openapi3.Types{"object"}}},
		}},
	}})
	doc.Paths.Set("/api/openapi.json", &openapi3.PathItem{Get: &openapi3.Operation{
		OperationID: "Gateway_OpenAPI", Tags: []string{"Gateway"}, Security: noToken,
		Summary:   "Returns this document, with the gateway's version as info.version.",
		Responses: spec,
	}})
}
