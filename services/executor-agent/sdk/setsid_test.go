//go:build linux

package sdk_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
)

// TestKillReachesProcessesThatLeftTheGroup: a script's child that started a session of its own
// (setsid) is not in the script's process group, yet it is the fire's: a kill ends it, and so
// does the script's own end.
func TestKillReachesProcessesThatLeftTheGroup(t *testing.T) {
	t.Parallel()
	h := start(t, nil)
	for i, c := range []struct {
		name, tail string
		kill       bool
	}{
		{"killed", "wait", true},
		{"script ends", "exit 0", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			job := int64(340 + i)
			id := fmt.Sprintf("%d-1-0-0", job)
			// Without job control a background child is not a group leader: setsid runs in it.
			// The script goes on once the child has its own session (/proc/<pid>/stat's sixth field).
			src := "setsid sleep 1000 &\nwhile [ \"$(cut -d' ' -f6 /proc/$!/stat)\" != \"$!\" ]; do :; done\necho \"escaped $!\"\n"
			h.accept(t, script(id, job, src+c.tail))
			lines := h.waitLines(t, id, 1)
			_, p, _ := strings.Cut(lines[0], " ")
			pid, err := strconv.Atoi(p)
			if err != nil {
				t.Fatalf("line %q: %v", lines[0], err)
			}
			if c.kill {
				if resp, err := h.cli.Kill(ctxFor(t), &executorv1.KillRequest{JobId: job}); err != nil || !resp.GetKilled() {
					t.Fatalf("Kill: got %v %v", resp, err)
				}
				h.wantResult(t, id, logsv1.RunStatus_RUN_STATUS_KILLED, "")
			} else {
				h.wantResult(t, id, logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
			}
			for deadline := time.Now().Add(wait); alive(pid); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the setsid child %d is still running %v after the fire ended", pid, wait)
				}
			}
		})
	}
}
