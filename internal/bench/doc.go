// Package bench is the load tool, `jobmesh bench` (issue 9): it brings up a real cluster as
// separate processes (etcd, registry, logsvc, gateway, scheduler replicas and bench agents) or
// targets a running one, drives a scenario (rate, scale, failover, ramp) and reports what came
// out: fires expected, dispatched, executed and stored, lost and doubled; lateness and
// end-to-end percentiles; CPU time per process and CPU microseconds per fire; peak memory;
// failover gaps.
//
// What a fire runs is --handler: noop, the bench agents' own handler, which only records when
// each fire arrived; or http, shell or python, whose side effect is an HTTP request to the
// bench's sink, which records when it arrived, so lateness and loss are measured there.
//
// The measured processes are the jobmesh binary itself, re-executed: `jobmesh bench etcd` runs
// an embedded etcd, `jobmesh bench agent` a bench agent and `jobmesh bench sink` the sink, each
// as its own process, so the driver's own work never shows in their figures.
package bench
