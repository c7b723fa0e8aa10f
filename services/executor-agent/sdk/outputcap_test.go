package sdk_test

import (
	"strings"
	"testing"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
)

// TestRunOutputIsCapped: a script that writes 5 MiB under a 1 MiB cap keeps at most 1 MiB,
// then one line saying the output was cut, and still ends in success.
func TestRunOutputIsCapped(t *testing.T) {
	t.Parallel()
	const limit = 1 << 20
	h := start(t, func(c *sdk.Config) { c.MaxRunOutputBytes = limit })
	id := "330-1-0-0"
	h.accept(t, script(id, 330, "head -c 5242880 /dev/zero | tr '\\0' x\necho\necho done"))
	h.wantResult(t, id, logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
	lines := h.ingest.Texts(id)
	if len(lines) == 0 {
		t.Fatal("no output")
	}
	kept := 0
	for _, l := range lines[:len(lines)-1] {
		if strings.Trim(l, "x") != "" {
			t.Fatalf("line %.40q… before the marker, want only the script's x's", l)
		}
		kept += len(l) + 1
	}
	if last := lines[len(lines)-1]; kept > limit || !strings.Contains(last, "output truncated after") {
		t.Errorf("kept %d bytes in %d lines then %q, want at most %d then the truncation line", kept, len(lines)-1, last, limit)
	}
}

// TestLongLineReachesLogsvc: a script writes 20 MiB without a newline; the agent cuts it into
// 64 KiB lines and delivers them all, in batches under logsvc's 4 MiB message limit, and the
// fire's result follows. (Batches of 500 such lines were refused and resent for ever, and the
// result waited behind them.)
func TestLongLineReachesLogsvc(t *testing.T) {
	t.Parallel()
	h := start(t, nil)
	id := "331-1-0-0"
	const size = 20 << 20
	h.accept(t, script(id, 331, "head -c 20971520 /dev/zero | tr '\\0' x"))
	h.wantResult(t, id, logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
	got := 0
	for _, l := range h.ingest.Texts(id) {
		got += len(l)
	}
	if got != size {
		t.Errorf("logsvc holds %d bytes of output, want %d", got, size)
	}
}
