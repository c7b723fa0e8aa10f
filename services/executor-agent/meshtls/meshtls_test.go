package meshtls_test

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/jobmesh/jobmesh/services/executor-agent/meshtls"
)

// identity issues a leaf named name from the CA in dir and loads it.
func identity(t *testing.T, dir, name string) *meshtls.Identity {
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

// serve starts a health server with opts and returns its address.
func serve(t *testing.T, opts ...grpc.ServerOption) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(opts...)
	healthgrpc.RegisterHealthServer(g, health.NewServer())
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	return ln.Addr().String()
}

func check(t *testing.T, addr string, opt grpc.DialOption) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = healthgrpc.NewHealthClient(conn).Check(ctx, &healthgrpc.HealthCheckRequest{})
	return err
}

func TestMutualTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	server := identity(t, dir, "server")
	client := identity(t, dir, "client")
	stranger := identity(t, t.TempDir(), "client") // another CA
	addr := serve(t, server.ServerOptions()...)

	if err := check(t, addr, client.DialOption()); err != nil {
		t.Fatalf("client of the same CA: %v", err)
	}
	if err := check(t, addr, (*meshtls.Identity)(nil).DialOption()); err == nil {
		t.Error("plaintext client: served, want refused")
	}
	if err := check(t, addr, stranger.DialOption()); err == nil {
		t.Error("client with a certificate of another CA: served, want refused")
	}
	// A client that trusts the CA but presents no certificate.
	noCert := client.ClientConfig()
	noCert.GetClientCertificate = nil
	if err := check(t, addr, grpcTLS(noCert)); err == nil {
		t.Error("client without a certificate: served, want refused")
	}
	// A client of another CA does not trust the server either.
	plainAddr := serve(t, stranger.ServerOptions()...)
	if err := check(t, plainAddr, client.DialOption()); err == nil {
		t.Error("server of another CA: accepted by the client, want refused")
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	if _, err := meshtls.Resolve(meshtls.Files{}, false); err != meshtls.ErrNoTLS {
		t.Errorf("no files, not insecure: err = %v, want ErrNoTLS", err)
	}
	if id, err := meshtls.Resolve(meshtls.Files{}, true); id != nil || err != nil {
		t.Errorf("insecure: %v, %v; want nil, nil", id, err)
	}
	if _, err := meshtls.Resolve(meshtls.Files{Cert: "c"}, true); err == nil {
		t.Error("files with insecure: no error")
	}
	if _, err := meshtls.Resolve(meshtls.Files{Cert: "c"}, false); err == nil {
		t.Error("cert without key and CA: no error")
	}
}

func TestLeafReusedAndReissued(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, err := meshtls.EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := ca.Leaf("node", "scheduler")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{f.Key, filepath.Join(dir, "ca-key.pem")} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != 0o600 {
			t.Errorf("%s mode = %v, want 0600", p, got)
		}
	}
	first, _ := os.ReadFile(f.Cert)

	// A later start (a new CA value from the same directory) reuses CA and leaf.
	again, err := meshtls.EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := again.Leaf("node", "scheduler"); err != nil {
		t.Fatal(err)
	}
	if second, _ := os.ReadFile(f.Cert); string(second) != string(first) {
		t.Error("leaf issued again for the same hosts, want reused")
	}
	// A new host issues it again, still under the same CA.
	if _, err := again.Leaf("node", "scheduler", "10.1.2.3"); err != nil {
		t.Fatal(err)
	}
	if third, _ := os.ReadFile(f.Cert); string(third) == string(first) {
		t.Error("leaf reused although it lacks a host, want issued again")
	}
	if _, err := meshtls.Load(f); err != nil {
		t.Errorf("reissued leaf: %v", err)
	}
}

func grpcTLS(c *tls.Config) grpc.DialOption {
	return grpc.WithTransportCredentials(credentials.NewTLS(c))
}
