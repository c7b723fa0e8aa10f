package scheduler

import (
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/ring"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/schedule"
)

// TestCutShortTakeoverLeavesTheMarks: a takeover that fails after reading the partition's marks
// (here logsvc cannot be asked) owes nothing yet, so the engine's hand-over writes no mark: the
// partition's next leader finds the marks as the previous one left them, and re-fires what it
// owed. (Clearing them lost every fire armed ahead until the jobs' next pre-read.)
func TestCutShortTakeoverLeavesTheMarks(t *testing.T) {
	t.Parallel()
	s, _, clk := recordingService(t, Config{})
	conn, err := grpc.NewClient("127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s.logs = logsv1.NewLogServiceClient(conn) // nothing listens there
	ctx := t.Context()
	nowMs := clk.Now().UnixMilli()
	id, err := s.jobs.insert(ctx, &jobRow{GroupID: 1, Name: "owed", ScheduleType: schedule.FixRate, ScheduleExpr: "1s",
		Misfire: 1, Route: 1, Block: 1, RetryBackoff: 1, GlueType: 1, Handler: "h", Status: jobRunning, NextFireMs: nowMs + 5000}, 1)
	if err != nil {
		t.Fatal(err)
	}
	armedFrom := nowMs - 1000
	if _, err := storeDB(s).ExecContext(ctx, `UPDATE job_state SET armed_from_ms = $1 WHERE job_id = $2`, armedFrom, id); err != nil {
		t.Fatal(err)
	}
	// The partition has followed completions before: its takeover does not wait for a stream.
	if _, err := storeDB(s).ExecContext(ctx, `INSERT INTO partition_cursor (part, cursor) VALUES (0, 5)`); err != nil {
		t.Fatal(err)
	}
	l := &engine{s: s, part: 0, epoch: 1, ring: ring.New(clk, func([]ringEntry) {}), owed: newOwed(), deposed: make(chan struct{})}
	l.cursor.Store(-1)
	if err := l.takeOverOnce(ctx); err == nil {
		t.Fatal("takeover succeeded without logsvc")
	}
	l.flushOwed()
	var got int64
	if err := storeDB(s).QueryRowContext(ctx, `SELECT COALESCE(armed_from_ms, 0) FROM job_state WHERE job_id = $1`, id).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != armedFrom {
		t.Errorf("armed_from_ms after a cut-short takeover's hand-over = %d, want %d as the previous leader left it", got, armedFrom)
	}
}
