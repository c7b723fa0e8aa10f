package sdk

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
)

// begin marks the fire started.
func (r *run) begin(now time.Time) {
	r.mu.Lock()
	r.started = now
	r.mu.Unlock()
}

// logText appends text to the fire's log, one line per newline.
func (r *run) logText(text string) {
	text = strings.TrimSuffix(text, "\n")
	for line := range strings.SplitSeq(text, "\n") {
		r.logLine(line)
	}
}

// logLine appends one line: numbered, staged for the local run log (runStore) and queued for
// logsvc, all under the run's lock so lines keep their order and none follows the result.
func (r *run) logLine(text string) {
	text = cleanText(strings.TrimSuffix(text, "\r"))
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.finished || r.cut {
		return
	}
	if limit := r.e.cfg.MaxRunOutputBytes; limit > 0 && r.outBytes+int64(len(text))+1 > limit {
		// One line says so; the handler runs on, and the rest of its output is dropped.
		r.cut = true
		text = fmt.Sprintf("[jobmesh] output truncated after %d bytes (the executor keeps at most %d per run)", r.outBytes, limit)
	}
	r.outBytes += int64(len(text)) + 1
	r.lineNo++
	r.e.runs.add(r.t.GetTriggerId(), r.lineNo, text)
	r.e.out.addLines([]*logsv1.LogLine{{TriggerId: r.t.GetTriggerId(), LineNo: r.lineNo, UnixMs: now.UnixMilli(), Text: text, DeliveryToken: r.t.GetDeliveryToken()}})
}

// maxLogRead caps what one Log call returns.
const (
	maxLogLines = 1000
	maxLogBytes = 1 << 20
)

// findLog says whether a fire is still held, queued or running here (active), and whether this
// executor knows it at all: active, recently accepted, or with output in the local run log or
// in a log file of an older agent version (legacyLogPath, runs/<day>/<trigger id>.log).
func (e *Executor) findLog(triggerID string) (active, known bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.active[triggerID]; ok {
		return true, true
	}
	_, ok := e.recent.get(triggerID)
	return false, ok
}

// legacyLogPath is the log file of a fire written by an agent that kept a file per fire; "" when
// there is none.
func (e *Executor) legacyLogPath(triggerID string) string {
	matches, _ := filepath.Glob(filepath.Join(e.cfg.LogDir, "runs", "*", triggerID+".log"))
	if len(matches) > 0 {
		return matches[len(matches)-1]
	}
	return ""
}

// readRunLog returns the lines of a fire's local log from line from on, whether the last line
// written so far was reached, and whether any log was found.
func (e *Executor) readRunLog(triggerID string, from int64) (lines []string, eof, found bool, err error) {
	lines, eof, found, err = e.runs.read(triggerID, from)
	if found || err != nil {
		return lines, eof, found, err
	}
	if path := e.legacyLogPath(triggerID); path != "" {
		lines, eof, err = readLog(path, from)
		return lines, eof, true, err
	}
	return nil, true, false, nil
}

// readLog returns complete lines of a per-fire log file (of an older agent version) from line
// from (1-based) on, and whether the end of the file was reached.
func readLog(path string, from int64) (lines []string, eof bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 64<<10)
	var n int64
	size := 0
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			// A trailing line without its newline is still being written.
			if errors.Is(err, io.EOF) {
				return lines, true, nil
			}
			return lines, false, err
		}
		n++
		if n < from {
			continue
		}
		if len(lines) >= maxLogLines || size+len(line) > maxLogBytes && len(lines) > 0 {
			return lines, false, nil
		}
		size += len(line)
		lines = append(lines, string(bytes.TrimSuffix(line, []byte{'\n'})))
	}
}

// pruneLogs deletes the run log day directories older than LogRetentionDays (by their name's
// date, UTC) and returns how many it deleted.
func (e *Executor) pruneLogs(now time.Time) (int, error) {
	if e.cfg.LogRetentionDays < 0 {
		return 0, nil
	}
	oldest := now.UTC().AddDate(0, 0, -e.cfg.LogRetentionDays).Format(time.DateOnly)
	dir := filepath.Join(e.cfg.LogDir, "runs")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, ent := range entries {
		day := ent.Name()
		if _, err := time.Parse(time.DateOnly, day); err != nil || !ent.IsDir() || day >= oldest {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, day)); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// retainLogs prunes run logs hourly until stop closes.
func (e *Executor) retainLogs(stop <-chan struct{}) {
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			if n, err := e.pruneLogs(now); err != nil {
				e.log.Error("pruning run log files", "error", err)
			} else if n > 0 {
				e.log.Info("pruned run log files", "days", n, "retention_days", e.cfg.LogRetentionDays)
			}
		}
	}
}
