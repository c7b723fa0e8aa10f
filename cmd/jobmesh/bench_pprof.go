package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"
)

// pprofEnv names the hidden switch that makes a service process serve net/http/pprof: an
// address, set by `jobmesh bench --pprof-dir` to profile the processes it starts. It has no flag
// (and no help line) on purpose: it is a debugging aid, never something to deploy with.
const pprofEnv = "JOBMESH_PPROF_ADDR"

// servePprof serves /debug/pprof/ on $JOBMESH_PPROF_ADDR when it is set, until the process
// closes.
func (p *process) servePprof() error {
	addr := os.Getenv(pprofEnv)
	if addr == "" {
		return nil
	}
	if err := checkAddr(pprofEnv, addr); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s: %w", pprofEnv, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
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
	p.log.Info("serving pprof", "pprof_url", "http://"+ln.Addr().String()+"/debug/pprof/")
	return nil
}
