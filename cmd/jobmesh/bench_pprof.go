package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"strings"
	"time"
)

// checkPprofAddr refuses a --pprof-addr that is not a loopback host:port: profiles and the
// command line (which may carry secrets) must never be reachable from another host.
func checkPprofAddr(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--pprof-addr %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("--pprof-addr %q: want a loopback address (127.0.0.1:port or [::1]:port)", addr)
}

// pprofHandler serves net/http/pprof to callers that present token as a bearer token.
func pprofHandler(token string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		got := sha256.Sum256([]byte(tok))
		if !ok || token == "" || subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, "pprof needs the internal token as a bearer token", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// servePprof serves /debug/pprof/ on the process's --pprof-addr (JOBMESH_PPROF_ADDR), when set,
// to callers with the internal token, until the process closes. `jobmesh bench --pprof-dir`
// sets it to profile the processes it starts.
func (p *process) servePprof() error {
	addr := p.mesh.PprofAddr
	if addr == "" {
		return nil
	}
	if err := checkPprofAddr(addr); err != nil {
		return err
	}
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
	if err != nil {
		return fmt.Errorf("--pprof-addr: %w", err)
	}
	srv := &http.Server{Handler: pprofHandler(p.mesh.InternalToken), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.log.Warn("pprof server ended", "error", err)
		}
	}()
	p.onClose(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	p.pprofAddr = ln.Addr().String()
	p.log.Info("serving pprof (internal token required)", "pprof_url", "http://"+ln.Addr().String()+"/debug/pprof/")
	return nil
}
