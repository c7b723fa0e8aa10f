package route_test

import (
	"context"
	"testing"

	"github.com/jobmesh/jobmesh/services/scheduler/internal/route"
)

// benchJobs is how many distinct jobs the benchmarks cycle through, so per-job state lookups
// are measured rather than one hot entry.
const benchJobs = 1024

var benchStrategies = []route.Strategy{
	route.First, route.Last, route.Round, route.Random, route.ConsistentHash,
	route.LeastFrequentlyUsed, route.LeastRecentlyUsed, route.ShardingBroadcast,
}

// BenchmarkRoute measures one decision per non-probing strategy in a 1,000-executor group, after
// warm-up: per-job state and the hash ring exist, as they do in a running leader.
func BenchmarkRoute(b *testing.B) {
	addrs := addrList(1000)
	ctx := context.Background()
	for _, s := range benchStrategies {
		b.Run(s.String(), func(b *testing.B) {
			r := route.New(route.Options{})
			for job := range int64(benchJobs) {
				if _, err := r.Route(ctx, job, s, addrs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			var job int64
			for b.Loop() {
				if _, err := r.Route(ctx, job%benchJobs, s, addrs); err != nil {
					b.Fatal(err)
				}
				job++
			}
		})
	}
}

// BenchmarkRouteParallel is BenchmarkRoute from many dispatch goroutines at once, to show that
// jobs do not contend with each other.
func BenchmarkRouteParallel(b *testing.B) {
	addrs := addrList(1000)
	ctx := context.Background()
	for _, s := range benchStrategies {
		b.Run(s.String(), func(b *testing.B) {
			r := route.New(route.Options{})
			for job := range int64(benchJobs) {
				if _, err := r.Route(ctx, job, s, addrs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				var job int64
				for pb.Next() {
					if _, err := r.Route(ctx, job%benchJobs, s, addrs); err != nil {
						b.Error(err)
						return
					}
					job += 7
				}
			})
		})
	}
}

// BenchmarkRingBuild measures the one-off cost of a membership change under CONSISTENT_HASH:
// XXL-JOB pays it on every fire, this router once per address set.
func BenchmarkRingBuild(b *testing.B) {
	addrs := addrList(1000)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		r := route.New(route.Options{})
		if _, err := r.Route(ctx, 1, route.ConsistentHash, addrs); err != nil {
			b.Fatal(err)
		}
	}
}
