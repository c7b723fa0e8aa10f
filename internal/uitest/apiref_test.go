package uitest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jobmesh/jobmesh/internal/devstack"
)

// TestAPIReference runs e2e/apiref.test.mjs against a fresh stack: the console's API reference
// lists every operation of the served OpenAPI document, opens one to its example and responses,
// follows a schema link, filters, and loads nothing from outside the gateway.
func TestAPIReference(t *testing.T) {
	t.Parallel()
	e2e, err := filepath.Abs(filepath.Join("..", "..", "e2e"))
	if err != nil {
		t.Fatal(err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed (scripts/test.sh installs what the browser test needs): %v", err)
	}
	if _, err := os.Stat(filepath.Join(e2e, "node_modules", "playwright-core")); err != nil {
		t.Fatalf("playwright-core is missing: run `npm ci` in e2e/ (scripts/test.sh does): %v", err)
	}
	chromium := os.Getenv("JOBMESH_CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("Chromium is missing (apt-get install chromium; scripts/test.sh does): %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	any0 := "127.0.0.1:0"
	st, err := devstack.Start(ctx, devstack.Config{
		DataDir: t.TempDir(), UnsafeEtcd: true, AdminPassword: adminPassword,
		HTTPAddr: any0, SchedulerAddr: any0, RegistryAddr: any0, LogsAddr: any0, AuthAddr: any0, AgentAddr: any0, EtcdAddr: any0,
	})
	if err != nil {
		t.Fatalf("devstack.Start: %v", err)
	}
	t.Cleanup(st.Stop)

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

	shots := os.Getenv("JOBMESH_UI_SCREENSHOTS")
	switch {
	case shots == "":
		shots = t.TempDir()
	case !filepath.IsAbs(shots):
		shots = filepath.Join(e2e, "..", shots)
	}
	run, cancelRun := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancelRun()
	cmd := exec.CommandContext(run, node, "apiref.test.mjs")
	cmd.Dir = e2e
	cmd.Env = append(os.Environ(),
		"JOBMESH_URL=http://"+st.HTTPAddr,
		"JOBMESH_ADMIN_PASSWORD="+adminPassword,
		"JOBMESH_OPERATIONS="+strconv.Itoa(ops),
		"JOBMESH_SCREENSHOTS="+shots,
		"CHROMIUM="+chromium,
	)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.WaitDelay = 10 * time.Second
	err = cmd.Run()
	t.Logf("browser test output:\n%s", out.String())
	if err != nil {
		t.Fatalf("browser test: %v", err)
	}
}
