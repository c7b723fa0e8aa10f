package devstack_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestXxlAdminAPIInDev: `jobmesh dev` serves the XXL-JOB admin API at /xxl-job-admin, through the
// real guard and mutual TLS: an executor with its group's token joins the live view (kind
// XXL_JOB in GET /api/v1/executors), a wrong token is refused XXL-JOB's way, and registryRemove
// takes it out.
func TestXxlAdminAPIInDev(t *testing.T) {
	t.Parallel()
	st := startStack(t, "")
	base := "http://" + st.HTTPAddr
	const app, token = "xxl-dev", "xxl-dev-token"
	if code := call(t, "POST", base+"/api/v1/executor-groups", map[string]any{"app_name": app, "title": "XXL", "access_token": token}, nil); code != http.StatusOK {
		t.Fatalf("create group = %d", code)
	}
	post := func(path, tok string) string {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), "POST", base+"/xxl-job-admin/api/"+path,
			strings.NewReader(`{"registryGroup":"EXECUTOR","registryKey":"`+app+`","registryValue":"http://127.0.0.1:28081/"}`))
		req.Header.Set("XXL-JOB-ACCESS-TOKEN", tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s = HTTP %d %s, want 200", path, resp.StatusCode, b)
		}
		return string(b)
	}
	// waitKinds polls the REST executor list of app until it is want (the kinds in order).
	waitKinds := func(want ...string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; {
			var list struct {
				Executors []struct {
					Kind    string `json:"kind"`
					Address string `json:"address"`
				} `json:"executors"`
			}
			call(t, "GET", base+"/api/v1/executors?app_name="+app, nil, &list)
			var got []string
			for _, e := range list.Executors {
				got = append(got, e.Kind+" "+e.Address)
			}
			if strings.Join(got, ",") == strings.Join(want, ",") {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("executors of %s = %v, want %v within 10s", app, got, want)
			}
			select {
			case <-time.After(50 * time.Millisecond):
			case <-t.Context().Done():
			}
		}
	}
	if got := post("registry", "not-the-token"); got != `{"code":500,"msg":"The access token is wrong."}` {
		t.Errorf("registry with a wrong token = %s, want the wrong-token answer", got)
	}
	if got := post("registry", token); got != `{"code":200}` {
		t.Fatalf("registry with the group's token = %s, want {\"code\":200}", got)
	}
	waitKinds("EXECUTOR_KIND_XXL_JOB http://127.0.0.1:28081/")
	if got := post("registryRemove", token); got != `{"code":200}` {
		t.Fatalf("registryRemove = %s, want {\"code\":200}", got)
	}
	waitKinds()
}
