package bench

import (
	"math"
	"strconv"
	"strings"
	"testing"
)

func TestHistogram(t *testing.T) {
	t.Parallel()
	text := func(b1, b2, inf, sum float64) string {
		return strings.NewReplacer("B1", f(b1), "B2", f(b2), "INF", f(inf), "SUM", f(sum)).Replace(`# HELP x_seconds scans
# TYPE x_seconds histogram
x_seconds_bucket{le="0.01"} B1
x_seconds_bucket{le="0.05"} B2
x_seconds_bucket{le="+Inf"} INF
x_seconds_sum SUM
x_seconds_count INF
x_seconds_other 7
y_seconds_count 99
`)
	}
	before, err := parseHistogram(strings.NewReader(text(10, 10, 10, 0.05)), "x_seconds")
	if err != nil {
		t.Fatal(err)
	}
	// 100 more scans: 60 under 10 ms, 39 under 50 ms, 1 slower; 2 s in all.
	after, err := parseHistogram(strings.NewReader(text(70, 109, 110, 2.05)), "x_seconds")
	if err != nil {
		t.Fatal(err)
	}
	h := after.since(before, "x_seconds")
	if h.Count != 100 || math.Abs(h.MeanMs-20) > 1e-9 || h.P50Ms != 10 || h.P99Ms != 50 {
		t.Errorf("since = %+v; want 100 scans, mean 20 ms, p50 ≤ 10 ms, p99 ≤ 50 ms", h)
	}
	if _, err := parseHistogram(strings.NewReader(text(1, 1, 1, 1)), "z_seconds"); err == nil {
		t.Error("a missing histogram parsed")
	}
}

func f(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
