package sdk

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
)

// RegistryPrefix is where executors register: RegistryPrefix + "<app>/<instance>", with the
// protojson of registryv1.Executor as value, under the executor's own lease.
const RegistryPrefix = "/jobmesh/v1/executors/"

// registrar keeps the executor's key in etcd under a kept-alive lease, and registers again with
// a new lease whenever the lease is lost (expiry, etcd restart), until stopped.
type registrar struct {
	cli *clientv3.Client
	log *slog.Logger
	key string
	val string
	ttl int64

	mu     sync.Mutex
	lease  clientv3.LeaseID
	cancel context.CancelFunc
	done   chan struct{}
}

func newRegistrar(cfg Config, advertise string, started time.Time, log *slog.Logger) *registrar {
	val, _ := protojson.Marshal(&registryv1.Executor{
		AppName: cfg.AppName, InstanceId: cfg.InstanceID, Address: advertise, Version: cfg.Version,
		StartTime: timestamppb.New(started), Capacity: int32(cfg.Capacity), Labels: cfg.Labels,
		HoldsFires: true, // Run honours start_delay_us (worker.go: hold)
	})
	return &registrar{
		cli: cfg.Etcd, log: log, key: RegistryPrefix + cfg.AppName + "/" + cfg.InstanceID, val: string(val),
		ttl: int64((cfg.RegistrationTTL + time.Second - 1) / time.Second),
	}
}

// start registers once (an error means no registration) and keeps the registration until stop.
func (r *registrar) start(ctx context.Context) error {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	// The first registration is bounded by the caller's ctx, its keepalive by rctx.
	ch, err := r.register(ctx, rctx)
	if err != nil {
		cancel()
		return fmt.Errorf("Etcd: register executor %s: %w", r.key, err)
	}
	r.cancel = cancel
	r.done = make(chan struct{})
	go func() {
		defer close(r.done)
		r.keep(rctx, ch)
	}()
	r.log.Info("executor registered", "key", r.key, "lease_id", fmt.Sprintf("%x", r.leaseID()), "ttl_s", r.ttl)
	return nil
}

// register grants a lease, puts the key under it and starts its keepalive.
func (r *registrar) register(ctx, keepCtx context.Context) (<-chan *clientv3.LeaseKeepAliveResponse, error) {
	g, err := r.cli.Grant(ctx, r.ttl)
	if err != nil {
		return nil, fmt.Errorf("grant lease: %w", err)
	}
	if _, err := r.cli.Put(ctx, r.key, r.val, clientv3.WithLease(g.ID)); err != nil {
		r.revoke(g.ID)
		return nil, fmt.Errorf("put %s: %w", r.key, err)
	}
	ch, err := r.cli.KeepAlive(keepCtx, g.ID)
	if err != nil {
		r.revoke(g.ID)
		return nil, fmt.Errorf("keep lease alive: %w", err)
	}
	r.mu.Lock()
	r.lease = g.ID
	r.mu.Unlock()
	return ch, nil
}

func (r *registrar) leaseID() clientv3.LeaseID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lease
}

// keep drains keepalive responses; when the channel closes (the lease is gone or the client
// gave up), it says why and registers again with backoff.
func (r *registrar) keep(ctx context.Context, ch <-chan *clientv3.LeaseKeepAliveResponse) {
	for {
		for range ch {
		}
		if ctx.Err() != nil {
			return
		}
		r.log.Warn("executor registration lost; registering again", "key", r.key, "lease_id", fmt.Sprintf("%x", r.leaseID()), "reason", r.whyLost(ctx))
		backoff := 100 * time.Millisecond
		for {
			var err error
			ch, err = r.register(ctx, ctx)
			if err == nil {
				r.log.Info("executor registered again", "key", r.key, "lease_id", fmt.Sprintf("%x", r.leaseID()))
				break
			}
			if ctx.Err() != nil {
				return
			}
			r.log.Warn("registering executor in etcd failed; retrying", "key", r.key, "error", err, "backoff", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, 5*time.Second)
		}
	}
}

// whyLost asks etcd what became of the lease.
func (r *registrar) whyLost(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := r.cli.TimeToLive(ctx, r.leaseID())
	switch {
	case err != nil:
		return "keepalive ended and etcd is unreachable: " + err.Error()
	case resp.TTL <= 0:
		return "lease expired or revoked (etcd restarted, or keepalives did not reach it within the TTL)"
	default:
		return "keepalive stream ended"
	}
}

// stop ends the keepalive and revokes the lease, which deletes the key at once.
func (r *registrar) stop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	<-r.done
	r.revoke(r.leaseID())
	r.log.Info("executor deregistered", "key", r.key)
}

func (r *registrar) revoke(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := r.cli.Revoke(ctx, id); err != nil {
		r.log.Warn("revoking registration lease failed; the key expires with its TTL", "key", r.key, "error", err)
	}
}
