// Package failover holds the scheduler's failover guarantee tests (design.md §2.8, issues 3 and
// 22): real etcd, real Postgres, several `jobmesh scheduler` processes sharing 16 partitions and
// an agent that counts what it runs. TestReplicaKill kills random replicas with SIGKILL and
// restarts others gracefully again and again under load, and afterwards every scheduled fire must
// have run exactly once; TestReplicaKillWorkflows does the same under 50 diamond workflows
// firing every 5 s and checks every instance ends and every node runs once;
// BenchmarkWorkflowNodeLatency measures a workflow node's completion to its downstream node's
// start at 1,000 nodes per second; TestBalance checks that the partitions spread evenly over the replicas
// and move to the others when one leaves. The package has no code of its own: the tests check the
// runs with internal/firecheck and run the replicas with internal/cluster, which the load tool
// (`jobmesh bench failover`) shares.
package failover
