package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/jobmesh/jobmesh/internal/cli"
	"github.com/jobmesh/jobmesh/internal/devstack"
	"github.com/jobmesh/jobmesh/internal/etcdembed/etcdtest"
)

func TestMain(m *testing.M) { os.Exit(etcdtest.Main(m)) }

// session runs client commands against one stack with its own config file.
type session struct {
	t    *testing.T
	st   *devstack.Stack
	addr []string
}

// run runs one command and returns its exit code, stdout and stderr.
func (s *session) run(stdin string, args ...string) (int, string, string) {
	s.t.Helper()
	var out, errOut bytes.Buffer
	all := append(slices.Clone(args), s.addr...)
	code := cli.Run(s.t.Context(), all, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func (s *session) ok(stdin string, args ...string) string {
	s.t.Helper()
	code, out, errOut := s.run(stdin, args...)
	if code != cli.ExitOK {
		s.t.Fatalf("jobmesh %s = exit %d: %s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// TestClient drives the command-line client against a real stack: login, jobs from a file,
// trigger, runs list and tail, executors, logout, and the exit codes scripts rely on.
func TestClient(t *testing.T) {
	t.Setenv("JOBMESH_CONFIG", filepath.Join(t.TempDir(), "config.json"))
	t.Setenv("JOBMESH_TOKEN", "")
	t.Setenv("JOBMESH_ENDPOINT", "")
	t.Setenv("JOBMESH_TLS_CA", "")
	t.Setenv("JOBMESH_PASSWORD", "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	any0 := "127.0.0.1:0"
	dataDir := t.TempDir()
	st, err := devstack.Start(ctx, devstack.Config{
		DataDir: dataDir, UnsafeEtcd: true, AdminPassword: "correct horse battery staple",
		HTTPAddr: any0, SchedulerAddr: any0, RegistryAddr: any0, LogsAddr: any0, AuthAddr: any0, AgentAddr: any0, EtcdAddr: any0,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	s := &session{t: t, st: st, addr: []string{"--endpoint", "http://" + st.HTTPAddr}}

	// A gateway that does not answer, and an endpoint that is no URL.
	nowhere := &session{t: t, st: st, addr: []string{"--endpoint", "http://" + closedAddr(t)}}
	if code, _, errOut := nowhere.run("", "jobs", "list"); code != cli.ExitUnavailable || !strings.Contains(errOut, "cannot reach the gateway") {
		t.Errorf("jobs list against nothing = exit %d (%q), want %d saying the gateway cannot be reached", code, errOut, cli.ExitUnavailable)
	}
	bad := &session{t: t, st: st, addr: []string{"--endpoint", st.HTTPAddr}}
	if code, _, errOut := bad.run("", "jobs", "list"); code != cli.ExitUsage || !strings.Contains(errOut, "--endpoint") {
		t.Errorf("jobs list with a bare host:port endpoint = exit %d (%q), want %d naming --endpoint", code, errOut, cli.ExitUsage)
	}

	if code, _, errOut := s.run("", "jobs", "list"); code != cli.ExitAuth || !strings.Contains(errOut, "jobmesh login") {
		t.Errorf("jobs list before login = exit %d (%q), want %d and a hint to log in", code, errOut, cli.ExitAuth)
	}
	if code, _, errOut := s.run("wrong\n", "login", "--user", "admin", "--password-stdin"); code != cli.ExitAuth || strings.Contains(errOut, "log in with") {
		t.Errorf("login with a wrong password = exit %d (%q), want %d and no advice to log in", code, errOut, cli.ExitAuth)
	}
	if code, _, errOut := s.run("", "login", "--user", "admin"); code != cli.ExitUsage || !strings.Contains(errOut, "not a terminal") || !strings.Contains(errOut, "--password-stdin") {
		t.Errorf("login with no terminal and no password = exit %d (%q), want %d naming --password-stdin", code, errOut, cli.ExitUsage)
	}
	if out := s.ok("correct horse battery staple\n", "login", "--user", "admin", "--password-stdin"); !strings.Contains(out, "logged in to http://"+st.HTTPAddr+" as admin") {
		t.Errorf("login said %q", out)
	}
	// The config file keeps the endpoint with the token: later commands need no --endpoint.
	s.addr = nil

	jobFile := filepath.Join(t.TempDir(), "job.json")
	job := fmt.Sprintf(`{"group_id": "%d", "name": "cli-hello", "glue_type": "GLUE_TYPE_GLUE_SHELL",
		"glue_source": "echo hello from the cli; echo \"param=$1\"", "schedule": {"type": "SCHEDULE_TYPE_NONE"}}`, st.GroupID)
	if err := os.WriteFile(jobFile, []byte(job), 0o600); err != nil {
		t.Fatal(err)
	}
	var created struct{ ID string }
	if err := json.Unmarshal([]byte(s.ok("", "jobs", "create", "-f", jobFile, "-o", "json")), &created); err != nil || created.ID == "" {
		t.Fatalf("jobs create -o json: id %q, %v", created.ID, err)
	}
	// workflows: create from a file, trigger with a param, list the instances, see it end.
	wfFile := filepath.Join(t.TempDir(), "wf.json")
	wf := fmt.Sprintf(`{"group_id": "%d", "name": "cli-wf", "schedule": {"type": "SCHEDULE_TYPE_NONE"},
		"nodes": [{"id": "hello", "job_id": "%s"}]}`, st.GroupID, created.ID)
	if err := os.WriteFile(wfFile, []byte(wf), 0o600); err != nil {
		t.Fatal(err)
	}
	var createdWf struct{ ID string }
	if err := json.Unmarshal([]byte(s.ok("", "workflows", "create", "-f", wfFile, "-o", "json")), &createdWf); err != nil || createdWf.ID == "" {
		t.Fatalf("workflows create -o json: id %q, %v", createdWf.ID, err)
	}
	if out := s.ok("", "workflows", "list"); !strings.Contains(out, "cli-wf") {
		t.Errorf("workflows list:\n%s", out)
	}
	trigOut := s.ok("", "workflows", "trigger", createdWf.ID, "--param", "day=1")
	inst := strings.Fields(trigOut)[1] // "instance <id> (…"
	if !strings.HasPrefix(inst, "w"+createdWf.ID+"-") {
		t.Fatalf("workflows trigger printed %q", trigOut)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		if out := s.ok("", "workflows", "instances", createdWf.ID); strings.Contains(out, inst) && strings.Contains(out, "success") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("instance %s not successful within 30s:\n%s", inst, s.ok("", "workflows", "instance", inst))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code, _, errOut := s.run("", "workflows", "kill", inst); code == cli.ExitOK || !strings.Contains(errOut, "SUCCESS") {
		t.Errorf("workflows kill of an ended instance = exit %d (%q); want a refusal saying it is SUCCESS", code, errOut)
	}
	if out := s.ok("", "jobs", "list", "--name", "cli-"); !strings.Contains(out, "cli-hello") || !strings.Contains(out, "NEXT FIRE") {
		t.Errorf("jobs list table:\n%s", out)
	}
	ids := strings.Fields(s.ok("", "jobs", "trigger", created.ID, "--params", "42"))
	if len(ids) != 1 {
		t.Fatalf("jobs trigger printed %v, want one trigger id", ids)
	}
	// tail follows the run until it ends; its output is the script's.
	var tail string
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, out, errOut := s.run("", "runs", "tail", ids[0])
		if code == cli.ExitOK && strings.Contains(out, "param=42") {
			tail = out
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("runs tail %s = exit %d: %s%s", ids[0], code, out, errOut)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(tail, "hello from the cli") {
		t.Errorf("tail = %q", tail)
	}
	if out := s.ok("", "runs", "list", "--job", created.ID); !strings.Contains(out, ids[0]) || !strings.Contains(out, "success") {
		t.Errorf("runs list:\n%s", out)
	}
	if out := s.ok("", "executors", "list"); !strings.Contains(out, st.AgentAddr+" ") || !strings.Contains(out, "RUNNING") {
		t.Errorf("executors list lacks the local agent %s or the RUNNING column:\n%s", st.AgentAddr, out)
	} else if f := strings.Fields(out[strings.Index(out, st.AgentAddr):]); f[1] != "0" {
		t.Errorf("executors list: the agent runs %s runs, want 0 (the run ended):\n%s", f[1], out)
	}
	if out := s.ok("", "jobs", "stop", created.ID, "-o", "json"); !strings.Contains(out, "JOB_STATUS_STOPPED") {
		t.Errorf("jobs stop -o json:\n%s", out)
	}

	code, _, errOut := s.run("", "jobs", "get", "999999")
	if code != cli.ExitNotFound || strings.TrimSpace(errOut) != "jobmesh: job 999999 not found" {
		t.Errorf("jobs get 999999 = exit %d, %q; want %d, \"jobmesh: job 999999 not found\"", code, errOut, cli.ExitNotFound)
	}
	// An update based on a version that is no longer current says so, once.
	stale := filepath.Join(t.TempDir(), "stale.json")
	if err := os.WriteFile(stale, []byte(`{"version": "99", "name": "cli-stale"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = s.run("", "jobs", "update", created.ID, "-f", stale)
	if want := "jobmesh: conflict: job " + created.ID + " is at version "; code != cli.ExitConflict || !strings.HasPrefix(errOut, want) || strings.Count(errOut, "conflict") != 1 {
		t.Errorf("jobs update on a stale version = exit %d, %q; want %d, %q…", code, errOut, cli.ExitConflict, want)
	}

	// Exit codes that mean something.
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"jobs", "get", "abc"}, cli.ExitUsage},
		{[]string{"jobs", "frobnicate"}, cli.ExitUsage},
		{[]string{"jobs", "list", "--status", "sleepy"}, cli.ExitUsage},
		{[]string{"jobs", "get", "999999"}, cli.ExitNotFound},
		{[]string{"jobs", "trigger", created.ID, "--address", "not an address"}, cli.ExitInvalid},
		{[]string{"jobs", "trigger", created.ID, "--address", "127.0.0.1:1"}, cli.ExitInvalid}, // not in the job's group
	} {
		if code, out, errOut := s.run("", c.args...); code != c.want {
			t.Errorf("jobmesh %s = exit %d (%s%s), want %d", strings.Join(c.args, " "), code, out, errOut, c.want)
		}
	}
	badJob := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(badJob, []byte(fmt.Sprintf(`{"group_id": "%d", "name": "bad", "glue_type": "GLUE_TYPE_GLUE_SHELL", "glue_source": "true",
		"schedule": {"type": "SCHEDULE_TYPE_CRON", "expression": "not a cron"}}`, st.GroupID)), 0o600)
	if code, _, errOut := s.run("", "jobs", "create", "-f", badJob); code != cli.ExitInvalid || !strings.Contains(errOut, "schedule") {
		t.Errorf("create with a bad cron = exit %d (%q), want %d naming the field", code, errOut, cli.ExitInvalid)
	}
	s.ok("", "jobs", "delete", created.ID)
	s.ok("", "logout")
	if code, _, _ := s.run("", "jobs", "list"); code != cli.ExitAuth {
		t.Errorf("jobs list after logout = exit %d, want %d", code, cli.ExitAuth)
	}

	// On a terminal, login prompts for the password (read without echo).
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	defer tty.Close()
	// The terminal holds the typed line until the prompt reads it.
	if _, err := ptmx.Write([]byte("correct horse battery staple\n")); err != nil {
		t.Fatal(err)
	}
	var out, prompt bytes.Buffer
	if code := cli.Run(t.Context(), []string{"login", "--user", "admin"}, tty, &out, &prompt); code != cli.ExitOK {
		t.Fatalf("login on a terminal = exit %d: %s%s", code, out.String(), prompt.String())
	}
	if want := "Password for admin at http://" + st.HTTPAddr + ": "; !strings.HasPrefix(prompt.String(), want) || !strings.Contains(out.String(), "logged in") {
		t.Errorf("login on a terminal: prompt %q (want %q), output %q", prompt.String(), want, out.String())
	}
	s.ok("", "jobs", "list")
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestUsageNamesOperands: a command's -h shows the argument it needs, not only its flags.
func TestUsageNamesOperands(t *testing.T) {
	t.Setenv("JOBMESH_CONFIG", filepath.Join(t.TempDir(), "config.json"))
	for args, want := range map[string]string{
		"jobs get -h":  "Usage: jobmesh jobs get ID [flags]",
		"runs tail -h": "Usage: jobmesh runs tail RUN_ID [flags]",
		"jobs list -h": "Usage: jobmesh jobs list [flags]",
	} {
		var out, errOut bytes.Buffer
		code := cli.Run(t.Context(), strings.Fields(args), strings.NewReader(""), &out, &errOut)
		if code != cli.ExitOK || !strings.HasPrefix(errOut.String(), want) {
			t.Errorf("jobmesh %s = exit %d, %q; want exit 0 and a usage starting %q", args, code, errOut.String(), want)
		}
	}
}
