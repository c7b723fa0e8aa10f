package uitest_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// TestAPIReference runs e2e/apiref.test.mjs against a fresh stack: the console's API reference
// lists every operation of the served OpenAPI document, opens one to its example and responses,
// follows a schema link, filters, and loads nothing from outside the gateway.
func TestAPIReference(t *testing.T) {
	t.Parallel()
	st := startStack(t)

	resp, err := http.Get("http://" + st.HTTPAddr + "/api/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	err = json.NewDecoder(resp.Body).Decode(&doc)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("GET /api/openapi.json: %v", err)
	}
	ops := 0
	for _, item := range doc.Paths {
		ops += len(item) // the document's path items hold operations only
	}

	runScript(t, "apiref.test.mjs", 2*time.Minute,
		"JOBMESH_URL=http://"+st.HTTPAddr,
		"JOBMESH_ADMIN_PASSWORD="+adminPassword,
		"JOBMESH_OPERATIONS="+strconv.Itoa(ops),
	)
}
