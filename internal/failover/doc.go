// Package failover holds the scheduler's failover guarantee test (design.md §2.8, issue 3): real
// etcd, real Postgres, several `jobmesh scheduler` processes and an agent that counts what it runs;
// the leader is killed with SIGKILL again and again under load, and afterwards every scheduled
// fire must have run exactly once. The package has no code of its own: the test is
// failover_test.go, and it checks the runs with internal/firecheck and runs the replicas with
// internal/cluster, which the load tool (`jobmesh bench failover`) shares.
package failover
