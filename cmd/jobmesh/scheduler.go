package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/jobmesh/jobmesh/internal/grpcserver"
	"github.com/jobmesh/jobmesh/internal/hostport"
	"github.com/jobmesh/jobmesh/services/gateway/auth"
	"github.com/jobmesh/jobmesh/services/scheduler"
)

// schedulerConfig is what one `jobmesh scheduler` replica runs with.
type schedulerConfig struct {
	// meshConfig: the registry and logsvc are required; the auth service is optional (without
	// it the replica accepts only callers with the internal token).
	meshConfig
	// GRPCAddr is where JobService and SchedulerService listen; port 0 picks a free port, and
	// the actual address is printed on stdout as "scheduler grpc <host:port>".
	GRPCAddr string
	// AdvertiseAddr is where the other replicas reach this one, to forward it the manual triggers
	// of the partitions it leads; empty means the listener's address, unless it listens on every
	// interface (0.0.0.0, ::), which advertises nothing (advertiseAddr).
	AdvertiseAddr string
	// EtcdEndpoints is the etcd cluster the replicas lease their partitions in. Required.
	EtcdEndpoints []string
	// etcdTLS secures the etcd connection when given.
	etcdTLS etcdTLSFlags
	// DatabaseURL is the Postgres database shared by the replicas (schema "scheduler"). Required:
	// SQLite cannot be shared between processes.
	DatabaseURL string
	// ReplicaID names the replica among the partitions' leaders; empty means hostname-pid.
	ReplicaID string
	// SessionTTL is the etcd session TTL: how long a crashed replica keeps its partitions.
	SessionTTL time.Duration
	// Partitions is the partition count of a new cluster (scheduler.Config.Partitions).
	Partitions int
	// DispatchLead is how long before its time a fire goes to executors that hold it until then;
	// 0 sends every fire at its time.
	DispatchLead time.Duration
	// RecordQueue caps the trigger records held for logsvc (scheduler.Config.RecordQueue).
	RecordQueue int
	// MisfireThreshold is how late a fire may be, waiting for an executor included, before its
	// misfire strategy applies (scheduler.Config.MisfireThreshold).
	MisfireThreshold time.Duration
	// ExecutorQueue and ExecutorQueueTotal bound the fires that wait for executors, per executor
	// and in all (scheduler.Config.ExecutorQueue and ExecutorQueueTotal).
	ExecutorQueue, ExecutorQueueTotal int
	// XxlAccessToken is presented to the XXL-JOB executors of groups without an access token,
	// and expected on their callbacks (scheduler.Config.XxlAccessToken); empty for none.
	XxlAccessToken string
}

// maxMisfireThreshold is the longest misfire threshold: a new leader looks this far back for the
// fires the old one owed, and counts older ones as misfires whatever the threshold.
const maxMisfireThreshold = 10 * time.Minute

var schedulerPeers = []peer{peerRegistry, peerLogs}

// maxPartitions bounds --partitions: each partition is an etcd key, a fence row and, where it is
// led, a time ring and a pre-read loop.
const maxPartitions = 4096

// validate names the flag of everything wrong.
func (c *schedulerConfig) validate() error {
	errs := []error{checkAddr("--grpc-addr", c.GRPCAddr)}
	if c.AdvertiseAddr != "" && (!hostport.Valid(c.AdvertiseAddr) || unspecifiedHost(c.AdvertiseAddr)) {
		errs = append(errs, fmt.Errorf("--advertise-addr %q: want host:port the other replicas can dial", c.AdvertiseAddr))
	}
	if len(c.EtcdEndpoints) == 0 {
		errs = append(errs, errors.New("--etcd-endpoints: required"))
	}
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New("--database-url: required (a Postgres URL shared by every replica)"))
	}
	errs = append(errs, c.meshConfig.validate(schedulerPeers)...)
	if c.SessionTTL < time.Second || c.SessionTTL%time.Second != 0 {
		errs = append(errs, fmt.Errorf("--session-ttl %v: want whole seconds, at least 1s", c.SessionTTL))
	}
	if c.Partitions < 1 || c.Partitions > maxPartitions {
		errs = append(errs, fmt.Errorf("--partitions %d: want 1 to %d", c.Partitions, maxPartitions))
	}
	if c.DispatchLead < 0 || c.DispatchLead > 4*time.Second {
		errs = append(errs, fmt.Errorf("--dispatch-lead %v: want 0 (off) to 4s, less than the 5s pre-read window", c.DispatchLead))
	}
	if c.RecordQueue < 1 {
		errs = append(errs, fmt.Errorf("--record-queue %d: at least 1", c.RecordQueue))
	}
	if c.MisfireThreshold < time.Second || c.MisfireThreshold > maxMisfireThreshold {
		errs = append(errs, fmt.Errorf("--misfire-threshold %v: want 1s to %v (a new leader looks that far back for owed fires)", c.MisfireThreshold, maxMisfireThreshold))
	}
	if c.ExecutorQueue < 1 {
		errs = append(errs, fmt.Errorf("--executor-queue %d: at least 1", c.ExecutorQueue))
	}
	if c.ExecutorQueueTotal < max(c.ExecutorQueue, 1) {
		errs = append(errs, fmt.Errorf("--executor-queue-total %d: at least 1, and at least --executor-queue (%d)", c.ExecutorQueueTotal, c.ExecutorQueue))
	}
	return errors.Join(errs...)
}

// parseSchedulerFlags reads the flags (and their JOBMESH_ twins) of `jobmesh scheduler`.
func parseSchedulerFlags(args []string, stderr io.Writer) (schedulerConfig, error) {
	var (
		c         schedulerConfig
		endpoints string
	)
	f := newFlags("jobmesh scheduler", stderr)
	f.str(&c.GRPCAddr, "grpc-addr", "127.0.0.1:9010", "gRPC `address` of JobService and SchedulerService; port 0 picks one")
	f.str(&c.AdvertiseAddr, "advertise-addr", "", "`host:port` the other replicas reach this one's gRPC at, to forward it the manual triggers of the partitions it leads; empty means --grpc-addr's actual address unless it listens on every interface (0.0.0.0, ::)")
	f.str(&endpoints, "etcd-endpoints", "", "comma-separated etcd `urls` (required)")
	c.etcdTLS.add(f)
	f.str(&c.DatabaseURL, "database-url", "", "Postgres `url` shared by every replica (required)")
	c.addFlags(f, schedulerPeers, peerAuth)
	f.str(&c.ReplicaID, "replica-id", "", "this replica's `name` among the partitions' leaders (unique per replica); empty means hostname-pid")
	f.dur(&c.SessionTTL, "session-ttl", 2*time.Second, "etcd session TTL: how long a crashed replica keeps its partitions")
	f.integer(&c.Partitions, "partitions", scheduler.DefaultPartitions, "`count` of partitions the jobs of a new cluster hash to, each led by one replica; fixed at the cluster's first start (a replica given another count uses the stored one)")
	f.dur(&c.DispatchLead, "dispatch-lead", scheduler.DefaultDispatchLead, "send fires this long before their time to executors that hold them until then (0: at their time)")
	f.integer(&c.RecordQueue, "record-queue", scheduler.DefaultRecordQueue, "`count` of trigger records held for logsvc until it acknowledges them (about 320 bytes each); beyond it new ones are dropped and logged")
	f.dur(&c.MisfireThreshold, "misfire-threshold", scheduler.DefaultMisfireThreshold, "how late a fire may be, waiting for a full or silent executor included, before its job's misfire strategy applies (1s to 10m)")
	f.integer(&c.ExecutorQueue, "executor-queue", scheduler.DefaultExecutorQueue, "`count` of fires that may wait for one executor (full, unreachable or not answering; about 0.5 KB each); beyond it a fire is given up at once")
	f.integer(&c.ExecutorQueueTotal, "executor-queue-total", scheduler.DefaultExecutorQueueTotal, "`count` of fires that may wait for executors in all; at least --executor-queue")
	f.str(&c.XxlAccessToken, "xxl-access-token", "", "XXL-JOB access `token` presented to XXL-JOB executors of groups without an access token of their own, and expected on their callbacks: the gateway's --xxl-access-token (empty: none)")
	if err := f.parse(args); err != nil {
		return c, err
	}
	if f.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", f.Args())
	}
	c.EtcdEndpoints = splitList(endpoints)
	return c, c.validate()
}

// runScheduler runs one scheduler replica until ctx ends: it serves the job API and leads its
// share of the partitions, scheduling their jobs.
func runScheduler(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseSchedulerFlags(args, stderr)
	if err != nil {
		return err
	}
	p, err := newProcess(ctx, "scheduler", cfg.meshConfig, stderr)
	if err != nil {
		return err
	}
	defer p.close()
	log := p.log

	store, err := p.openStore(ctx, cfg.DatabaseURL, "scheduler", scheduler.MigrationsFS())
	if err != nil {
		return err
	}
	etcd, err := p.etcdClient(cfg.EtcdEndpoints, cfg.etcdTLS)
	if err != nil {
		return err
	}
	regConn, err := p.dial("--registry-addr", cfg.RegistryAddr)
	if err != nil {
		return err
	}
	logsConn, err := p.dial("--logs-addr", cfg.LogsAddr)
	if err != nil {
		return err
	}
	ln, err := p.listen(ctx, "--grpc-addr", cfg.GRPCAddr)
	if err != nil {
		return err
	}
	advertise := advertiseAddr(cfg.AdvertiseAddr, ln)
	if advertise == "" {
		log.Warn("the replica advertises no address (it listens on every interface): the others dispatch the manual triggers of its partitions themselves; set --advertise-addr",
			"grpc_addr", ln.Addr().String())
	}
	sched, err := scheduler.NewInMesh(scheduler.Config{ReplicaID: cfg.ReplicaID, SessionTTL: cfg.SessionTTL, Partitions: cfg.Partitions,
		DispatchLead: leadConfig(cfg.DispatchLead), RecordQueue: cfg.RecordQueue, Logger: log,
		MisfireThreshold: cfg.MisfireThreshold, ExecutorQueue: cfg.ExecutorQueue, ExecutorQueueTotal: cfg.ExecutorQueueTotal,
		XxlAccessToken: cfg.XxlAccessToken,
	}, scheduler.Mesh{
		Store: store, Etcd: etcd, Registry: regConn, Logs: logsConn, TLS: p.tls.DialOption(),
		InternalToken: p.mesh.InternalToken, InternalCreds: auth.BearerToken(p.mesh.InternalToken), InternalCaller: auth.IsInternalCaller, AdvertiseAddr: advertise,
	})
	if err != nil {
		return err
	}
	// The guard looks jobs up on this replica itself, over loopback with the internal token.
	selfConn, err := p.dial("--grpc-addr", selfAddr(ln))
	if err != nil {
		return err
	}
	guard, err := p.guard(guardDeps{Jobs: selfConn, Logs: logsConn, Registry: regConn})
	if err != nil {
		return err
	}
	failed := make(chan error, 1)
	g := p.serve(ln, guard, failed, sched.Register)
	if err := sched.Start(ctx); err != nil {
		g.Stop()
		return err
	}
	fmt.Fprintf(stdout, "scheduler grpc %s\n", ln.Addr())
	log.Info("scheduler replica up", "grpc_addr", ln.Addr().String(), "advertise_addr", advertise, "replica_id", cfg.ReplicaID)

	err = wait(ctx, failed)
	// Tell the others this is a stop, not a crash; stop accepting calls; then resign and drain;
	// the deferred closes follow.
	sched.StopAdvertising()
	grpcserver.Stop(g, grpcserver.StopGrace, log)
	sched.Stop()
	log.Info("scheduler replica stopped")
	return err
}

// advertiseAddr is the address a replica advertises to the others: --advertise-addr when given,
// else the listener's actual address unless it listens on every interface, which names no
// address the others can dial ("").
func advertiseAddr(flag string, ln net.Listener) string {
	if flag != "" {
		return flag
	}
	return hostport.Advertised(ln.Addr())
}

// unspecifiedHost reports whether addr's host is 0.0.0.0 or ::, which names no machine.
func unspecifiedHost(addr string) bool {
	host, _, _ := net.SplitHostPort(addr)
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsUnspecified()
}

// leadConfig maps --dispatch-lead to scheduler.Config.DispatchLead, where zero means the default
// and a negative value means off.
func leadConfig(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
