// Package etcdembed runs an etcd server inside the process: the coordination store of
// `jobmesh dev` and of tests, so neither needs an etcd binary.
package etcdembed

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/jobmesh/jobmesh/services/executor-agent/meshtls"
)

// Config says where the server keeps its data and listens.
type Config struct {
	// Dir holds the data; required.
	Dir string
	// ClientAddr is the client listen address, "127.0.0.1:0" (the default) picks a free port.
	ClientAddr string
	// PeerAddr is the peer listen address (the member's raft port, which a single member uses
	// for nothing else); "127.0.0.1:0" (the default) picks a free port.
	PeerAddr string
	// Unsafe skips fsync: for tests only.
	Unsafe bool
	// TLS, when set, makes the server serve its clients over TLS with TLS.Cert and TLS.Key and
	// require a client certificate signed by TLS.CA.
	TLS *meshtls.Files
	// ClientTLS is the certificate Client presents, and the CA it verifies the server against;
	// required with TLS.
	ClientTLS *meshtls.Files
}

// Server is a running embedded etcd.
type Server struct {
	e         *embed.Etcd
	endpoint  string
	clientTLS *tls.Config // nil without TLS
	once      sync.Once
}

// Start starts a single-member etcd and waits until it serves.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, errors.New("etcdembed: dir: required")
	}
	addr := cfg.ClientAddr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	c := embed.NewConfig()
	c.Dir = cfg.Dir
	c.Logger = "zap"
	c.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	scheme := "http"
	var clientTLS *tls.Config
	if cfg.TLS != nil {
		if cfg.ClientTLS == nil {
			return nil, errors.New("etcdembed: client TLS: required with TLS")
		}
		id, err := meshtls.Load(*cfg.ClientTLS)
		if err != nil {
			return nil, fmt.Errorf("etcdembed: client TLS: %w", err)
		}
		clientTLS = id.ClientConfig()
		scheme = "https"
		c.ClientTLSInfo = transport.TLSInfo{CertFile: cfg.TLS.Cert, KeyFile: cfg.TLS.Key, TrustedCAFile: cfg.TLS.CA, ClientCertAuth: true}
	}
	cu, err := url.Parse(scheme + "://" + addr)
	if err != nil {
		return nil, fmt.Errorf("etcdembed: client addr %q: %w", addr, err)
	}
	peer := cfg.PeerAddr
	if peer == "" {
		peer = "127.0.0.1:0"
	}
	pu, err := url.Parse("http://" + peer)
	if err != nil || pu.Port() == "" {
		return nil, fmt.Errorf("etcdembed: peer addr %q: want host:port", peer)
	}
	c.ListenClientUrls, c.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	c.ListenPeerUrls, c.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	c.InitialCluster = c.Name + "=" + pu.String()
	c.TickMs, c.ElectionMs = 10, 100
	c.UnsafeNoFsync = cfg.Unsafe
	// Keep history short: the registry re-lists after a compaction anyway.
	c.AutoCompactionMode, c.AutoCompactionRetention = "periodic", "1h"
	e, err := embed.StartEtcd(c)
	if err != nil {
		return nil, fmt.Errorf("etcdembed: start: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcdembed: start: %w", err)
	case <-ctx.Done():
		e.Close()
		return nil, fmt.Errorf("etcdembed: start: %w", ctx.Err())
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, errors.New("etcdembed: start: not ready after 60s")
	}
	return &Server{e: e, endpoint: scheme + "://" + e.Clients[0].Addr().String(), clientTLS: clientTLS}, nil
}

// ClientTLS is the TLS configuration of the server's clients (Config.ClientTLS); nil without TLS.
func (s *Server) ClientTLS() *tls.Config { return s.clientTLS }

// Endpoint is the client URL to dial.
func (s *Server) Endpoint() string { return s.endpoint }

// Client returns a new client of the server; close it before Close, or Close waits for it.
func (s *Server) Client() (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{s.endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), TLS: s.clientTLS})
}

// Close stops the server. It is idempotent.
func (s *Server) Close() { s.once.Do(s.e.Close) }
