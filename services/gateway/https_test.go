package gateway_test

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"testing"

	"github.com/jobmesh/jobmesh/services/executor-agent/meshtls"
	"github.com/jobmesh/jobmesh/services/gateway"
)

// TestServesHTTPS: with HTTPTLS the gateway's listener speaks HTTPS only, with that certificate.
func TestServesHTTPS(t *testing.T) {
	t.Parallel()
	ca, err := meshtls.EnsureCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	files, err := ca.Leaf("gateway")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(files.Cert, files.Key)
	if err != nil {
		t.Fatal(err)
	}
	down := "127.0.0.1:1"
	g, err := gateway.New(gateway.Config{ListenAddr: "127.0.0.1:0", SchedulerAddr: down, RegistryAddr: down, LogsAddr: down,
		HTTPTLS: &tls.Config{Certificates: []tls.Certificate{pair}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Stop)

	caPEM, err := os.ReadFile(files.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := hc.Get("https://" + g.Addr() + "/healthz")
	if err != nil {
		t.Fatalf("GET https /healthz: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "ok\n" {
		t.Errorf("GET https /healthz = %d %q, want 200 ok", resp.StatusCode, body)
	}
	if resp, err := http.Get("http://" + g.Addr() + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Error("GET http /healthz = 200, want HTTPS only")
		}
	}
}
