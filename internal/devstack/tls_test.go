package devstack_test

import (
	"context"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	"github.com/jobmesh/jobmesh/internal/devstack"
	"github.com/jobmesh/jobmesh/services/executor-agent/meshtls"
)

// healthy asks addr's health service over opt.
func healthy(t *testing.T, addr string, opt grpc.DialOption) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err = healthgrpc.NewHealthClient(conn).Check(ctx, &healthgrpc.HealthCheckRequest{})
	return err
}

// beat calls the agent's Beat over opt with the group's access token.
func beat(t *testing.T, st *devstack.Stack, opt grpc.DialOption) error {
	t.Helper()
	conn, err := grpc.NewClient(st.AgentAddr, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+st.GroupToken)
	_, err = executorv1.NewExecutorServiceClient(conn).Beat(ctx, &executorv1.BeatRequest{})
	return err
}

// TestEveryPortIsMutualTLS: every gRPC port of the stack (scheduler, registry, logsvc, auth, the
// local agent) and its etcd refuse a plaintext client and a client whose certificate comes from
// another CA, and serve a client with a certificate of the stack's CA.
func TestEveryPortIsMutualTLS(t *testing.T) {
	t.Parallel()
	st := startStack(t, "")
	ca, err := meshtls.EnsureCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	files, err := ca.Leaf("stranger")
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := meshtls.Load(files)
	if err != nil {
		t.Fatal(err)
	}
	plaintext := (*meshtls.Identity)(nil).DialOption()

	for name, addr := range map[string]string{"scheduler": st.SchedulerAddr, "registry": st.RegistryAddr, "logsvc": st.LogsAddr, "auth": st.AuthAddr} {
		if err := healthy(t, addr, st.TLS.DialOption()); err != nil {
			t.Errorf("%s over mutual TLS: %v", name, err)
		}
		if err := healthy(t, addr, plaintext); err == nil {
			t.Errorf("%s: served a plaintext client, want refused", name)
		}
		if err := healthy(t, addr, stranger.DialOption()); err == nil {
			t.Errorf("%s: served a client of another CA, want refused", name)
		}
	}
	if err := beat(t, st, st.TLS.DialOption()); err != nil {
		t.Errorf("agent over mutual TLS: %v", err)
	}
	if err := beat(t, st, plaintext); err == nil {
		t.Error("agent: served a plaintext client, want refused")
	}
	if err := beat(t, st, stranger.DialOption()); err == nil {
		t.Error("agent: served a client of another CA, want refused")
	}

	etcdGet := func(cfg clientv3.Config) error {
		cfg.Endpoints, cfg.DialTimeout, cfg.Logger = []string{st.EtcdEndpoint}, 5*time.Second, zap.NewNop()
		c, err := clientv3.New(cfg)
		if err != nil {
			return err
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		_, err = c.Get(ctx, "/jobmesh")
		return err
	}
	if err := etcdGet(clientv3.Config{TLS: st.EtcdTLS}); err != nil {
		t.Errorf("etcd with the services' client certificate: %v", err)
	}
	noCert := st.EtcdTLS.Clone()
	noCert.GetClientCertificate = nil
	if err := etcdGet(clientv3.Config{TLS: noCert}); err == nil {
		t.Error("etcd: served a client without a certificate, want refused")
	}
	mesh := st.TLS.ClientConfig() // the mesh's certificate is not etcd's
	mesh.RootCAs = noCert.RootCAs
	if err := etcdGet(clientv3.Config{TLS: mesh}); err == nil {
		t.Error("etcd: served a client with the mesh's (agent's) certificate, want refused")
	}
}

// TestDevGroupHasAccessToken: the local agent's group gets an access token at first start, the
// agent expects it (a call without it is refused), and a later start on the same data directory
// keeps the token and the certificates.
func TestDevGroupHasAccessToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	start := func() *devstack.Stack {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		any0 := "127.0.0.1:0"
		st, err := devstack.Start(ctx, devstack.Config{
			DataDir: dir, UnsafeEtcd: true,
			HTTPAddr: any0, SchedulerAddr: any0, RegistryAddr: any0, LogsAddr: any0, AuthAddr: any0, AgentAddr: any0, EtcdAddr: any0,
		})
		if err != nil {
			t.Fatalf("devstack.Start: %v", err)
		}
		return st
	}
	st := start()
	if len(st.GroupToken) < 32 {
		t.Fatalf("dev group's access token = %q, want a random secret", st.GroupToken)
	}
	conn, err := grpc.NewClient(st.RegistryAddr, st.TLS.DialOption())
	if err != nil {
		t.Fatal(err)
	}
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+st.InternalToken)
	g, err := registryv1.NewRegistryServiceClient(conn).GetExecutorGroup(ctx, &registryv1.GetExecutorGroupRequest{Id: st.GroupID})
	conn.Close()
	if err != nil {
		t.Fatal(err)
	}
	if got := g.GetGroup().GetAccessToken(); got != st.GroupToken {
		t.Errorf("stored group token = %q, want the agent's %q", got, st.GroupToken)
	}
	saved := *st
	saved.GroupToken = ""
	if err := beat(t, &saved, st.TLS.DialOption()); err == nil {
		t.Error("agent: served a call without the group's access token, want refused")
	}
	token := st.GroupToken
	caPEM, err := os.ReadFile(st.TLSFiles.CA)
	if err != nil {
		t.Fatal(err)
	}
	st.Stop()

	st = start()
	defer st.Stop()
	if st.GroupToken != token {
		t.Errorf("second start: token %q, want the first start's %q", st.GroupToken, token)
	}
	if again, _ := os.ReadFile(st.TLSFiles.CA); string(again) != string(caPEM) {
		t.Error("second start made a new CA, want the first start's reused")
	}
	if err := beat(t, st, st.TLS.DialOption()); err != nil {
		t.Errorf("agent after a restart: %v", err)
	}
}
