package sdk_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk/sdktest"
)

// printer is a handler that logs as many lines as its params say.
func printer(_ context.Context, job *sdk.Job) error {
	n, err := strconv.Atoi(job.Params)
	if err != nil {
		return err
	}
	for i := range n {
		job.Logf("line %d of %s", i+1, job.TriggerID)
	}
	return nil
}

func printed(id string, from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprintf("line %d of %s", i, id))
	}
	return out
}

// TestRunLogSegments: the output of many fires goes to one segment file and its index in the
// day's directory (no file per fire), the Log call reads each fire's lines from it, from a line
// on and in pages, and after a restart too; a new agent writes a segment of its own, and a
// torn record at the end of the old one (a crash mid-write) does not hide the ones before it.
func TestRunLogSegments(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := start(t, func(cfg *sdk.Config) { cfg.LogDir = dir })
	h.exec.Handle("print", printer)
	const fires = 40
	var trs []*executorv1.Trigger
	for i := range fires {
		trs = append(trs, bean(fmt.Sprintf("%d-1-0-0", 400+i), int64(400+i), "print", strconv.Itoa(3+i%3)))
	}
	trs = append(trs, bean("450-1-0-0", 450, "print", "2500")) // more than one page
	h.run(t, trs...)
	for _, tr := range trs {
		h.wantResult(t, tr.GetTriggerId(), logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
	}
	day := time.Now().UTC().Format(time.DateOnly)
	files, err := os.ReadDir(filepath.Join(dir, "runs", day))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Name())
	}
	if want := []string{"000001.idx", "000001.seg"}; !slices.Equal(names, want) {
		t.Fatalf("run log files of %d fires: got %q, want %q", len(trs), names, want)
	}

	check := func(h *harness, id string, from, to int, end bool) {
		t.Helper()
		lr, err := h.cli.Log(ctxFor(t), &executorv1.LogRequest{TriggerId: id, FromLine: int64(from)})
		if err != nil {
			t.Fatalf("Log %s from %d: %v", id, from, err)
		}
		if want := printed(id, from, to); !slices.Equal(lr.GetLines(), want) || lr.GetIsEnd() != end {
			t.Fatalf("Log %s from %d: got %d lines (%q…) end %v, want lines %d–%d end %v", id, from, len(lr.GetLines()), lr.GetLines()[:min(2, len(lr.GetLines()))], lr.GetIsEnd(), from, to, end)
		}
	}
	check(h, "400-1-0-0", 1, 3, true)
	check(h, "402-1-0-0", 2, 5, true)
	check(h, "450-1-0-0", 1, 1000, false) // a page
	check(h, "450-1-0-0", 2001, 2500, true)

	if err := sdktest.Stop(h.exec); err != nil {
		t.Fatal(err)
	}
	// A crash mid-write leaves half a record at the end of the segment.
	seg := filepath.Join(dir, "runs", day, "000001.seg")
	f, err := os.OpenFile(seg, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte{200, 0, 0, 0, 1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	f.Close()

	h2 := start(t, func(cfg *sdk.Config) { cfg.LogDir = dir })
	h2.exec.Handle("print", printer)
	check(h2, "401-1-0-0", 1, 4, true)
	check(h2, "450-1-0-0", 1001, 2000, false)
	h2.accept(t, bean("460-1-0-0", 460, "print", "2"))
	h2.wantResult(t, "460-1-0-0", logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
	check(h2, "460-1-0-0", 1, 2, true)
	if _, err := os.Stat(filepath.Join(dir, "runs", day, "000002.seg")); err != nil {
		t.Fatalf("the restarted agent's own segment: %v", err)
	}
}

// TestRunLogWhileRunning: a running fire's lines are read before it ends, and the log says it
// has not ended.
func TestRunLogWhileRunning(t *testing.T) {
	t.Parallel()
	h := start(t, nil)
	release := make(chan struct{})
	h.exec.Handle("slow", func(ctx context.Context, job *sdk.Job) error {
		job.Logf("one")
		job.Logf("two")
		<-release
		job.Logf("three")
		return nil
	})
	h.accept(t, bean("470-1-0-0", 470, "slow", ""))
	h.waitLines(t, "470-1-0-0", 2)
	lr, err := h.cli.Log(ctxFor(t), &executorv1.LogRequest{TriggerId: "470-1-0-0", FromLine: 1})
	if err != nil || !slices.Equal(lr.GetLines(), []string{"one", "two"}) || lr.GetIsEnd() {
		t.Fatalf("Log while running: got %v %v, want [one two] and not the end", lr, err)
	}
	close(release)
	h.wantResult(t, "470-1-0-0", logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
	lr, err = h.cli.Log(ctxFor(t), &executorv1.LogRequest{TriggerId: "470-1-0-0", FromLine: 2})
	if err != nil || !slices.Equal(lr.GetLines(), []string{"two", "three"}) || !lr.GetIsEnd() || lr.GetToLine() != 3 {
		t.Fatalf("Log after the end: got %v %v, want [two three] to line 3 and the end", lr, err)
	}
}
