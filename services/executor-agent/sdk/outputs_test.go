package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
)

// node makes tr a fire of workflow node "load" of instance w7-1000 with ctx as its context.
func node(tr *executorv1.Trigger, ctx map[string]string) *executorv1.Trigger {
	tr.Context, tr.WorkflowInstanceId, tr.WorkflowNodeId = ctx, "w7-1000", "load"
	return tr
}

var nodeContext = map[string]string{"bucket": "exports", "extract.rows": "10", "rows": "10", "note": "two words; $HOME"}

func TestHandlerReadsContextAndPublishesOutputs(t *testing.T) {
	t.Parallel()
	results := make(chan sdk.Result, 4)
	h := start(t, func(c *sdk.Config) { c.OnResult = func(r sdk.Result) { results <- r } })
	seen := make(chan *sdk.Job, 1)
	var refusals []string
	h.exec.Handle("publish", func(_ context.Context, job *sdk.Job) error {
		seen <- job
		if err := job.SetOutput("rows", "1"); err != nil {
			return err
		}
		if err := job.SetOutput("rows", job.Context["rows"]+"0"); err != nil { // replaced: one key
			return err
		}
		for _, bad := range []struct{ k, v string }{
			{"", "x"},
			{strings.Repeat("k", sdk.MaxOutputKeyBytes+1), "x"},
			{"bin", "\xff"},
			{"huge", strings.Repeat("v", sdk.MaxOutputBytes)},
		} {
			err := job.SetOutput(bad.k, bad.v)
			if err == nil {
				return fmt.Errorf("SetOutput(%.20q) was taken", bad.k)
			}
			refusals = append(refusals, err.Error())
		}
		for i := range sdk.MaxOutputKeys - 1 {
			if err := job.SetOutput(fmt.Sprintf("k%02d", i), "v"); err != nil {
				return err
			}
		}
		err := job.SetOutput("one-too-many", "v")
		if err == nil {
			return errors.New("a key past MaxOutputKeys was taken")
		}
		refusals = append(refusals, err.Error())
		return nil
	})
	h.accept(t, node(bean("301-1-0-0", 301, "publish", ""), nodeContext))
	h.wantResult(t, "301-1-0-0", logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
	job := <-seen
	if !maps.Equal(job.Context, nodeContext) || job.WorkflowInstanceID != "w7-1000" || job.WorkflowNodeID != "load" {
		t.Fatalf("job: got context %q instance %q node %q", job.Context, job.WorkflowInstanceID, job.WorkflowNodeID)
	}
	for i, want := range []string{`output key ""`, "want 1-128 bytes, got 129", `output "bin": value is not valid UTF-8`,
		`output "huge": a fire publishes at most 16384 bytes`, `output "one-too-many": a fire publishes at most 64 keys`} {
		if !strings.Contains(refusals[i], want) {
			t.Errorf("refusal %d: got %q, want it to say %q", i, refusals[i], want)
		}
	}
	want := map[string]string{"rows": "100"}
	for i := range sdk.MaxOutputKeys - 1 {
		want[fmt.Sprintf("k%02d", i)] = "v"
	}
	if got := h.result(t, "301-1-0-0").GetOutputs(); !maps.Equal(got, want) {
		t.Fatalf("result outputs: got %d keys %q, want %d keys", len(got), got, len(want))
	}
	if r := <-results; !maps.Equal(r.Outputs, want) {
		t.Fatalf("OnResult outputs: got %q", r.Outputs)
	}
	if err := job.SetOutput("late", "x"); err == nil || !strings.Contains(err.Error(), "ended") {
		t.Fatalf("SetOutput after the handler returned: got %v, want an error saying the fire ended", err)
	}
	if err := (&sdk.Job{}).SetOutput("k", "v"); err == nil {
		t.Fatal("SetOutput on a Job that is no fire: got nil error")
	}

	// A failed handler's outputs go with its result too (an ON_FAILURE node reads them).
	h.exec.Handle("fail-with-output", func(_ context.Context, job *sdk.Job) error {
		if err := job.SetOutput("reason", "disk full"); err != nil {
			return err
		}
		return errors.New("no space")
	})
	h.accept(t, bean("302-1-0-0", 302, "fail-with-output", ""))
	if got := h.wantResult(t, "302-1-0-0", logsv1.RunStatus_RUN_STATUS_FAIL, "no space").GetOutputs(); !maps.Equal(got, map[string]string{"reason": "disk full"}) {
		t.Fatalf("failed fire's outputs: got %q", got)
	}
}

func TestScriptReadsContextAndPublishesOutputs(t *testing.T) {
	t.Parallel()
	h := start(t, nil)
	tr := node(script("311-1-0-0", 311, strings.Join([]string{
		`echo "env:$JOBMESH_WORKFLOW_INSTANCE_ID|$JOBMESH_WORKFLOW_NODE_ID|$JOBMESH_CTX_BUCKET|$JOBMESH_CTX_EXTRACT_ROWS|$JOBMESH_CTX_NOTE"`,
		`echo "file:$(cat "$JOBMESH_CONTEXT_FILE")"`,
		`echo "::jobmesh-output rows=$((JOBMESH_CTX_ROWS + 2))"`,
		`echo "::jobmesh-output from=marker"`,
		`printf 'from=file\nsummary=a=b c\r\n\nempty=\n' > "$JOBMESH_OUTPUT_FILE"`,
	}, "\n")), nodeContext)
	h.accept(t, tr)
	r := h.wantResult(t, tr.TriggerId, logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
	wantLines := []string{
		"env:w7-1000|load|exports|10|two words; $HOME",
		`file:{"bucket":"exports","extract.rows":"10","note":"two words; $HOME","rows":"10"}`,
		"::jobmesh-output rows=12",
		"::jobmesh-output from=marker",
	}
	if got := h.ingest.Texts(tr.TriggerId); !slices.Equal(got, wantLines) {
		t.Fatalf("lines: got %q, want %q", got, wantLines)
	}
	// The file is read after the process ends: its keys override the marker lines'.
	if got, want := r.GetOutputs(), map[string]string{"rows": "12", "from": "file", "summary": "a=b c", "empty": ""}; !maps.Equal(got, want) {
		t.Fatalf("outputs: got %q, want %q", got, want)
	}

	// A JSON file; a job's own fire (no context) gets no context file, and may publish too.
	tr = script("312-1-0-0", 312, strings.Join([]string{
		`echo "ctx:[${JOBMESH_CONTEXT_FILE-unset}]"`,
		`echo '{"count": 3, "ok": true, "text": "line1\nline2"}' > "$JOBMESH_OUTPUT_FILE"`,
	}, "\n"))
	h.accept(t, tr)
	r = h.wantResult(t, tr.TriggerId, logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
	if got, want := r.GetOutputs(), map[string]string{"count": "3", "ok": "true", "text": "line1\nline2"}; !maps.Equal(got, want) {
		t.Fatalf("JSON file outputs: got %q, want %q", got, want)
	}
	if got := h.ingest.Texts(tr.TriggerId); !slices.Equal(got, []string{"ctx:[unset]"}) {
		t.Fatalf("lines: got %q", got)
	}

	// Refused outputs fail a fire that otherwise succeeded, naming the line and the key; a
	// failed script's outputs are kept.
	for _, c := range []struct {
		id, src, msg string
		status       logsv1.RunStatus
		outs         map[string]string
	}{
		{"313-1-0-0", `echo "::jobmesh-output no-equals-sign"`, `output line 1 "::jobmesh-output no-equals-sign": want ::jobmesh-output key=value`, logsv1.RunStatus_RUN_STATUS_FAIL, nil},
		{"314-1-0-0", `printf 'a=1\nbroken\n' > "$JOBMESH_OUTPUT_FILE"`, "output file line 2: want key=value", logsv1.RunStatus_RUN_STATUS_FAIL, map[string]string{"a": "1"}},
		{"315-1-0-0", `head -c 20000 /dev/zero | tr '\0' x | sed 's/^/big=/' > "$JOBMESH_OUTPUT_FILE"`, `output file line 1: output "big": a fire publishes at most 16384 bytes`, logsv1.RunStatus_RUN_STATUS_FAIL, nil},
		{"316-1-0-0", `echo '{"a": ' > "$JOBMESH_OUTPUT_FILE"`, "output file: not a JSON object", logsv1.RunStatus_RUN_STATUS_FAIL, nil},
		{"317-1-0-0", `echo "::jobmesh-output why=disk full"; exit 4`, "exit code 4", logsv1.RunStatus_RUN_STATUS_FAIL, map[string]string{"why": "disk full"}},
	} {
		prefix, _, _ := strings.Cut(c.id, "-")
		job, _ := strconv.ParseInt(prefix, 10, 64) // a job per script: its GLUE version is the same
		h.accept(t, script(c.id, job, c.src))
		r := h.wantResult(t, c.id, c.status, c.msg)
		if !maps.Equal(r.GetOutputs(), c.outs) {
			t.Errorf("fire %s: got outputs %q, want %q", c.id, r.GetOutputs(), c.outs)
		}
	}
}

func TestCommandPublishesOutputs(t *testing.T) {
	t.Parallel()
	h := start(t, nil)
	tr := node(bean("321-1-0-0", 321, "command", `["sh", "-c", "echo ::jobmesh-output got=$JOBMESH_CTX_BUCKET"]`), nodeContext)
	h.accept(t, tr)
	if got := h.wantResult(t, tr.TriggerId, logsv1.RunStatus_RUN_STATUS_SUCCESS, "").GetOutputs(); !maps.Equal(got, map[string]string{"got": "exports"}) {
		t.Fatalf("outputs: got %q", got)
	}
}

// outputsApp is an application serving HandlerService that echoes its fire's workflow context
// as outputs, prefixed "seen.", with the outputs its params name ("key=value" pairs, "&"
// between them).
type outputsApp struct {
	executorv1.UnimplementedHandlerServiceServer
}

func (outputsApp) ListHandlers(context.Context, *executorv1.ListHandlersRequest) (*executorv1.ListHandlersResponse, error) {
	return &executorv1.ListHandlersResponse{Handlers: []string{"echo-context"}}, nil
}

func (outputsApp) Handle(req *executorv1.HandleRequest, s grpc.ServerStreamingServer[executorv1.HandleResponse]) error {
	t := req.GetTrigger()
	outs := map[string]string{"seen.instance": t.GetWorkflowInstanceId(), "seen.node": t.GetWorkflowNodeId()}
	for k, v := range t.GetContext() {
		outs["seen."+k] = v
	}
	for kv := range strings.SplitSeq(t.GetParams(), "&") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			outs[k] = v
		}
	}
	return s.Send(&executorv1.HandleResponse{Event: &executorv1.HandleResponse_Result{Result: &executorv1.HandleResult{Success: true, Outputs: outs}}})
}

func TestSidecarCarriesContextAndOutputs(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	executorv1.RegisterHandlerServiceServer(srv, outputsApp{})
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	h := start(t, nil)
	if _, err := h.exec.ForwardHandlers(ctxFor(t), executorv1.NewHandlerServiceClient(conn)); err != nil {
		t.Fatal(err)
	}

	h.accept(t, node(bean("331-1-0-0", 331, "echo-context", "rows=12"), map[string]string{"bucket": "exports"}))
	want := map[string]string{"seen.instance": "w7-1000", "seen.node": "load", "seen.bucket": "exports", "rows": "12"}
	if got := h.wantResult(t, "331-1-0-0", logsv1.RunStatus_RUN_STATUS_SUCCESS, "").GetOutputs(); !maps.Equal(got, want) {
		t.Fatalf("outputs: got %q, want %q", got, want)
	}
	// Outputs over the bounds fail the fire, naming the key.
	h.accept(t, bean("332-1-0-0", 332, "echo-context", "big="+strings.Repeat("x", sdk.MaxOutputBytes)))
	h.wantResult(t, "332-1-0-0", logsv1.RunStatus_RUN_STATUS_FAIL, `application handler echo-context: output "big": a fire publishes at most 16384 bytes`)
}
