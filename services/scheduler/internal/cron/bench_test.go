package cron_test

import (
	"testing"
	"time"

	"github.com/jobmesh/jobmesh/services/scheduler/internal/cron"
)

func BenchmarkParse(b *testing.B) {
	for b.Loop() {
		if _, err := cron.Parse("0 0/5 14,18 ? JAN-MAR,NOV MON-FRI 2026-2030"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNext chains fire times the way the scheduler does, from one fire to the next.
func BenchmarkNext(b *testing.B) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, zone := range []string{"UTC", "America/New_York"} {
		loc := mustLoad(b, zone)
		for _, expr := range []string{"0 */5 * * * ?", "0 15 10 ? * 6L", "0 0 12 1/5 * ?"} {
			e := mustParse(b, expr)
			b.Run(zone+"/"+expr, func(b *testing.B) {
				at := start
				for b.Loop() {
					next, ok := e.Next(at, loc)
					if !ok {
						next = start
					}
					at = next
				}
			})
		}
	}
}

// BenchmarkNextRare measures an expression that must skip most months and years.
func BenchmarkNextRare(b *testing.B) {
	e := mustParse(b, "0 0 0 29 2 ? 2100-2199")
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for b.Loop() {
		if _, ok := e.Next(start, nil); !ok {
			b.Fatal("Next = false, want 2104-02-29")
		}
	}
}
