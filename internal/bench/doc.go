// Package bench is the load tool, `jobmesh bench` (issue 9): it brings up a real cluster as
// separate processes (etcd, registry, logsvc, gateway, scheduler replicas and bench agents whose
// handler only records when each fire arrived) or targets a running one, drives a scenario
// (rate, scale, failover, ramp) and reports what came out: fires expected, dispatched, executed
// and stored, lost and doubled; lateness and end-to-end percentiles; CPU time per process and
// CPU microseconds per fire; peak memory; failover gaps.
//
// The measured processes are the jobmesh binary itself, re-executed: `jobmesh bench etcd` runs
// an embedded etcd and `jobmesh bench agent` a bench agent, each as its own process, so the
// driver's own work never shows in their figures.
package bench
