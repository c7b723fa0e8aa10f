package registry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	"github.com/jobmesh/jobmesh/internal/seal"
)

// KeyPrefix is where executors register: KeyPrefix + "<app>/<instance>", value the protojson of
// registryv1.Executor, under the executor's own lease.
const KeyPrefix = "/jobmesh/v1/executors/"

// view is the live executor view, rebuilt from etcd and kept current by a watch.
type view struct {
	log  *slog.Logger
	cli  *clientv3.Client
	now  func() time.Time
	seal *seal.Key // registrations without its seal are left out

	mu     sync.RWMutex
	execs  map[string]*registryv1.Executor // etcd key → executor
	leases map[string]clientv3.LeaseID     // etcd key → the lease it lives under
	rev    int64
	subs   map[*subscriber]struct{}
}

// subscriber is one WatchExecutors stream. When it falls behind, its queue is dropped and it is
// sent a fresh snapshot instead, so a slow reader never blocks the watch.
type subscriber struct {
	app    string
	events chan *registryv1.WatchExecutorsResponse
	resync chan struct{} // closed-or-signalled (cap 1) when events overflowed
}

func newView(log *slog.Logger, cli *clientv3.Client, now func() time.Time, sk *seal.Key) *view {
	return &view{
		log: log, cli: cli, now: now, seal: sk, execs: map[string]*registryv1.Executor{},
		leases: map[string]clientv3.LeaseID{}, subs: map[*subscriber]struct{}{},
	}
}

// load lists the prefix and replaces the view with it; it returns the revision listed at.
func (v *view) load(ctx context.Context) (int64, error) {
	resp, err := v.cli.Get(ctx, KeyPrefix, clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("list executors: %w", err)
	}
	execs := make(map[string]*registryv1.Executor, len(resp.Kvs))
	leases := make(map[string]clientv3.LeaseID, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if e, ok := v.decode(string(kv.Key), kv.Value, clientv3.LeaseID(kv.Lease)); ok {
			execs[string(kv.Key)] = e
			leases[string(kv.Key)] = clientv3.LeaseID(kv.Lease)
		}
	}
	v.mu.Lock()
	v.execs, v.leases = execs, leases
	v.rev = resp.Header.Revision
	for s := range v.subs {
		s.signalResync()
	}
	v.mu.Unlock()
	return resp.Header.Revision, nil
}

// run keeps the view current until ctx ends: it watches from the last revision seen, resumes
// after a broken watch and re-lists after a compaction.
func (v *view) run(ctx context.Context, rev int64) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := v.watch(ctx, rev+1)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errCompacted) {
			v.log.Warn("executor watch compacted; listing again", "revision", rev)
		} else {
			v.log.Warn("executor watch broken; resuming", "revision", rev, "error", err)
			v.mu.RLock()
			rev = v.rev
			v.mu.RUnlock()
			if err := sleepCtx(ctx, backoff); err != nil {
				return
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		r, err := v.load(ctx)
		if err != nil {
			v.log.Warn("listing executors failed", "error", err)
			if err := sleepCtx(ctx, backoff); err != nil {
				return
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		rev, backoff = r, 100*time.Millisecond
	}
}

var errCompacted = errors.New("watch revision compacted")

func (v *view) watch(ctx context.Context, from int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range v.cli.Watch(wctx, KeyPrefix, clientv3.WithPrefix(), clientv3.WithRev(from)) {
		if wr.CompactRevision != 0 {
			return errCompacted
		}
		if err := wr.Err(); err != nil {
			return err
		}
		v.apply(wr)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.New("watch channel closed")
}

func (v *view) apply(wr clientv3.WatchResponse) {
	var puts, dels []*registryv1.Executor
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, ev := range wr.Events {
		key := string(ev.Kv.Key)
		switch ev.Type {
		case clientv3.EventTypePut:
			if e, ok := v.decode(key, ev.Kv.Value, clientv3.LeaseID(ev.Kv.Lease)); ok {
				v.execs[key] = e
				v.leases[key] = clientv3.LeaseID(ev.Kv.Lease)
				puts = append(puts, e)
				continue
			}
			// An unreadable or unsealed value replaced a registration: it is gone.
			if e, ok := v.execs[key]; ok {
				delete(v.execs, key)
				delete(v.leases, key)
				dels = append(dels, e)
			}
		case clientv3.EventTypeDelete:
			if e, ok := v.execs[key]; ok {
				delete(v.execs, key)
				delete(v.leases, key)
				dels = append(dels, e)
			}
		}
	}
	v.rev = wr.Header.Revision
	if len(puts) > 0 {
		v.publish(&registryv1.WatchExecutorsResponse{Type: registryv1.ExecutorEventType_EXECUTOR_EVENT_TYPE_PUT, Executors: puts, Revision: v.rev})
	}
	if len(dels) > 0 {
		v.publish(&registryv1.WatchExecutorsResponse{Type: registryv1.ExecutorEventType_EXECUTOR_EVENT_TYPE_DELETE, Executors: dels, Revision: v.rev})
	}
}

// publish sends ev to every subscriber of its app; v.mu is held.
func (v *view) publish(ev *registryv1.WatchExecutorsResponse) {
	for s := range v.subs {
		out := ev
		if s.app != "" {
			out = filterEvent(ev, s.app)
			if out == nil {
				continue
			}
		}
		select {
		case s.events <- out:
		default:
			s.signalResync()
		}
	}
}

func filterEvent(ev *registryv1.WatchExecutorsResponse, app string) *registryv1.WatchExecutorsResponse {
	var es []*registryv1.Executor
	for _, e := range ev.Executors {
		if e.AppName == app {
			es = append(es, e)
		}
	}
	if len(es) == 0 {
		return nil
	}
	return &registryv1.WatchExecutorsResponse{Type: ev.Type, Executors: es, Revision: ev.Revision}
}

func (s *subscriber) signalResync() {
	select {
	case s.resync <- struct{}{}:
	default:
	}
}

// subscribe registers a stream and returns it with the snapshot it starts from.
func (v *view) subscribe(app string) (*subscriber, *registryv1.WatchExecutorsResponse) {
	s := &subscriber{app: app, events: make(chan *registryv1.WatchExecutorsResponse, 256), resync: make(chan struct{}, 1)}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.subs[s] = struct{}{}
	return s, v.snapshotLocked(app)
}

// resnapshot empties a lagging subscriber's queue and returns a fresh snapshot for it.
func (v *view) resnapshot(s *subscriber) *registryv1.WatchExecutorsResponse {
	v.mu.Lock()
	defer v.mu.Unlock()
	for len(s.events) > 0 {
		<-s.events
	}
	return v.snapshotLocked(s.app)
}

func (v *view) unsubscribe(s *subscriber) {
	v.mu.Lock()
	delete(v.subs, s)
	v.mu.Unlock()
}

func (v *view) snapshotLocked(app string) *registryv1.WatchExecutorsResponse {
	return &registryv1.WatchExecutorsResponse{
		Type:      registryv1.ExecutorEventType_EXECUTOR_EVENT_TYPE_SNAPSHOT,
		Executors: v.listLocked(app),
		Revision:  v.rev,
	}
}

// list returns the executors of app (all when empty), sorted by app, then address.
func (v *view) list(app string) []*registryv1.Executor {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.listLocked(app)
}

func (v *view) listLocked(app string) []*registryv1.Executor {
	out := make([]*registryv1.Executor, 0, len(v.execs))
	for _, e := range v.execs {
		if app == "" || e.AppName == app {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b *registryv1.Executor) int {
		return cmp.Or(cmp.Compare(a.AppName, b.AppName), cmp.Compare(a.Address, b.Address), cmp.Compare(a.InstanceId, b.InstanceId))
	})
	return out
}

// lastSeenWorkers bounds the lease lookups of one withLastSeen call.
const lastSeenWorkers = 16

// lastSeenTimeout bounds one withLastSeen call, so a slow etcd cannot hold up a group read (the
// scheduler reads groups on its dispatch path); executors not looked up by then keep the time
// their key was written.
const lastSeenTimeout = 500 * time.Millisecond

// withLastSeen returns copies of execs whose LastSeenTime is when etcd last refreshed their
// lease. Keepalives do not rewrite the key, so the write time alone would show an executor that
// has been up for days as last seen when it started. etcd answers in whole seconds, so the time
// may be up to a second early. An executor whose lease cannot be read keeps its write time.
// It costs one etcd call per executor, so only the listing APIs use it, never the watch.
func (v *view) withLastSeen(ctx context.Context, execs []*registryv1.Executor) []*registryv1.Executor {
	out := make([]*registryv1.Executor, len(execs))
	leases := make([]clientv3.LeaseID, len(execs))
	v.mu.RLock()
	for i, e := range execs {
		out[i] = proto.CloneOf(e) // the view's executors are shared with the watch streams
		leases[i] = v.leases[KeyPrefix+e.AppName+"/"+e.InstanceId]
	}
	v.mu.RUnlock()
	ctx, cancel := context.WithTimeout(ctx, lastSeenTimeout)
	defer cancel()
	sem := make(chan struct{}, lastSeenWorkers)
	var wg sync.WaitGroup
	for i, e := range out {
		if leases[i] == clientv3.NoLease {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			resp, err := v.cli.TimeToLive(ctx, leases[i])
			if err != nil || resp.TTL <= 0 || resp.GrantedTTL < resp.TTL {
				return // unreadable or just expired: the write time is the best we know
			}
			seen := v.now().Add(-time.Duration(resp.GrantedTTL-resp.TTL) * time.Second)
			if written := e.GetLastSeenTime().AsTime(); seen.After(written) {
				e.LastSeenTime = timestamppb.New(seen)
			}
		})
	}
	wg.Wait()
	return out
}

// decode parses a registration; the key is the authority for app and instance.
func (v *view) decode(key string, val []byte, lease clientv3.LeaseID) (*registryv1.Executor, bool) {
	rest := strings.TrimPrefix(key, KeyPrefix)
	app, inst, ok := strings.Cut(rest, "/")
	if !ok || app == "" || inst == "" {
		v.log.Warn("ignoring malformed executor key", "key", key)
		return nil, false
	}
	e := &registryv1.Executor{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(val, e); err != nil {
		v.log.Warn("ignoring malformed executor registration", "key", key, "error", err)
		return nil, false
	}
	if e.Address == "" {
		v.log.Warn("ignoring executor registration without address", "key", key)
		return nil, false
	}
	if lease == 0 || !v.seal.Valid(e.Seal, key, strconv.FormatInt(int64(lease), 16), string(sealed(e))) {
		// Not written by a registry (RegisterExecutor): someone with write access to etcd.
		v.log.Warn("ignoring executor registration the registry did not write (no valid seal)", "key", key, "address", e.Address)
		return nil, false
	}
	e.Seal = ""
	e.AppName, e.InstanceId = app, inst
	e.LastSeenTime = timestamppb.New(v.now())
	return e, true
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
