package bench

import (
	"context"
	"encoding/gob"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jobmesh/jobmesh/internal/firecheck"
	"github.com/jobmesh/jobmesh/services/executor-agent/meshtls"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
)

// The bench agents' handler names: "bench" records the fire, "probe" only counts it (the
// driver's way to see that the scheduler leader routes to every agent).
const (
	benchHandler = "bench"
	probeHandler = "probe"
)

// AgentConfig is one bench agent: an SDK executor whose bench handler does nothing but record
// when each fire arrived, in memory, served to the driver over a small HTTP endpoint at the end.
// It runs the built-in handlers too (http, scripts), for --handler http, shell and python.
type AgentConfig struct {
	// App is the executor group's app name; Instance names this agent in it.
	App, Instance string
	// RegistryAddr is where the agent registers; LogsAddr where it delivers; GroupToken the
	// group's access token it presents to both (and expects from the scheduler).
	RegistryAddr, LogsAddr, GroupToken string
	// LogDir holds the executor's run logs and spool.
	LogDir string
	// GRPCAddr is ExecutorService's listen address; HTTPAddr the driver's endpoint. Port 0 picks.
	GRPCAddr, HTTPAddr string
	// TLS is the executor's mutual-TLS identity (ExecutorService and the registry and logsvc
	// connections); nil serves and dials plaintext.
	TLS *meshtls.Identity
	// Hold is how long the bench handler holds each fire after recording it (0: it returns at
	// once), as a job that does some work would.
	Hold time.Duration
	// HTTPAllowHosts are the hosts the built-in "http" handler may call: the bench's sink.
	HTTPAllowHosts []string
	// Log receives the executor's own logs.
	Log *slog.Logger
}

// agentStats is what GET /stats answers.
type agentStats struct {
	firecheck.Stats
	// Probes counts the runs of the probe handler.
	Probes int64 `json:"probes,omitempty"`
}

// RunAgent runs a bench agent until ctx ends. It prints "agent grpc <addr>" and
// "agent http <addr>" on stdout once it serves and is registered. The HTTP endpoint serves
// GET /stats (JSON), GET /count?from_ms=&to_ms= (a number), GET /executions?from_ms=&to_ms= (gob)
// and /debug/pprof/.
func RunAgent(ctx context.Context, cfg AgentConfig, stdout io.Writer) error {
	if cfg.App == "" || cfg.Instance == "" || cfg.RegistryAddr == "" || cfg.GroupToken == "" || cfg.LogDir == "" {
		return errors.New("bench agent: --app, --instance, --registry-addr, --group-token and --log-dir are required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	tally := firecheck.NewTally()
	var probes atomic.Int64
	ex, err := sdk.New(sdk.Config{AppName: cfg.App, InstanceID: cfg.Instance, ListenAddr: cfg.GRPCAddr, RegistryAddr: cfg.RegistryAddr,
		LogsvcAddr: cfg.LogsAddr, AccessToken: cfg.GroupToken, LogDir: cfg.LogDir, Version: "bench", Logger: cfg.Log, TLS: cfg.TLS,
		HTTPAllowHosts: cfg.HTTPAllowHosts})
	if err != nil {
		return err
	}
	ex.Handle(benchHandler, func(ctx context.Context, job *sdk.Job) error {
		_ = tally.Handle(ctx, job)
		return hold(ctx, cfg.Hold)
	})
	ex.Handle(probeHandler, func(context.Context, *sdk.Job) error { probes.Add(1); return nil })

	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("--http-addr: %w", err)
	}
	mux := http.NewServeMux()
	serveTally(mux, tally, func() agentStats { return agentStats{Probes: probes.Load()} })
	// The agent is a bench-only process: it always serves pprof, for --pprof-dir.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	httpDone := make(chan error, 1)
	go func() { httpDone <- srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()

	if err := ex.Start(ctx); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = ex.Stop(sctx)
	}()
	fmt.Fprintf(stdout, "agent grpc %s\nagent http %s\n", ex.Addr(), ln.Addr())
	select {
	case <-ctx.Done():
		return nil
	case err := <-httpDone:
		return fmt.Errorf("bench agent http: %w", err)
	}
}

// serveTally adds the driver's endpoints over tally to mux: GET /stats (JSON: stats() with the
// tally's running summary), GET /count and GET /executions (gob) of the fires scheduled within
// [from_ms, to_ms]. Bench agents and the sink serve the same, so the driver reads either alike.
func serveTally(mux *http.ServeMux, tally *firecheck.Tally, stats func() agentStats) {
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		s := stats()
		s.Stats = tally.Stats()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s)
	})
	mux.HandleFunc("GET /count", func(w http.ResponseWriter, r *http.Request) {
		from, err1 := msParam(r, "from_ms", math.MinInt64)
		to, err2 := msParam(r, "to_ms", math.MaxInt64)
		if err := errors.Join(err1, err2); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintln(w, tally.Count(from, to))
	})
	mux.HandleFunc("GET /executions", func(w http.ResponseWriter, r *http.Request) {
		from, err1 := msParam(r, "from_ms", math.MinInt64)
		to, err2 := msParam(r, "to_ms", math.MaxInt64)
		if err := errors.Join(err1, err2); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		_ = gob.NewEncoder(w).Encode(tally.Snapshot(from, to))
	})
}

// hold waits d, or until the fire's context ends (the fire was killed or timed out).
func hold(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// msParam reads a Unix ms query parameter, def when absent.
func msParam(r *http.Request, name string, def int64) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s %q: want Unix milliseconds", name, v)
	}
	return n, nil
}

// agentClient is the driver's side of an agent's HTTP endpoint.
type agentClient struct {
	name string
	addr string // host:port
	base string // http://host:port
	hc   *http.Client
}

func (a *agentClient) stats(ctx context.Context) (agentStats, error) {
	var s agentStats
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+"/stats", nil)
	if err != nil {
		return s, err
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return s, fmt.Errorf("agent %s stats: %w", a.name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("agent %s stats: %s", a.name, resp.Status)
	}
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// count returns how many runs of fires scheduled within [fromMs, toMs] the agent has had.
func (a *agentClient) count(ctx context.Context, fromMs, toMs int64) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/count?from_ms=%d&to_ms=%d", a.base, fromMs, toMs), nil)
	if err != nil {
		return 0, err
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("agent %s count: %w", a.name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("agent %s count: %s %v", a.name, resp.Status, err)
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// executions fetches the runs of fires scheduled within [fromMs, toMs].
func (a *agentClient) executions(ctx context.Context, fromMs, toMs int64) ([]firecheck.Execution, error) {
	url := fmt.Sprintf("%s/executions?from_ms=%d&to_ms=%d", a.base, fromMs, toMs)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("agent %s executions: %w", a.name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("agent %s executions: %s", a.name, resp.Status)
	}
	var out []firecheck.Execution
	if err := gob.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("agent %s executions: %w", a.name, err)
	}
	return out, nil
}
