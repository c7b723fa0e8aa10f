package uitest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jobmesh/jobmesh/internal/devstack"
)

const adminPassword = "e2e-admin-password"

// startStack starts a fresh jobmesh dev stack on free ports, stopped when the test ends.
func startStack(t *testing.T) *devstack.Stack {
	t.Helper()
	any0 := "127.0.0.1:0"
	// The services live on the context Start is given: the test's, which ends with the test.
	st, err := devstack.Start(t.Context(), devstack.Config{
		DataDir: t.TempDir(), UnsafeEtcd: true, AdminPassword: adminPassword,
		HTTPAddr: any0, SchedulerAddr: any0, RegistryAddr: any0, LogsAddr: any0, AuthAddr: any0, AgentAddr: any0, EtcdAddr: any0,
	})
	if err != nil {
		t.Fatalf("devstack.Start: %v", err)
	}
	t.Cleanup(st.Stop)
	return st
}

// runScript runs the e2e/ browser script with env added to the environment, in Chromium
// (/usr/bin/chromium or JOBMESH_CHROMIUM), and fails the test if the script fails. Screenshots go
// to a scratch directory unless JOBMESH_UI_SCREENSHOTS names one (relative to the repository
// root, e.g. docs/screenshots).
func runScript(t *testing.T, script string, timeout time.Duration, env ...string) {
	t.Helper()
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
	shots := os.Getenv("JOBMESH_UI_SCREENSHOTS")
	switch {
	case shots == "":
		shots = t.TempDir()
	case !filepath.IsAbs(shots):
		shots = filepath.Join(e2e, "..", shots)
	}
	run, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(run, node, script)
	cmd.Dir = e2e
	cmd.Env = append(append(os.Environ(), env...), "JOBMESH_SCREENSHOTS="+shots, "CHROMIUM="+chromium)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.WaitDelay = 10 * time.Second
	err = cmd.Run()
	t.Logf("browser test output:\n%s", out.String())
	if err != nil {
		t.Fatalf("browser test %s: %v", script, err)
	}
}

// bulkJobs is how many jobs the test adds to the other group, so that lists have pages.
const bulkJobs = 55

// TestConsole runs e2e/console.test.mjs against a fresh stack: log in, create a cron job and watch
// it run, read its log (the run's card filling in while it runs), kill a long run, use the GLUE
// editor, pick the time zone times are shown in, page through lists by number, filter the audit
// trail, use the jobs page at 800 px, switch language (server errors included), and check that a
// viewer cannot edit and an operator limited to one group cannot see another.
func TestConsole(t *testing.T) {
	t.Parallel()
	st := startStack(t)
	c := &client{t: t, base: "http://" + st.HTTPAddr + "/api/v1"}
	c.token = c.login("admin", adminPassword)

	// Another group with a job in it, which the operator of the local group must not see.
	var grp struct {
		Group struct {
			ID string `json:"id"`
		} `json:"group"`
	}
	c.do("POST", "/executor-groups", map[string]any{"app_name": "elsewhere", "title": "Elsewhere",
		"address_type": "ADDRESS_TYPE_MANUAL", "manual_addresses": []string{"127.0.0.1:1"}}, &grp)
	var job struct {
		Job struct {
			ID string `json:"id"`
		} `json:"job"`
	}
	c.do("POST", "/jobs", map[string]any{"name": "elsewhere-nightly", "group_id": grp.Group.ID, "handler": "demo",
		"schedule": map[string]any{"type": "SCHEDULE_TYPE_CRON", "expression": "0 0 3 * * ?"}}, &job)
	// Enough jobs for the job list to have three pages of ten, and the audit trail two of fifty.
	for i := range bulkJobs {
		c.do("POST", "/jobs", map[string]any{"name": fmt.Sprintf("report-%02d", i+1), "group_id": grp.Group.ID, "handler": "demo",
			"schedule": map[string]any{"type": "SCHEDULE_TYPE_NONE"}}, nil)
	}
	mine := strconv.FormatInt(st.GroupID, 10)
	for _, u := range []struct{ name, role string }{{"vera", "ROLE_VIEWER"}, {"otto", "ROLE_OPERATOR"}} {
		c.do("POST", "/users", map[string]any{"password": u.name + "-pass-phrase",
			"user": map[string]any{"username": u.name, "role": u.role, "group_ids": []string{mine}}}, nil)
	}

	runScript(t, "console.test.mjs", 4*time.Minute,
		"JOBMESH_URL=http://"+st.HTTPAddr,
		"JOBMESH_ADMIN_PASSWORD="+adminPassword,
		"JOBMESH_GROUP_ID="+mine,
		"JOBMESH_VIEWER=vera", "JOBMESH_VIEWER_PASSWORD=vera-pass-phrase",
		"JOBMESH_OPERATOR=otto", "JOBMESH_OPERATOR_PASSWORD=otto-pass-phrase",
		"JOBMESH_OTHER_GROUP=elsewhere", "JOBMESH_OTHER_JOB=elsewhere-nightly", "JOBMESH_OTHER_JOB_ID="+job.Job.ID,
		"JOBMESH_OTHER_GROUP_ID="+grp.Group.ID,
	)
}

// client makes REST calls as one user.
type client struct {
	t     *testing.T
	base  string
	token string
}

func (c *client) login(user, password string) string {
	c.t.Helper()
	var resp struct {
		Token string `json:"token"`
	}
	c.do("POST", "/auth/login", map[string]any{"username": user, "password": password}, &resp)
	if resp.Token == "" {
		c.t.Fatalf("login as %s: no token", user)
	}
	return resp.Token
}

// do calls the API and fails the test on any answer but 200.
func (c *client) do(method, path string, body, out any) {
	c.t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		c.t.Fatal(err)
	}
	req, err := http.NewRequest(method, c.base+path, bytes.NewReader(b))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		c.t.Fatalf("%s %s = %d: %s", method, path, resp.StatusCode, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			c.t.Fatalf("%s %s: decode %q: %v", method, path, raw, err)
		}
	}
}
