package sdk_test

import (
	"context"
	"strings"
	"testing"
	"time"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	"github.com/jobmesh/jobmesh/services/executor-agent/meshtls"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk/sdktest"
)

// devIdentity issues a leaf of a fresh CA in dir and loads it.
func devIdentity(t *testing.T, dir, name string) *meshtls.Identity {
	t.Helper()
	ca, err := meshtls.EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	id, err := ca.Identity(name)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestAnonymousExecutorRefusesToStart(t *testing.T) {
	t.Parallel()
	base := sdk.Config{AppName: "anon", ListenAddr: "127.0.0.1:0", LogDir: t.TempDir()}
	// TLS alone does not do: every executor host holds a certificate of the mesh's CA, so it
	// would let one group's host run code on another's executor.
	for name, configure := range map[string]func(*sdk.Config){
		"nothing": func(*sdk.Config) {},
		"TLS":     func(c *sdk.Config) { c.TLS = devIdentity(t, t.TempDir(), "agent") },
	} {
		cfg := base
		configure(&cfg)
		if _, err := sdk.New(cfg); err == nil || !strings.Contains(err.Error(), "AccessToken") {
			t.Errorf("New with %s: err = %v, want one naming AccessToken", name, err)
		}
	}
	for name, configure := range map[string]func(*sdk.Config){
		"Insecure":          func(c *sdk.Config) { c.Insecure = true },
		"AccessToken":       func(c *sdk.Config) { c.AccessToken = "s3cret" },
		"TLS + AccessToken": func(c *sdk.Config) { c.TLS, c.AccessToken = devIdentity(t, t.TempDir(), "agent"), "s3cret" },
	} {
		cfg := base
		configure(&cfg)
		if _, err := sdk.New(cfg); err != nil {
			t.Errorf("New with %s: %v", name, err)
		}
	}
}

// An executor with TLS serves only callers with a certificate of its CA, and delivers its
// results to logsvc over mutual TLS.
func TestExecutorServesMutualTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	agentID, schedID := devIdentity(t, dir, "agent"), devIdentity(t, dir, "scheduler")
	stranger := devIdentity(t, t.TempDir(), "scheduler")
	ingest := sdktest.NewIngest()
	e, err := sdk.New(sdk.Config{
		AppName: "tls-app", InstanceID: "t1", ListenAddr: "127.0.0.1:0", LogsvcAddr: ingest.ServeTLS(t, devIdentity(t, dir, "logsvc")),
		LogDir: t.TempDir(), TLS: agentID, AccessToken: "tls-app-token", Logger: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	e.Handle("ok", func(context.Context, *sdk.Job) error { return nil })
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sdktest.Stop(e) })

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for name, cli := range map[string]executorv1.ExecutorServiceClient{
		"plaintext":                   sdktest.Client(t, e.Addr(), "tls-app-token"),
		"a certificate of another CA": sdktest.ClientTLS(t, e.Addr(), "tls-app-token", stranger),
	} {
		if _, err := cli.Beat(ctx, &executorv1.BeatRequest{}); err == nil {
			t.Errorf("Beat over %s: served, want refused", name)
		}
	}
	cli := sdktest.ClientTLS(t, e.Addr(), "tls-app-token", schedID)
	resp, err := cli.Run(ctx, &executorv1.RunRequest{Triggers: []*executorv1.Trigger{bean("61-1-0-0", 61, "ok", "")}})
	if err != nil {
		t.Fatalf("Run over mutual TLS: %v", err)
	}
	if got := resp.GetAcks()[0].GetOutcome(); got != executorv1.RunOutcome_RUN_OUTCOME_ACCEPTED {
		t.Fatalf("Run outcome = %v, want accepted", got)
	}
	if _, err := ingest.WaitResult(ctx, "61-1-0-0"); err != nil {
		t.Fatalf("result over mutual TLS to logsvc: %v", err)
	}
}
