package route

import (
	"context"
	"fmt"
	"strings"
)

// failover beats each address in order and sends the fire to the first that answers, as
// XXL-JOB's FAILOVER does. The message lists every probe so a failed trigger shows who was dead.
func (r *Router) failover(ctx context.Context, addrs []string) (Decision, error) {
	if r.prober == nil {
		return Decision{}, fmt.Errorf("route FAILOVER: %w", ErrNoProber)
	}
	var b strings.Builder
	writeHeader(&b, Failover, addrs, 0)
	for i, a := range addrs {
		if err := ctx.Err(); err != nil {
			b.WriteString("stopped: ")
			b.WriteString(err.Error())
			return Decision{Message: b.String()}, fmt.Errorf("route FAILOVER after %d of %d probes: %w", i, len(addrs), err)
		}
		b.WriteString("beat ")
		b.WriteString(a)
		if err := r.prober.Beat(ctx, a); err != nil {
			b.WriteString(": failed: ")
			b.WriteString(err.Error())
			b.WriteString("; ")
			continue
		}
		b.WriteString(": ok; chose ")
		b.WriteString(a)
		return single(a, b.String()), nil
	}
	b.WriteString("none alive")
	return Decision{Message: b.String()}, fmt.Errorf("route FAILOVER over %d executors: %w", len(addrs), ErrNoLiveExecutor)
}

// busyover idle-beats each address in order and sends the fire to the first that is idle for
// the job, as XXL-JOB's BUSYOVER does; an executor that cannot answer counts as busy.
func (r *Router) busyover(ctx context.Context, jobID int64, addrs []string) (Decision, error) {
	if r.prober == nil {
		return Decision{}, fmt.Errorf("route BUSYOVER: %w", ErrNoProber)
	}
	var b strings.Builder
	writeHeader(&b, Busyover, addrs, 0)
	for i, a := range addrs {
		if err := ctx.Err(); err != nil {
			b.WriteString("stopped: ")
			b.WriteString(err.Error())
			return Decision{Message: b.String()}, fmt.Errorf("route BUSYOVER after %d of %d probes: %w", i, len(addrs), err)
		}
		b.WriteString("idle beat ")
		b.WriteString(a)
		idle, reason, err := r.prober.IdleBeat(ctx, a, jobID)
		switch {
		case err != nil:
			b.WriteString(": failed: ")
			b.WriteString(err.Error())
			b.WriteString("; ")
		case !idle:
			b.WriteString(": busy")
			if reason != "" {
				b.WriteString(": ")
				b.WriteString(reason)
			}
			b.WriteString("; ")
		default:
			b.WriteString(": idle; chose ")
			b.WriteString(a)
			return single(a, b.String()), nil
		}
	}
	b.WriteString("none idle")
	return Decision{Message: b.String()}, fmt.Errorf("route BUSYOVER over %d executors: %w", len(addrs), ErrNoIdleExecutor)
}

func single(addr, msg string) Decision {
	return Decision{Targets: []Target{{Address: addr, ShardIndex: 0, ShardTotal: 1}}, Message: msg}
}
