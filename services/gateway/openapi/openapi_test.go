package openapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobmesh/jobmesh/services/executor-agent/buildinfo"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/oapi-codegen/oapi-codegen/v2/pkg/codegen"

	// The generated client's one dependency: importing it here keeps it in go.mod, go.sum and
	// the module cache, so the client builds without a network.
	_ "github.com/oapi-codegen/runtime"

	"github.com/jobmesh/jobmesh/internal/devstack"
	"github.com/jobmesh/jobmesh/services/gateway/openapi"
)

// TestVersioned: the served document carries the version given, and nothing else changes.
func TestVersioned(t *testing.T) {
	t.Parallel()
	b, err := openapi.Versioned("v1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	var got, want map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(openapi.JSON, &want); err != nil {
		t.Fatal(err)
	}
	if v := got["info"].(map[string]any)["version"]; v != "v1.2.3" {
		t.Errorf("info.version = %v, want v1.2.3", v)
	}
	want["info"].(map[string]any)["version"] = "v1.2.3"
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if !bytes.Equal(g, w) {
		t.Error("Versioned changed more than info.version")
	}
}

// TestServedDocument starts a whole stack and checks the document its gateway serves: valid
// OpenAPI 3 (kin-openapi's loader and validator, examples included), complete metadata, the
// bearer scheme on every operation but the anonymous ones, clean path parameters and the error
// responses; then a Go client generated from it with oapi-codegen logs in and creates and fires
// a job against the stack.
func TestServedDocument(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	any0 := "127.0.0.1:0"
	st, err := devstack.Start(ctx, devstack.Config{
		DataDir: t.TempDir(), UnsafeEtcd: true,
		HTTPAddr: any0, SchedulerAddr: any0, RegistryAddr: any0, LogsAddr: any0, AuthAddr: any0, AgentAddr: any0, EtcdAddr: any0,
	})
	if err != nil {
		t.Fatalf("devstack.Start: %v", err)
	}
	t.Cleanup(st.Stop)
	base := "http://" + st.HTTPAddr

	raw := get(t, base+"/api/openapi.json", "")
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	if err != nil {
		t.Fatalf("load the served document: %v", err)
	}
	if err := doc.Validate(ctx); err != nil {
		t.Fatalf("the served document is not valid OpenAPI 3: %v", err)
	}
	t.Run("contents", func(t *testing.T) { checkContents(t, doc) })
	t.Run("generated client", func(t *testing.T) {
		// codegen.Generate prunes what it loads, so it gets its own copy.
		fresh, err := openapi3.NewLoader().LoadFromData(raw)
		if err != nil {
			t.Fatal(err)
		}
		out := runGeneratedClient(t, fresh, base, "admin", st.AdminPassword, strconv.FormatInt(st.GroupID, 10))
		var made struct {
			JobID      string   `json:"job_id"`
			TriggerIDs []string `json:"trigger_ids"`
		}
		if err := json.Unmarshal(out, &made); err != nil || made.JobID == "" || len(made.TriggerIDs) == 0 {
			t.Fatalf("client printed %q (%v), want a job id and trigger ids", out, err)
		}
		// The job is really there, as the client made it.
		tok := login(t, base, "admin", st.AdminPassword)
		var got struct {
			Job struct {
				Name     string `json:"name"`
				GroupID  string `json:"group_id"`
				Schedule struct {
					Expression string `json:"expression"`
				} `json:"schedule"`
			} `json:"job"`
		}
		if err := json.Unmarshal(get(t, base+"/api/v1/jobs/"+made.JobID, tok), &got); err != nil {
			t.Fatal(err)
		}
		if got.Job.Name != "made by the generated client" || got.Job.GroupID != strconv.FormatInt(st.GroupID, 10) || got.Job.Schedule.Expression != "0 0 3 * * ?" {
			t.Errorf("job %s = %+v, want the one the client created", made.JobID, got.Job)
		}
	})
}

// anonymous are the operations that take no token.
var anonymous = []string{"AuthService_Login", "Gateway_Health", "Gateway_OpenAPI"}

// dotted matches a path parameter named by a field path ({job.id}).
var dotted = regexp.MustCompile(`\{[^}]*\.[^}]*\}`)

func checkContents(t *testing.T, doc *openapi3.T) {
	if doc.OpenAPI != "3.0.3" || doc.Info.Title != "jobmesh API" || doc.Info.Description == "" || doc.Info.Version != buildinfo.Read("", "", "").Version {
		t.Errorf("openapi %q, info %q %q (description %d bytes), want 3.0.3, jobmesh API, the build information's version and a description",
			doc.OpenAPI, doc.Info.Title, doc.Info.Version, len(doc.Info.Description))
	}
	s := doc.Components.SecuritySchemes["bearerAuth"]
	if s == nil || s.Value.Type != "http" || s.Value.Scheme != "bearer" {
		t.Fatalf("security scheme bearerAuth = %+v, want http bearer", s)
	}
	if len(doc.Security) != 1 || doc.Security[0]["bearerAuth"] == nil {
		t.Errorf("document security = %v, want bearerAuth", doc.Security)
	}
	ops, streams := 0, 0
	for path, item := range doc.Paths.Map() {
		if dotted.MatchString(path) {
			t.Errorf("path %s: a parameter named by a field path", path)
		}
		for method, op := range item.Operations() {
			ops++
			name := method + " " + path + " (" + op.OperationID + ")"
			open := op.Security != nil && len(*op.Security) == 0
			if want := slices.Contains(anonymous, op.OperationID); open != want {
				t.Errorf("%s: anonymous %v, want %v", name, open, want)
			}
			if op.Summary == "" {
				t.Errorf("%s: no summary", name)
			}
			if !strings.HasPrefix(path, "/api/v1/") {
				continue
			}
			want := []string{"200", "401", "default"}
			if !open {
				want = append(want, "403")
			}
			if strings.Contains(path, "{") {
				want = append(want, "404")
			}
			if op.OperationID == "JobService_UpdateJob" || op.OperationID == "RegistryService_CreateExecutorGroup" {
				want = append(want, "409")
			}
			// A stream's errors come wrapped as its results do: {"error": Status}.
			errSchema := "#/components/schemas/Status"
			if ok := op.Responses.Value("200"); ok != nil && strings.HasPrefix(ok.Value.Content.Get("application/json").Schema.Value.Title, "Stream result of") {
				errSchema = "#/components/schemas/StreamError"
				streams++
			}
			for _, code := range want {
				r := op.Responses.Value(code)
				if r == nil {
					t.Errorf("%s: no %s response", name, code)
					continue
				}
				if code == "200" {
					continue
				}
				mt := r.Value.Content.Get("application/json")
				if mt == nil || mt.Schema == nil || mt.Schema.Ref != errSchema {
					t.Errorf("%s: response %s is not the error schema %s", name, code, errSchema)
				}
			}
		}
	}
	if ops < 40 {
		t.Errorf("%d operations, want every REST route (more than 40)", ops)
	}
	if streams < 2 {
		t.Errorf("%d stream operations, want the run tail and the executors' watch", streams)
	}
	if se := doc.Components.Schemas["StreamError"]; se == nil || se.Value.Properties["error"] == nil || se.Value.Properties["error"].Ref != "#/components/schemas/Status" {
		t.Error(`schema StreamError: want {"error": Status}`)
	}
	for _, id := range []string{"AuthService_Login", "JobService_CreateJob", "JobService_TriggerJob"} {
		op := operation(doc, id)
		if op == nil || op.RequestBody == nil || op.RequestBody.Value.Content.Get("application/json").Example == nil {
			t.Errorf("%s: no request example", id)
		}
	}
	// The paths clients and the console use are documented under their real routes.
	for _, p := range []string{"/api/v1/jobs/{id}", "/api/v1/jobs/{id}:trigger", "/api/v1/users/{id}", "/api/v1/executor-groups/{id}", "/api/v1/logs/{id}/lines"} {
		if doc.Paths.Value(p) == nil {
			t.Errorf("no path %s", p)
		}
	}
	if op := doc.Paths.Value("/api/v1/jobs/{id}"); op == nil || op.Patch == nil || op.Get == nil {
		t.Error("/api/v1/jobs/{id}: want GET and PATCH on the one path")
	}
}

func operation(doc *openapi3.T, id string) *openapi3.Operation {
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			if op.OperationID == id {
				return op
			}
		}
	}
	return nil
}

// runGeneratedClient generates a Go client from doc with oapi-codegen into a module of its own
// with testdata/client/main.go, builds it without a network, and runs it with args; it returns
// what the client printed.
func runGeneratedClient(t *testing.T, doc *openapi3.T, args ...string) []byte {
	t.Helper()
	code, err := codegen.Generate(doc, codegen.Configuration{
		PackageName: "client",
		Generate:    codegen.GenerateOptions{Client: true, Models: true},
	})
	if err != nil {
		t.Fatalf("oapi-codegen: %v", err)
	}
	dir := t.TempDir()
	main, err := os.ReadFile("testdata/client/main.go")
	if err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile("../../../go.sum") // has the runtime's hashes
	if err != nil {
		t.Fatal(err)
	}
	mod := "module jobmeshclient\n\ngo 1.26.0\n\nrequire github.com/oapi-codegen/runtime " + depVersion(t, "github.com/oapi-codegen/runtime") + "\n"
	for name, b := range map[string][]byte{"go.mod": []byte(mod), "go.sum": sum, "main.go": main, "client/client.go": []byte(code)} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the generated client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(dir, "client.bin")
	build := exec.CommandContext(ctx, goCmd, "build", "-o", bin, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOPROXY=off", "GOTOOLCHAIN=local")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the generated client: %v\n%s", err, out)
	}
	run := exec.CommandContext(ctx, bin, args...)
	var stderr bytes.Buffer
	run.Stderr = &stderr
	out, err := run.Output()
	if err != nil {
		t.Fatalf("the generated client failed: %v\n%s", err, stderr.Bytes())
	}
	return out
}

// depVersion is the version of module path that the repository's go.mod requires.
func depVersion(t *testing.T, path string) string {
	t.Helper()
	mod, err := os.ReadFile("../../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(path) + ` (v\S+)`).FindSubmatch(mod)
	if m == nil {
		t.Fatalf("go.mod does not require %s", path)
	}
	return string(m[1])
}

func get(t *testing.T, url, token string) []byte {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d %s, want 200", url, resp.StatusCode, b)
	}
	return b
}

func login(t *testing.T, base, user, password string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"username": user, "password": password})
	resp, err := http.Post(base+"/api/v1/auth/login", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Token == "" {
		t.Fatalf("login = %d (%v), want a token", resp.StatusCode, err)
	}
	return out.Token
}
