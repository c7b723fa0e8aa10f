package logsvc

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
)

// TestFiftyMegabyteLineStaysReadable: a 50 MB line without a newline, as an agent delivers it
// (64 KiB pieces), and a line longer than the cap from a sender that did not cut it, are read
// back whole through ListRunLines page after page and through TailRun, every answer well under
// gRPC's 4 MB message limit. (Both answered ResourceExhausted before.)
func TestFiftyMegabyteLineStaysReadable(t *testing.T) {
	t.Parallel()
	for _, st := range dbtest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, st)
			const job, id = 900, "900-long"
			e.mustRecords(t, record(id, job, base))
			piece := strings.Repeat("x", maxTextBytes)
			const pieces = 50 << 20 / maxTextBytes
			for no := int64(1); no <= pieces; {
				var batch []*logsv1.LogLine
				for ; no <= pieces && len(batch) < 40; no++ {
					batch = append(batch, line(id, no, piece))
				}
				e.mustLines(t, batch...)
			}
			e.mustLines(t, line(id, pieces+1, strings.Repeat("y", maxTextBytes+100)))
			e.mustResults(t, result(id, job, logsv1.RunStatus_RUN_STATUS_SUCCESS, base))

			check := func(how string, lines []*logsv1.LogLine) {
				t.Helper()
				if len(lines) != pieces+1 {
					t.Fatalf("%s: %d lines, want %d", how, len(lines), pieces+1)
				}
				for i, l := range lines[:pieces] {
					if l.GetLineNo() != int64(i+1) || l.GetText() != piece {
						t.Fatalf("%s: line %d is %d (%d bytes), want line %d whole", how, i, l.GetLineNo(), len(l.GetText()), i+1)
					}
				}
				if last := lines[pieces].GetText(); len(last) > maxTextBytes || !strings.HasSuffix(last, lineCutMarker) {
					t.Errorf("%s: the over-long line is %d bytes ending %q, want at most %d ending with the marker",
						how, len(last), last[len(last)-30:], maxTextBytes)
				}
			}

			var listed []*logsv1.LogLine
			for from, pages := int64(1), 0; ; pages++ {
				resp, err := e.logs.ListRunLines(ctxFor(t), &logsv1.ListRunLinesRequest{Id: id, FromLine: from, Limit: 10000})
				if err != nil {
					t.Fatalf("ListRunLines from %d: %v", from, err)
				}
				listed = append(listed, resp.GetLines()...)
				if resp.GetIsEnd() {
					break
				}
				if pages > 2*pieces || resp.GetNextLine() <= from {
					t.Fatalf("ListRunLines from %d: next %d, not moving on", from, resp.GetNextLine())
				}
				from = resp.GetNextLine()
			}
			check("ListRunLines", listed)

			ctx, cancel := context.WithCancel(ctxFor(t))
			defer cancel()
			tail, err := e.logs.TailRun(ctx, &logsv1.TailRunRequest{Id: id})
			if err != nil {
				t.Fatal(err)
			}
			var tailed []*logsv1.LogLine
			for {
				resp, err := within(t, "tail", tail.Recv)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("TailRun: %v", err)
				}
				tailed = append(tailed, resp.GetLines()...)
			}
			check("TailRun", tailed)
		})
	}
}
