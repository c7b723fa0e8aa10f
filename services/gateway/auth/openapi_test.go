package auth

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/jobmesh/jobmesh/services/gateway/openapi"
)

// TestOpenAPISecurityMatchesRules: the REST API document marks as anonymous exactly the
// operations whose rule is public, and every REST operation has a rule.
func TestOpenAPISecurityMatchesRules(t *testing.T) {
	t.Parallel()
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openapi.JSON, &doc); err != nil {
		t.Fatal(err)
	}
	n := 0
	for path, item := range doc.Paths {
		if !strings.HasPrefix(path, "/api/v1/") {
			continue // the gateway's own routes (health, the document), not a service's
		}
		for method, raw := range item {
			var op struct {
				OperationID string                 `json:"operationId"`
				Security    *[]map[string][]string `json:"security"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			svc, name, _ := strings.Cut(op.OperationID, "_")
			var r rule
			found := false
			for full, rr := range rules {
				if strings.HasSuffix(full, "."+svc+"/"+name) {
					r, found = rr, true
				}
			}
			if !found {
				t.Errorf("%s %s (%s): no access rule", method, path, op.OperationID)
				continue
			}
			n++
			anonymous := op.Security != nil && len(*op.Security) == 0
			if anonymous != (r.access == public) {
				t.Errorf("%s %s (%s): anonymous in the document %v, but the rule needs %s", method, path, op.OperationID, anonymous, r.access)
			}
		}
	}
	if n < 40 {
		t.Errorf("%d REST operations checked, want every one (more than 40)", n)
	}
}
