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

// openFile opens the fire's local log file at its first line (the caller holds r.mu). Creating
// a file per fire up front cost more than a no-op handler's whole run; a fire that writes
// nothing has no file, and reading its log finds no lines.
func (r *run) openFile() {
	r.opened = true
	path := r.logPath()
	err := os.MkdirAll(filepath.Dir(path), 0o700)
	if err == nil {
		r.file, err = os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	}
	if err != nil {
		r.file = nil
		r.e.log.Error("cannot open run log file; output goes to logsvc only", "trigger_id", r.t.GetTriggerId(), "error", err)
	}
}

// logText appends text to the fire's log, one line per newline.
func (r *run) logText(text string) {
	text = strings.TrimSuffix(text, "\n")
	for line := range strings.SplitSeq(text, "\n") {
		r.logLine(line)
	}
}

// logLine appends one line: numbered, written to the local file and queued for logsvc, all
// under the run's lock so lines keep their order and none follows the result.
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
	if !r.opened {
		r.openFile()
	}
	if r.file != nil {
		buf := make([]byte, 0, len(text)+1)
		buf = append(buf, text...)
		buf = append(buf, '\n')
		if _, err := r.file.Write(buf); err != nil {
			r.e.log.Error("writing run log file; output goes to logsvc only", "trigger_id", r.t.GetTriggerId(), "error", err)
			r.file.Close()
			r.file = nil
		}
	}
	r.e.out.addLines([]*logsv1.LogLine{{TriggerId: r.t.GetTriggerId(), LineNo: r.lineNo, UnixMs: now.UnixMilli(), Text: text, DeliveryToken: r.t.GetDeliveryToken()}})
}

// maxLogRead caps what one Log call returns.
const (
	maxLogLines = 1000
	maxLogBytes = 1 << 20
)

// findLog locates a fire's local log: whether the fire is still queued or running, and the file
// path ("" when the fire is known but never started).
func (e *Executor) findLog(triggerID string) (path string, active, known bool) {
	e.mu.Lock()
	if r, ok := e.active[triggerID]; ok {
		e.mu.Unlock()
		return r.logPath(), true, true
	}
	day, ok := e.recent.get(triggerID)
	e.mu.Unlock()
	if ok {
		return e.runLogPath(day, triggerID), false, true
	}
	// After a restart: look through the day directories.
	matches, _ := filepath.Glob(filepath.Join(e.cfg.LogDir, "runs", "*", triggerID+".log"))
	if len(matches) > 0 {
		return matches[len(matches)-1], false, true
	}
	return "", false, false
}

// readLog returns complete lines of a log file from line from (1-based) on, and whether the
// end of the file was reached.
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
