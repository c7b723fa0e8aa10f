package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/jobmesh/jobmesh/internal/firecheck"
	"github.com/jobmesh/jobmesh/internal/triggerid"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
)

// The handler kinds a bench's jobs run (--handler). With noop the bench agents' own handler
// records each fire; with the others the fire's side effect is an HTTP request to the bench's
// sink, a process of its own, which records when it arrived.
const (
	HandlerNoop   = "noop"   // the bench agent's in-process handler: records the fire and returns
	HandlerHTTP   = "http"   // the agent's built-in "http" handler: a GET to the sink
	HandlerShell  = "shell"  // a GLUE_SHELL (bash) script: a GET to the sink over /dev/tcp, then `echo hi`
	HandlerPython = "python" // a GLUE_PYTHON (python3) script: a GET to the sink over a socket, then print("hi")
)

// sinkName is the sink's process name in the topology and the report.
const sinkName = "sink"

// Handlers are the handler kinds, in the order the usage names them.
var Handlers = []string{HandlerNoop, HandlerHTTP, HandlerShell, HandlerPython}

// SinkConfig is the bench's HTTP sink: the neutral endpoint its http and script jobs call.
type SinkConfig struct {
	// HTTPAddr is the listen address; port 0 picks one.
	HTTPAddr string
}

// RunSink runs the sink until ctx ends. It prints "sink http <addr>" on stdout once it listens.
// It serves:
//
//	GET /fire[?hold_ms=]              a fire of an http job, named by the handler's X-Jobmesh-Trigger-Id header
//	GET /fire?job=&sched=&trigger=    a fire of a script job, which reports its own fire
//
// and, like a bench agent, GET /stats, /count and /executions over the fires it recorded, and
// /debug/pprof/. A fire is answered 200 with an empty body once recorded; a request that names
// no fire, 400.
func RunSink(ctx context.Context, cfg SinkConfig, stdout io.Writer) error {
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("--http-addr: %w", err)
	}
	s := newSink()
	mux := http.NewServeMux()
	s.routes(mux)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "sink http %s\n", ln.Addr())
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	case err := <-done:
		return fmt.Errorf("bench sink: %w", err)
	}
}

// sink records the fires' arrivals in a tally, as a bench agent records the fires it runs.
type sink struct {
	tally *firecheck.Tally
}

func newSink() *sink { return &sink{tally: firecheck.NewTally()} }

// routes adds the sink's endpoints to mux.
func (s *sink) routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /fire", s.fire)
	serveTally(mux, s.tally, func() agentStats { return agentStats{} })
}

// fire records one request's arrival.
func (s *sink) fire(w http.ResponseWriter, r *http.Request) {
	ns := time.Now().UnixNano()
	q := r.URL.Query()
	var hold time.Duration
	if v := q.Get("hold_ms"); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms < 0 {
			http.Error(w, "hold_ms: want a number of milliseconds", http.StatusBadRequest)
			return
		}
		hold = time.Duration(ms) * time.Millisecond
	}
	e, err := requestFire(r, ns)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.tally.Record(e)
	if hold > 0 {
		select {
		case <-time.After(hold):
		case <-r.Context().Done():
		}
	}
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusOK)
}

// requestFire reads the fire a request that arrived at ns names: an http handler's by its
// headers (httpFire), a script's by its query (scriptFire).
func requestFire(r *http.Request, ns int64) (firecheck.Execution, error) {
	if trigger := r.Header.Get(sdk.HeaderTriggerID); trigger != "" {
		return httpFire(trigger, r.Header.Get(sdk.HeaderJobID), ns)
	}
	q := r.URL.Query()
	return scriptFire(q.Get("job"), q.Get("sched"), q.Get("trigger"), ns)
}

// scriptFire reads a script's report of its own fire.
func scriptFire(job, sched, trigger string, ns int64) (firecheck.Execution, error) {
	id, err1 := strconv.ParseInt(job, 10, 64)
	ms, err2 := strconv.ParseInt(sched, 10, 64)
	if err := errors.Join(err1, err2); err != nil || trigger == "" {
		return firecheck.Execution{}, fmt.Errorf("fire: want the %s header (the http handler's), or job, sched and trigger (a script's; got job %q, sched %q, trigger %q)",
			sdk.HeaderTriggerID, job, sched, trigger)
	}
	return firecheck.Execution{JobID: id, TriggerID: trigger, ScheduledMs: ms, ArrivedNs: ns}, nil
}

// httpFire reads the fire of an http handler's request from its headers: the trigger id names
// the job and the scheduled time, and is itself the execution's id (a retry's differs, a fire
// sent twice keeps it). The job id header, when sent, must agree.
func httpFire(trigger, job string, ns int64) (firecheck.Execution, error) {
	id, ok := triggerid.Parse(trigger)
	if !ok {
		return firecheck.Execution{}, fmt.Errorf("fire: %s %q is not a scheduler's trigger id", sdk.HeaderTriggerID, trigger)
	}
	if job != "" && job != strconv.FormatInt(id.Job, 10) {
		return firecheck.Execution{}, fmt.Errorf("fire: %s %q is not the job of %s %q", sdk.HeaderJobID, job, sdk.HeaderTriggerID, trigger)
	}
	return firecheck.Execution{JobID: id.Job, TriggerID: trigger, ScheduledMs: id.ScheduledMs, ArrivedNs: ns}, nil
}

// httpParams are the "http" handler's params: a GET of the sink that holds the answer for hold.
// The URL is the same for every fire; the handler's headers name the fire.
func httpParams(sinkAddr string, hold time.Duration) string {
	url := fmt.Sprintf("http://%s/fire", sinkAddr)
	if hold > 0 {
		url += "?hold_ms=" + strconv.FormatInt(hold.Milliseconds(), 10)
	}
	return fmt.Sprintf(`{"url":%q,"timeout_seconds":30}`, url)
}

// shellScript is the GLUE_SHELL source of the bench's shell jobs: it reports its fire (from the
// JOBMESH_* variables) to the sink with an HTTP/1.0 GET over bash's /dev/tcp, so the side effect
// forks nothing, waits for the answer (failing unless it is 200), prints "hi", then sleeps hold
// (if any).
func shellScript(sinkAddr string, hold time.Duration) string {
	host, port, _ := net.SplitHostPort(sinkAddr)
	var b strings.Builder
	fmt.Fprintf(&b, `exec 3<>/dev/tcp/%s/%s || exit 1
printf 'GET /fire?job=%%s&sched=%%s&trigger=%%s HTTP/1.0\r\nHost: sink\r\n\r\n' "$JOBMESH_JOB_ID" "$JOBMESH_SCHEDULED_UNIX_MS" "$JOBMESH_TRIGGER_ID" >&3
IFS= read -r status <&3
exec 3<&-
case $status in
"HTTP/1."?" 200"*) ;;
*) echo "sink answered: $status" >&2; exit 1 ;;
esac
echo hi
`, host, port)
	if hold > 0 {
		fmt.Fprintf(&b, "sleep %s\n", strconv.FormatFloat(hold.Seconds(), 'f', -1, 64))
	}
	return b.String()
}

// pythonScript is the GLUE_PYTHON source of the bench's python jobs: as shellScript, with a plain
// socket (urllib would import far more than the request needs).
func pythonScript(sinkAddr string, hold time.Duration) string {
	host, port, _ := net.SplitHostPort(sinkAddr)
	var b strings.Builder
	fmt.Fprintf(&b, `import os, socket, sys
e = os.environ
s = socket.create_connection((%q, %s), timeout=30)
s.sendall(("GET /fire?job=%%s&sched=%%s&trigger=%%s HTTP/1.0\r\nHost: sink\r\n\r\n" %% (e["JOBMESH_JOB_ID"], e["JOBMESH_SCHEDULED_UNIX_MS"], e["JOBMESH_TRIGGER_ID"])).encode())
status = s.makefile("rb").readline().decode().strip()
s.close()
if status.split(" ")[1:2] != ["200"]:
    sys.exit("sink answered: " + status)
print("hi")
`, host, port)
	if hold > 0 {
		fmt.Fprintf(&b, "import time\ntime.sleep(%s)\n", strconv.FormatFloat(hold.Seconds(), 'f', -1, 64))
	}
	return b.String()
}
