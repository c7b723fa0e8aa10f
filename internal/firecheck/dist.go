package firecheck

import (
	"math"
	"slices"
	"time"
)

// Dist summarizes a distribution of durations by its percentiles (nearest rank).
type Dist struct {
	N                             int
	P50, P90, P99, P999, Max, Min time.Duration
}

// NewDist summarizes ds; it sorts ds in place.
func NewDist(ds []time.Duration) Dist {
	n := len(ds)
	if n == 0 {
		return Dist{}
	}
	slices.Sort(ds)
	return Dist{N: n, P50: Percentile(ds, 50), P90: Percentile(ds, 90), P99: Percentile(ds, 99),
		P999: Percentile(ds, 99.9), Max: ds[n-1], Min: ds[0]}
}

// Percentile returns the p-th percentile (0 < p ≤ 100) of sorted by nearest rank: the smallest
// value with at least p% of the values at or below it.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	rank := int(math.Ceil(p/100*float64(n) - 1e-9)) // 1e-9: 0.9·10 must be rank 9, not 10
	return sorted[min(max(rank, 1), n)-1]
}
