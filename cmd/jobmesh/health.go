package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/jobmesh/jobmesh/services/executor-agent/meshtls"
)

// runHealth is `jobmesh health TARGET...`: it exits 0 when every target is healthy, for container
// health checks (the service images have no shell or curl). A target is a gRPC address, asked
// with the standard health protocol (every jobmesh gRPC server answers it without a token), or an
// http(s) URL that must answer 2xx (the gateway's /healthz). gRPC targets are asked over mutual
// TLS: --tls-* (JOBMESH_TLS_*, which a service's container already has), else the client
// certificate of `jobmesh dev` under --data-dir, else plaintext with --insecure.
func runHealth(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		timeout time.Duration
		tlsf    meshTLSFlags
	)
	f := newFlags("jobmesh health", stderr)
	f.dur(&timeout, "timeout", 3*time.Second, "how long each target may take to answer")
	tlsf.add(f)
	if err := f.parse(args); err != nil {
		return err
	}
	if f.NArg() == 0 {
		return errors.New("usage: jobmesh health [--timeout d] [--tls-cert f --tls-key f --tls-ca f | --data-dir d | --insecure] <grpc host:port | http(s)://url>...")
	}
	var id *meshtls.Identity
	for _, target := range f.Args() {
		if !strings.HasPrefix(target, "http://") && !strings.HasPrefix(target, "https://") {
			var err error
			if id, err = tlsf.identity(); err != nil {
				return err
			}
			break
		}
	}
	var errs []error
	for _, target := range f.Args() {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		err := checkHealth(cctx, target, id)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", target, err))
			continue
		}
		fmt.Fprintf(stdout, "%s: serving\n", target)
	}
	return errors.Join(errs...)
}

func checkHealth(ctx context.Context, target string, id *meshtls.Identity) error {
	if strings.HasPrefix(target, "http://") || strings.HasPrefix(target, "https://") {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("HTTP %s", resp.Status)
		}
		return nil
	}
	if err := checkAddr("target", target); err != nil {
		return err
	}
	conn, err := grpc.NewClient(target, id.DialOption())
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := healthgrpc.NewHealthClient(conn).Check(ctx, &healthgrpc.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	if s := resp.GetStatus(); s != healthgrpc.HealthCheckResponse_SERVING {
		return fmt.Errorf("status %s", s)
	}
	return nil
}

// defaultDevDataDir is `jobmesh dev`'s default --data-dir, where `jobmesh health` looks for dev's
// client certificate when no TLS flag is given.
const defaultDevDataDir = ".data/dev"

// meshTLSFlags are how `jobmesh health` secures its gRPC connections: --tls-cert/--tls-key/
// --tls-ca, else --insecure, else the client certificate `jobmesh dev` made under --data-dir.
type meshTLSFlags struct {
	files    meshtls.Files
	insecure bool
	dataDir  string
}

func (t *meshTLSFlags) add(f *flags) {
	f.str(&t.files.Cert, "tls-cert", "", "PEM client certificate `file` (with --tls-key and --tls-ca)")
	f.str(&t.files.Key, "tls-key", "", "PEM private key `file` of --tls-cert")
	f.str(&t.files.CA, "tls-ca", "", "PEM CA bundle `file` the servers' certificates must chain to")
	f.boolean(&t.insecure, "insecure", false, "plaintext, for services started with --insecure")
	f.str(&t.dataDir, "data-dir", defaultDevDataDir, "jobmesh dev's data `directory`, whose client certificate is used without --tls-* flags")
}

// identity resolves the flags: the files given, plaintext (nil) with --insecure, else dev's
// client certificate under --data-dir; an error names the flags when none applies.
func (t *meshTLSFlags) identity() (*meshtls.Identity, error) {
	if !t.files.IsZero() || t.insecure {
		return meshtls.Resolve(t.files, t.insecure)
	}
	dev := meshtls.DevFiles(t.dataDir, "client")
	if _, err := os.Stat(dev.Cert); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no TLS: no jobmesh dev client certificate at %s (--data-dir %s); give --tls-cert, --tls-key and --tls-ca, or --insecure for plaintext", dev.Cert, t.dataDir)
	}
	id, err := meshtls.Load(dev)
	if err != nil {
		return nil, fmt.Errorf("--data-dir %s: %w", t.dataDir, err)
	}
	return id, nil
}
