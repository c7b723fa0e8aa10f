// Package sdktest helps test code that runs executors: an in-process logsvc IngestService that
// records every batch it acknowledges (and can misbehave on purpose), and a client for an
// executor's ExecutorService. It exists so tests need no real logsvc or database.
package sdktest

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/services/executor-agent/meshtls"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
)

// Ingest is a fake logsvc IngestService. Like logsvc it stores a fire's first final result, its
// first RUNNING result (never refused, whenever it comes) and each (trigger id, line number)
// once, and acknowledges a batch after storing it. It also counts every receipt and keeps the
// order in which a fire's results arrived, so tests can see resends and ordering.
type Ingest struct {
	logsv1.UnimplementedIngestServiceServer

	mu             sync.Mutex
	results        map[string]*logsv1.RunResult // final results
	starts         map[string]*logsv1.RunResult // RUNNING results
	statuses       map[string][]logsv1.RunStatus
	resultReceipts map[string]int
	lines          map[string]map[int64]*logsv1.LogLine
	lineReceipts   map[string]int
	records        map[string]*logsv1.TriggerRecord
	dropStreams    int
	droppedBatches int
	refuseConns    int
	refusedConns   int
	changed        chan struct{} // closed and replaced on every change
}

// NewIngest returns an empty fake.
func NewIngest() *Ingest {
	return &Ingest{
		results: map[string]*logsv1.RunResult{}, starts: map[string]*logsv1.RunResult{},
		statuses: map[string][]logsv1.RunStatus{}, resultReceipts: map[string]int{},
		lines: map[string]map[int64]*logsv1.LogLine{}, lineReceipts: map[string]int{},
		records: map[string]*logsv1.TriggerRecord{}, changed: make(chan struct{}),
	}
}

// Serve serves the fake in plaintext on a loopback port until t ends and returns its address.
func (f *Ingest) Serve(t testing.TB) string {
	t.Helper()
	return f.serve(t)
}

// ServeTLS serves the fake with mutual TLS with id (as logsvc does) on a loopback port until t
// ends and returns its address.
func (f *Ingest) ServeTLS(t testing.TB, id *meshtls.Identity) string {
	t.Helper()
	return f.serve(t, id.ServerOptions()...)
}

func (f *Ingest) serve(t testing.TB, opts ...grpc.ServerOption) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("sdktest: listen: %v", err)
	}
	srv := grpc.NewServer(opts...)
	logsv1.RegisterIngestServiceServer(srv, f)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(&refusingListener{Listener: ln, f: f})
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return ln.Addr().String()
}

// RefuseConns makes the server close the next n TCP connections as soon as they arrive.
func (f *Ingest) RefuseConns(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuseConns = n
}

// DropStreams makes the next n streams (of any kind) store their first batch and then break
// without acknowledging it, as a logsvc that crashes after committing would.
func (f *Ingest) DropStreams(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dropStreams = n
}

// Misbehaved reports how many connections were refused and batches left unacknowledged.
func (f *Ingest) Misbehaved() (refusedConns, droppedBatches int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.refusedConns, f.droppedBatches
}

// Result returns the stored final result of a fire.
func (f *Ingest) Result(triggerID string) (*logsv1.RunResult, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.results[triggerID]
	return r, ok
}

// Results returns every stored final result by trigger id.
func (f *Ingest) Results() map[string]*logsv1.RunResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]*logsv1.RunResult, len(f.results))
	for k, v := range f.results {
		out[k] = v
	}
	return out
}

// Records returns the trigger records stored so far (a scheduler pointed at the fake), by
// trigger id.
func (f *Ingest) Records() map[string]*logsv1.TriggerRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]*logsv1.TriggerRecord, len(f.records))
	for id, r := range f.records {
		out[id] = r
	}
	return out
}

// Running returns the stored RUNNING result of a fire: the executor accepted it.
func (f *Ingest) Running(triggerID string) (*logsv1.RunResult, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.starts[triggerID]
	return r, ok
}

// Statuses returns the status of every result received for a fire (RUNNING and final, resends
// included), in arrival order.
func (f *Ingest) Statuses(triggerID string) []logsv1.RunStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.statuses[triggerID])
}

// Lines returns the stored lines of a fire in line-number order.
func (f *Ingest) Lines(triggerID string) []*logsv1.LogLine {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*logsv1.LogLine
	for _, l := range f.lines[triggerID] {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b *logsv1.LogLine) int { return int(a.GetLineNo() - b.GetLineNo()) })
	return out
}

// Texts returns the text of a fire's stored lines in order.
func (f *Ingest) Texts(triggerID string) []string {
	var out []string
	for _, l := range f.Lines(triggerID) {
		out = append(out, l.GetText())
	}
	return out
}

// Receipts counts how many times a fire's final result, and its lines in total, were received
// (resends included); Statuses shows its RUNNING results too.
func (f *Ingest) Receipts(triggerID string) (results, lines int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.resultReceipts[triggerID], f.lineReceipts[triggerID]
}

// Wait blocks until cond holds (checked after every change) or ctx ends.
func (f *Ingest) Wait(ctx context.Context, cond func() bool) error {
	for {
		f.mu.Lock()
		ch := f.changed
		f.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// WaitResult waits for a fire's final result.
func (f *Ingest) WaitResult(ctx context.Context, triggerID string) (*logsv1.RunResult, error) {
	var r *logsv1.RunResult
	err := f.Wait(ctx, func() bool {
		var ok bool
		r, ok = f.Result(triggerID)
		return ok
	})
	if err != nil {
		return nil, errors.New("sdktest: no result for " + triggerID + ": " + err.Error())
	}
	return r, nil
}

func (f *Ingest) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// takeDrop decides whether a new stream is one to drop.
func (f *Ingest) takeDrop() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dropStreams > 0 {
		f.dropStreams--
		return true
	}
	return false
}

func (f *Ingest) dropped() error {
	f.mu.Lock()
	f.droppedBatches++
	f.mu.Unlock()
	return status.Error(codes.Unavailable, "sdktest: stream dropped before acknowledging")
}

// IngestResults stores results; a second final result for a fire is refused, as logsvc does,
// and a RUNNING result never is.
func (f *Ingest) IngestResults(s grpc.BidiStreamingServer[logsv1.IngestResultsRequest, logsv1.IngestResultsResponse]) error {
	drop := f.takeDrop()
	for {
		req, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		// Like logsvc, a batch with a result without a status is refused whole.
		for i, r := range req.GetResults() {
			if r.GetStatus() == logsv1.RunStatus_RUN_STATUS_UNSPECIFIED {
				return status.Errorf(codes.InvalidArgument, "sdktest: results[%d].status: want RUNNING or a final status", i)
			}
		}
		var refused []string
		f.mu.Lock()
		for _, r := range req.GetResults() {
			id := r.GetTriggerId()
			f.statuses[id] = append(f.statuses[id], r.GetStatus())
			if r.GetStatus() == logsv1.RunStatus_RUN_STATUS_RUNNING {
				if _, ok := f.starts[id]; !ok {
					f.starts[id] = r
				}
				continue
			}
			f.resultReceipts[r.GetTriggerId()]++
			if _, ok := f.results[r.GetTriggerId()]; ok {
				refused = append(refused, r.GetTriggerId())
				continue
			}
			f.results[r.GetTriggerId()] = r
		}
		f.notifyLocked()
		f.mu.Unlock()
		if drop {
			return f.dropped()
		}
		if err := s.Send(&logsv1.IngestResultsResponse{BatchId: req.GetBatchId(), RefusedTriggerIds: refused}); err != nil {
			return err
		}
	}
}

// IngestLogLines stores lines by (trigger id, line number).
func (f *Ingest) IngestLogLines(s grpc.BidiStreamingServer[logsv1.IngestLogLinesRequest, logsv1.IngestLogLinesResponse]) error {
	drop := f.takeDrop()
	for {
		req, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		f.mu.Lock()
		for _, l := range req.GetLines() {
			id := l.GetTriggerId()
			f.lineReceipts[id]++
			if f.lines[id] == nil {
				f.lines[id] = map[int64]*logsv1.LogLine{}
			}
			if _, ok := f.lines[id][l.GetLineNo()]; !ok {
				f.lines[id][l.GetLineNo()] = l
			}
		}
		f.notifyLocked()
		f.mu.Unlock()
		if drop {
			return f.dropped()
		}
		if err := s.Send(&logsv1.IngestLogLinesResponse{BatchId: req.GetBatchId()}); err != nil {
			return err
		}
	}
}

// IngestTriggerRecords stores trigger records by trigger id, so a scheduler can be pointed at
// the fake too.
func (f *Ingest) IngestTriggerRecords(s grpc.BidiStreamingServer[logsv1.IngestTriggerRecordsRequest, logsv1.IngestTriggerRecordsResponse]) error {
	for {
		req, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		f.mu.Lock()
		for _, r := range req.GetRecords() {
			f.records[r.GetTriggerId()] = r
		}
		f.notifyLocked()
		f.mu.Unlock()
		if err := s.Send(&logsv1.IngestTriggerRecordsResponse{BatchId: req.GetBatchId()}); err != nil {
			return err
		}
	}
}

// refusingListener closes the connections the fake is told to refuse.
type refusingListener struct {
	net.Listener
	f *Ingest
}

func (l *refusingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.f.mu.Lock()
		refuse := l.f.refuseConns > 0
		if refuse {
			l.f.refuseConns--
			l.f.refusedConns++
			l.f.notifyLocked()
		}
		l.f.mu.Unlock()
		if !refuse {
			return c, nil
		}
		c.Close()
	}
}

// Client dials an executor's ExecutorService on addr in plaintext and closes the connection
// when t ends. A non-empty token is sent as "authorization: Bearer <token>" on every call.
func Client(t testing.TB, addr, token string) executorv1.ExecutorServiceClient {
	t.Helper()
	return ClientTLS(t, addr, token, nil)
}

// ClientTLS is Client over mutual TLS with id (plaintext when id is nil), as the scheduler dials.
func ClientTLS(t testing.TB, addr, token string, id *meshtls.Identity) executorv1.ExecutorServiceClient {
	t.Helper()
	opts := []grpc.DialOption{id.DialOption()}
	if token != "" {
		opts = append(opts, grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token), method, req, reply, cc, opts...)
		}))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatalf("sdktest: dial executor %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return executorv1.NewExecutorServiceClient(conn)
}

// StopGrace is how long Stop lets an executor's running handlers finish.
const StopGrace = 10 * time.Second

// Stop stops e as a test's cleanup would: its running handlers get StopGrace to finish, and are
// killed after it. It returns Stop's error, which a cleanup may ignore:
// t.Cleanup(func() { sdktest.Stop(e) }).
func Stop(e *sdk.Executor) error {
	ctx, cancel := context.WithTimeout(context.Background(), StopGrace)
	defer cancel()
	return e.Stop(ctx)
}
