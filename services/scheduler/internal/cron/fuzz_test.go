package cron_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jobmesh/jobmesh/services/scheduler/internal/cron"
)

// FuzzParse feeds arbitrary text and start times to Parse and Next: nothing may panic, errors
// must say they come from cron, and fire times must move strictly forward in whole seconds.
func FuzzParse(f *testing.F) {
	for _, expr := range []string{
		"0 0 12 * * ?", "0 15 10 ? * 6L 2002-2005", "0 15 10 ? * 6#3", "0 0 12 1/5 * ?",
		"0 15 10 L-2 * ?", "0 0 9 LW * ?", "0 0 9 15W * ?", "0 0 22-2/3 ? NOV-FEB FRI-MON",
		"*/7 /5 * * * ?", "0 0 0 30 2 ?", "0 0 0 ? * * 2199", "0 0 0 32 * ?", "", "? ? ? ? ? ?",
		"0 0 0 L-30W 2 ?", "0 0 0 ? * sat#5", "* * * * * ? 1970-2199/229",
	} {
		f.Add(expr, int64(1_772_953_200)) // 2026-03-08 07:00 UTC, New York's spring-forward
	}
	for _, unix := range []int64{math.MinInt64, -62_135_596_800, -1, 0, 7_258_118_399, 7_258_118_400, math.MaxInt64} {
		f.Add("* * * * * ?", unix) // year 1, 1970, the last second of 2199 and beyond
	}
	newYork, err := time.LoadLocation("America/New_York")
	if err != nil {
		f.Fatalf("LoadLocation: %v", err)
	}
	f.Fuzz(func(t *testing.T, expr string, unix int64) {
		e, err := cron.Parse(expr)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "cron: ") {
				t.Errorf("Parse(%q) error = %q, want a cron: prefix", expr, err)
			}
			return
		}
		again, err := cron.Parse(e.String())
		if err != nil || again.String() != e.String() {
			t.Errorf("Parse(%q) = %v, %v, want %q back", e.String(), again, err, e.String())
		}
		for _, loc := range []*time.Location{time.UTC, newYork} {
			at := time.Unix(unix, unix%1e9)
			for range 4 {
				next, ok := e.Next(at, loc)
				if !ok {
					break
				}
				if !next.After(at) || next.Nanosecond() != 0 || next.Location() != loc {
					t.Fatalf("%q: Next(%v, %v) = %v, want a whole second after it in %v", expr, at, loc, next, loc)
				}
				at = next
			}
		}
	})
}
