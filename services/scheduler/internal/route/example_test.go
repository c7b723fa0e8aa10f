package route_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jobmesh/jobmesh/services/scheduler/internal/route"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/route/routetest"
)

func ExampleRouter_Route() {
	prober := &routetest.Prober{}
	prober.SetDead("10.0.0.1:9999", errors.New("connection refused"))
	r := route.New(route.Options{Prober: prober})
	ctx := context.Background()
	group := []string{"10.0.0.1:9999", "10.0.0.2:9999", "10.0.0.3:9999"}

	d, _ := r.Route(ctx, 42, route.Failover, group)
	fmt.Println(d.Targets[0].Address)
	fmt.Println(d.Message)

	d, _ = r.Route(ctx, 42, route.ShardingBroadcast, group)
	for _, t := range d.Targets {
		fmt.Printf("%s shard %d/%d\n", t.Address, t.ShardIndex, t.ShardTotal)
	}

	_, err := r.Route(ctx, 42, route.Round, nil)
	fmt.Println(err)
	// Output:
	// 10.0.0.2:9999
	// route FAILOVER over 3 executors [10.0.0.1:9999 10.0.0.2:9999 10.0.0.3:9999]: beat 10.0.0.1:9999: failed: connection refused; beat 10.0.0.2:9999: ok; chose 10.0.0.2:9999
	// 10.0.0.1:9999 shard 0/3
	// 10.0.0.2:9999 shard 1/3
	// 10.0.0.3:9999 shard 2/3
	// no executors online
}
