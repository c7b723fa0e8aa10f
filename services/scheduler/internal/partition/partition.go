// Package partition decides which scheduler partitions this replica leads. Jobs hash to Count
// partitions (PartitionOf); each partition has one leader at a time, elected through etcd, and an
// epoch (the etcd revision that elected it) that fences the leader's writes. The live replicas
// share the partitions fairly (plan) and hand them over when replicas join, leave or die.
//
// etcd layout under Config.Prefix:
//
//	count             the partition count, decimal; written once, at the cluster's first start
//	members/<id>      value {"id":<id>,"addr":<address>} (JSON; older replicas wrote the bare id),
//	                  bound to the replica's session lease
//	partitions/<p>    value the leader's id, bound to its session lease; CreateRevision = epoch
package partition

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/jobmesh/jobmesh/internal/clock"
)

// DefaultCount is the partition count a new cluster gets when Config.Count is 0.
const DefaultCount = 64

// DefaultPrefix is the etcd key prefix when Config.Prefix is empty.
const DefaultPrefix = "/jobmesh/v1/scheduler"

// replanEvery is how often a replica re-plans without a watch event, to retry what failed.
const replanEvery = 500 * time.Millisecond

// earlyCooldown is how long a replica leaves alone a partition whose Lead returned on its own
// (before its ctx ended), so that a Lead that fails at once does not spin on etcd.
const earlyCooldown = time.Second

// settleTTLs is how long, in session TTLs, a replica leads a partition it has acquired before it
// may hand it over to even out the shares (plan's young). A replica that died and is back at
// once (a restart) finds its partitions taken by the others, which have just begun their
// takeovers: handing them back then made every one of them a second takeover, which waited for
// the first one's to end before it could fire. The shares even out a little later. (Giving up
// settled partitions in the young ones' place instead moved more partitions during a failover,
// and the gaps grew back: `jobmesh bench failover --kills 10 --rate 500 --seed 42`.)
const settleTTLs = 2

// opTimeout bounds the etcd writes of a hand-over, which run after the Run ctx may have ended.
const opTimeout = 5 * time.Second

// Config configures a Manager.
type Config struct {
	// Etcd is the client of the cluster's etcd; required.
	Etcd *clientv3.Client
	// ReplicaID names this replica; required, unique per replica.
	ReplicaID string
	// Address is where the other replicas reach this one (its gRPC address), stored in its
	// member key; empty when it does not advertise one.
	Address string
	// Count is the partition count wanted if the cluster has none stored yet; 0 means
	// DefaultCount. The count is stored in etcd at the cluster's first start and fixed from then
	// on: a replica started with another Count logs a warning and uses the stored one.
	Count int
	// SessionTTL is the etcd lease TTL, whole seconds, at least 1s; 0 means 2s. A dead replica's
	// partitions are taken over within about this long.
	SessionTTL time.Duration
	// Prefix is the etcd key prefix; default DefaultPrefix.
	Prefix string
	// Logger receives the manager's logs; nil discards them.
	Logger *slog.Logger
	// Clock paces the re-plans and the rejoin backoff; default the wall clock.
	Clock clock.Clock
	// Lead runs while this replica leads partition p under epoch; required. ctx ends when the
	// lead ends: the session is lost, the partition key vanished or changed hands, the replica
	// hands p over (rebalance), or shutdown. Lead must return once it has stopped (after any
	// hand-over work, e.g. a fenced flush); on a voluntary hand-over or shutdown the partition key
	// is deleted only after Lead returns, so the next leader starts after this one has stopped.
	// For a given p at most one Lead runs at a time in a replica. A Lead that returns before its
	// ctx ends gives p up (the replica may take it again later, under a new epoch).
	Lead func(ctx context.Context, p int, epoch int64)
	// PeerStopped, when set, watches replica id, which advertises addr: it returns nil once
	// that replica is seen to have stopped (its process is gone: a connection to it, once up and
	// serving id, dropped and addr now refuses connections), or an error; ctx's when ctx ends.
	// The manager then revokes that replica's etcd session unless its member key changed
	// meanwhile, so its partitions are taken over at once rather than when its lease expires
	// (SessionTTL, plus up to etcd's 500 ms expiry tick); after an error it watches again later.
	// A replica stopping on purpose first withdraws its address (StopAdvertising), and is not
	// watched; nor is a replica that advertises this one's own address. Nil leaves dead replicas
	// to their leases' expiry.
	PeerStopped func(ctx context.Context, id, addr string) error
}

func (c *Config) setDefaults() {
	if c.Count == 0 {
		c.Count = DefaultCount
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = 2 * time.Second
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	c.Prefix = strings.TrimRight(c.Prefix, "/")
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
}

func (c *Config) validate() error {
	switch {
	case c.Etcd == nil:
		return errors.New("partition: etcd: required")
	case c.ReplicaID == "" || c.ReplicaID == busy:
		return errors.New("partition: replica id: required")
	case c.Count < 0:
		return fmt.Errorf("partition: count %d: not negative", c.Count)
	case c.SessionTTL < time.Second || c.SessionTTL%time.Second != 0:
		return fmt.Errorf("partition: session ttl %v: whole seconds, at least 1s", c.SessionTTL)
	case c.Prefix == "":
		return errors.New("partition: prefix: not \"/\"")
	case c.Lead == nil:
		return errors.New("partition: lead: required")
	}
	return nil
}

// Owner is a partition's leader as a replica last saw it in etcd.
type Owner struct {
	// Leader is the leading replica's id; empty while none leads.
	Leader string
	// Epoch is the leader's epoch (its key's CreateRevision); 0 while none leads.
	Epoch int64
	// Addr is the leader's address as its member key advertises it; empty while none leads, the
	// leader advertises none, or its member key is gone (it is leaving or dead).
	Addr string
}

// Status is a snapshot of a Manager.
type Status struct {
	// Count is the cluster's partition count; 0 until known.
	Count int
	// Replicas are the live replicas' ids as watched in etcd, sorted.
	Replicas []string
	// Addresses maps the live replicas that advertise an address to it.
	Addresses map[string]string
	// Owners are the partitions' leaders as watched in etcd, indexed by partition.
	Owners []Owner
	// Led maps the partitions whose Lead runs here and is not ending to their epochs.
	Led map[int]int64
	// Handovers counts the leads this replica ended: given up, lost, or stopped at shutdown.
	Handovers int64
	// Acquired counts the partitions this replica acquired.
	Acquired int64
	// Revoked counts the sessions of stopped replicas this replica revoked (Config.PeerStopped).
	Revoked int64
}

// Manager joins the scheduler replicas in etcd and runs Config.Lead for the partitions this
// replica leads. Run's goroutine does all the planning and etcd writes but a hand-over's key
// deletion; every Lead runs in a goroutine of its own, which releases its key once Lead returns;
// the etcd session keeps its lease alive in another. Status, Count and Of may be called from any
// goroutine.
type Manager struct {
	cfg                           Config
	wantCount                     int // Config.Count as given: 0 when left to the default
	log                           *slog.Logger
	countKey, members, partitions string // keys and key prefixes
	rangeEnd                      string // end of the watched range [members, rangeEnd)

	count     atomic.Int64
	countOnce sync.Once
	countC    chan struct{} // closed once count is set
	running   atomic.Bool

	// advMu guards this replica's member key: the address it gives (Config.Address until
	// StopAdvertising) and the lease it is under (0 between sessions). It is held while the key
	// is written, so that StopAdvertising and a join do not pass each other.
	advMu     sync.Mutex
	advertise string
	lease     clientv3.LeaseID
	// stopping is set by StopAdvertising: the replica is on its way out and watches no peer
	// (its own server's stop would look like theirs).
	stopping atomic.Bool

	// mu guards the fields below; only the Run goroutine writes them.
	mu        sync.Mutex
	live      map[string]string // replica id (its member key exists) → its address, "" if none
	leases    map[string]int64  // replica id → the lease of its member key
	owners    []slot            // by partition
	leads     map[int]*lead     // Leads running here, ending or not
	cooldown  map[int]time.Time
	handovers int64
	acquired  int64
	revoked   int64
}

// slot is a partition key as watched.
type slot struct {
	leader string
	epoch  int64 // CreateRevision
	rev    int64 // revision of the last change applied; older news is ignored
}

// lead is one running Lead.
type lead struct {
	p      int
	epoch  int64
	since  time.Time // when it was acquired, on Config.Clock
	cancel context.CancelFunc
	ending bool // its ctx is cancelled: handing over, lost or shutting down
	lost   bool // its key is not ours any more: do not delete it
}

// leadDone is what a Lead's goroutine reports once it has returned (and released its key).
type leadDone struct {
	l     *lead
	early bool      // Lead returned before its ctx ended
	kv    *slotNews // the key's state after the release, when known
}

// slotNews is a partition key's state at a revision: kv nil when it is absent.
type slotNews struct {
	p   int
	kv  *mvccpb.KeyValue
	rev int64
}

// New returns a Manager; Run starts it.
func New(cfg Config) (*Manager, error) {
	want := cfg.Count
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m := &Manager{
		cfg:        cfg,
		wantCount:  want,
		log:        cfg.Logger.With("replica_id", cfg.ReplicaID),
		countKey:   cfg.Prefix + "/count",
		members:    cfg.Prefix + "/members/",
		partitions: cfg.Prefix + "/partitions/",
		rangeEnd:   cfg.Prefix + "/partitions0", // '0' follows '/': the range ends after partitions/
		countC:     make(chan struct{}),
		live:       map[string]string{},
		leases:     map[string]int64{},
		advertise:  cfg.Address,
		leads:      map[int]*lead{},
		cooldown:   map[int]time.Time{},
	}
	return m, nil
}

// Count returns the cluster's partition count, waiting until Run has learnt it or ctx ends.
func (m *Manager) Count(ctx context.Context) (int, error) {
	select {
	case <-m.countC:
		return int(m.count.Load()), nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// Of returns the partition of job id (PartitionOf with the cluster's count); -1 while the count
// is not known yet (before Count returns).
func (m *Manager) Of(id int64) int {
	c := m.count.Load()
	if c == 0 {
		return -1
	}
	return PartitionOf(id, int(c))
}

// Status returns a snapshot of the replicas, the partitions' leaders and this replica's leads.
func (m *Manager) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := Status{
		Count:     int(m.count.Load()),
		Replicas:  slices.Sorted(maps.Keys(m.live)),
		Addresses: make(map[string]string, len(m.live)),
		Owners:    make([]Owner, len(m.owners)),
		Led:       make(map[int]int64, len(m.leads)),
		Handovers: m.handovers,
		Acquired:  m.acquired,
		Revoked:   m.revoked,
	}
	for id, addr := range m.live {
		if addr != "" {
			st.Addresses[id] = addr
		}
	}
	for p := range m.owners {
		st.Owners[p] = m.ownerLocked(p)
	}
	for p, l := range m.leads {
		if !l.ending {
			st.Led[p] = l.epoch
		}
	}
	return st
}

// Owner returns partition p's leader as this replica last saw it; the zero Owner while none
// leads p, the count is not known yet, or p is out of range.
func (m *Manager) Owner(p int) Owner {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p < 0 || p >= len(m.owners) {
		return Owner{}
	}
	return m.ownerLocked(p)
}

// ownerLocked returns partition p's Owner. m.mu is held.
func (m *Manager) ownerLocked(p int) Owner {
	s := m.owners[p]
	if s.leader == "" {
		return Owner{}
	}
	return Owner{Leader: s.leader, Epoch: s.epoch, Addr: m.live[s.leader]}
}

// member is the value of a member key.
type member struct {
	ID   string `json:"id"`
	Addr string `json:"addr,omitempty"`
}

// memberValue encodes this replica's member key value.
func memberValue(id, addr string) string {
	b, _ := json.Marshal(member{ID: id, Addr: addr}) // strings only: cannot fail
	return string(b)
}

// addrOf returns the address a member key's value advertises: "" for the bare id older replicas
// write, or a value that is not a member of its own.
func addrOf(id string, value []byte) string {
	var mb member
	if len(value) == 0 || value[0] != '{' || json.Unmarshal(value, &mb) != nil || mb.ID != id {
		return ""
	}
	return mb.Addr
}

// Run joins the cluster and leads partitions until ctx ends; then it hands every partition over
// (withdraws its member key, cancels the Leads, waits for them, deletes their keys, revokes its
// lease) and returns nil. On a lost etcd session it ends every Lead at once, waits for them, and
// rejoins with a new session after a backoff. Run may not run twice at once.
func (m *Manager) Run(ctx context.Context) error {
	if !m.running.CompareAndSwap(false, true) {
		return errors.New("partition: Run is running already")
	}
	defer m.running.Store(false)
	backoff := 100 * time.Millisecond
	for {
		joined, err := m.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if joined {
			backoff = 100 * time.Millisecond
		}
		m.log.Warn("partition session ended; rejoining", "error", err, "backoff", backoff)
		t := m.cfg.Clock.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// session runs one etcd session: join, lead, and on the way out end every Lead. joined reports
// whether it got as far as watching the cluster.
func (m *Manager) session(ctx context.Context) (joined bool, err error) {
	// The session outlives ctx so that the keys stay ours while the Leads hand over at shutdown;
	// it is closed (the lease revoked) once they have.
	keepCtx, keepCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer keepCancel()
	stop := context.AfterFunc(ctx, keepCancel) // until the session exists, ctx may abort it
	sess, err := concurrency.NewSession(m.cfg.Etcd, concurrency.WithTTL(int(m.cfg.SessionTTL/time.Second)), concurrency.WithContext(keepCtx))
	if !stop() {
		if err == nil {
			sess.Close()
		}
		return false, ctx.Err()
	}
	if err != nil {
		return false, fmt.Errorf("etcd session: %w", err)
	}
	defer sess.Close() // revokes the lease: whatever is left of ours vanishes at once

	// lctx ends at shutdown and the moment the session is lost; every Lead's ctx derives from it.
	lctx, lcancel := context.WithCancel(ctx)
	defer lcancel()
	go func() {
		select {
		case <-sess.Done():
		case <-lctx.Done():
		}
		lcancel()
	}()

	if err := m.loadCount(lctx); err != nil {
		return false, err
	}
	m.advMu.Lock()
	pctx, pcancel := context.WithTimeout(lctx, opTimeout) // StopAdvertising waits for advMu
	_, err = m.cfg.Etcd.Put(pctx, m.members+m.cfg.ReplicaID, memberValue(m.cfg.ReplicaID, m.advertise), clientv3.WithLease(sess.Lease()))
	pcancel()
	if err == nil {
		m.lease = sess.Lease()
	}
	m.advMu.Unlock()
	if err != nil {
		return false, fmt.Errorf("join: put member key: %w", err)
	}
	defer func() {
		m.advMu.Lock()
		m.lease = 0
		m.advMu.Unlock()
	}()
	s := &membership{m: m, sess: sess, lctx: lctx, done: make(chan leadDone)}
	if err := s.resync(); err != nil {
		return false, err
	}
	m.log.Info("joined the scheduler partitions", "count", m.count.Load(), "lease", int64(sess.Lease()))
	err = s.loop()
	return true, err
}

// loadCount stores the wanted count unless the cluster has one, and learns the cluster's count.
func (m *Manager) loadCount(ctx context.Context) error {
	resp, err := m.cfg.Etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(m.countKey), "=", 0)).
		Then(clientv3.OpPut(m.countKey, strconv.Itoa(m.cfg.Count))).
		Else(clientv3.OpGet(m.countKey)).Commit()
	if err != nil {
		return fmt.Errorf("partition count: %w", err)
	}
	count := m.cfg.Count
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			return errors.New("partition count: key vanished")
		}
		count, err = strconv.Atoi(string(kvs[0].Value))
		if err != nil || count < 1 {
			return fmt.Errorf("partition count: stored value %q: not a positive number", kvs[0].Value)
		}
		if m.wantCount != 0 && count != m.wantCount {
			m.log.Warn("the cluster's partition count is fixed; using it instead of the configured one",
				"stored_count", count, "configured_count", m.wantCount)
		}
	}
	m.countOnce.Do(func() {
		m.count.Store(int64(count))
		m.mu.Lock()
		m.owners = make([]slot, count)
		m.mu.Unlock()
		close(m.countC)
	})
	return nil
}

// membership is the state of one session: its view of etcd is in the Manager.
type membership struct {
	m    *Manager
	sess *concurrency.Session
	lctx context.Context
	done chan leadDone // Lead goroutines report here; the loop always receives

	wch        clientv3.WatchChan // nil while the view needs a resync
	wcancel    context.CancelFunc
	needResync bool
	probes     probes // the peers watched with Config.PeerStopped
}

// loop follows etcd and re-plans until lctx ends, then ends every Lead and waits for them.
func (s *membership) loop() error {
	m := s.m
	tick := m.cfg.Clock.NewTimer(replanEvery)
	defer tick.Stop()
	s.reconcile()
	for {
		select {
		case <-s.lctx.Done():
			s.stopProbes()
			return s.leave()
		case wr, ok := <-s.wch:
			if !ok || wr.Err() != nil {
				if s.lctx.Err() != nil {
					s.stopProbes()
					return s.leave()
				}
				m.log.Warn("partition watch ended; listing again", "error", wr.Err())
				s.stopWatch()
				s.needResync = true
				break
			}
			s.apply(wr.Events)
		case d := <-s.done:
			s.ended(d)
		case <-tick.C():
			tick.Reset(replanEvery)
			if s.needResync {
				if err := s.resync(); err != nil {
					m.log.Warn("listing the partitions failed; retrying", "error", err)
				}
			}
		}
		s.reconcile()
		s.probePeers()
	}
}

// leave ends every Lead and waits for them. At shutdown it withdraws the member key first, so
// that the others plan without this replica while its Leads hand over.
func (s *membership) leave() error {
	m := s.m
	s.stopWatch()
	lost := closed(s.sess.Done())
	if !lost {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.lctx), opTimeout)
		if _, err := m.cfg.Etcd.Delete(ctx, m.members+m.cfg.ReplicaID); err != nil {
			m.log.Warn("withdrawing the member key failed; it vanishes with the lease", "error", err)
		}
		cancel()
	} else {
		m.log.Warn("etcd session lost; ending every partition lead", "leads", len(m.leads))
	}
	m.mu.Lock()
	for _, l := range m.leads {
		l.ending = true
		l.lost = l.lost || lost
		l.cancel()
	}
	n := len(m.leads)
	m.mu.Unlock()
	for range n {
		s.ended(<-s.done)
	}
	if lost {
		return errors.New("etcd session lost")
	}
	return nil
}

// closed reports whether ch is closed (a session's Done: the session is lost).
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// resync lists the watched range, replaces the view with it, and watches from there on.
func (s *membership) resync() error {
	m := s.m
	s.stopWatch()
	resp, err := m.cfg.Etcd.Get(s.lctx, m.members, clientv3.WithRange(m.rangeEnd))
	if err != nil {
		s.needResync = true
		return fmt.Errorf("list partitions: %w", err)
	}
	// The listing replaces the view, news older than it included.
	rev := resp.Header.Revision
	m.mu.Lock()
	clear(m.live)
	clear(m.leases)
	for p := range m.owners {
		m.owners[p] = slot{rev: rev}
	}
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		if id, ok := strings.CutPrefix(key, m.members); ok {
			m.live[id] = addrOf(id, kv.Value)
			m.leases[id] = kv.Lease
		} else if p, ok := m.partitionOf(key); ok {
			m.owners[p] = slot{leader: string(kv.Value), epoch: kv.CreateRevision, rev: rev}
		}
	}
	m.mu.Unlock()
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(s.lctx))
	s.wch, s.wcancel = m.cfg.Etcd.Watch(wctx, m.members, clientv3.WithRange(m.rangeEnd), clientv3.WithRev(rev+1)), wcancel
	s.needResync = false
	return nil
}

func (s *membership) stopWatch() {
	if s.wcancel != nil {
		s.wcancel()
	}
	s.wch, s.wcancel = nil, nil
}

// apply applies watched events to the view.
func (s *membership) apply(evs []*clientv3.Event) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ev := range evs {
		key := string(ev.Kv.Key)
		if id, ok := strings.CutPrefix(key, m.members); ok {
			if ev.Type == mvccpb.DELETE {
				delete(m.live, id)
				delete(m.leases, id)
			} else {
				m.live[id] = addrOf(id, ev.Kv.Value)
				m.leases[id] = ev.Kv.Lease
			}
			continue
		}
		p, ok := m.partitionOf(key)
		if !ok {
			continue
		}
		n := slotNews{p: p, kv: ev.Kv, rev: ev.Kv.ModRevision}
		if ev.Type == mvccpb.DELETE {
			n.kv = nil
		}
		m.setSlot(n)
	}
}

// partitionOf parses a partition key; false for keys of partitions beyond the count.
func (m *Manager) partitionOf(key string) (int, bool) {
	rest, ok := strings.CutPrefix(key, m.partitions)
	if !ok {
		return 0, false
	}
	p, err := strconv.Atoi(rest)
	if err != nil || p < 0 || p >= len(m.owners) || strconv.Itoa(p) != rest {
		return 0, false
	}
	return p, true
}

// setSlot records news of a partition key unless the view has newer. m.mu is held.
func (m *Manager) setSlot(n slotNews) {
	if n.rev <= m.owners[n.p].rev {
		return
	}
	if n.kv == nil {
		m.owners[n.p] = slot{rev: n.rev}
		return
	}
	m.owners[n.p] = slot{leader: string(n.kv.Value), epoch: n.kv.CreateRevision, rev: n.rev}
}

// ended forgets a Lead that has returned.
func (s *membership) ended(d leadDone) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.leads, d.l.p)
	m.handovers++
	if d.kv != nil {
		m.setSlot(*d.kv)
	}
	if d.early && !d.l.lost {
		m.cooldown[d.l.p] = m.cfg.Clock.Now().Add(earlyCooldown)
		m.log.Warn("partition lead returned on its own; giving the partition up", "partition", d.l.p, "epoch", d.l.epoch)
	}
}

// reconcile ends the Leads whose keys are gone, deletes stale keys of this replica's, and
// carries out the plan.
func (s *membership) reconcile() {
	m := s.m
	me := m.cfg.ReplicaID
	now := m.cfg.Clock.Now()
	type key struct {
		p     int
		epoch int64
	}
	var stale []key
	m.mu.Lock()
	for _, l := range m.leads {
		if o := m.owners[l.p]; !l.ending && (o.leader != me || o.epoch != l.epoch) {
			l.ending, l.lost = true, true
			l.cancel()
			m.log.Warn("partition lead lost: its key vanished or changed hands", "partition", l.p, "epoch", l.epoch, "leader", o.leader)
		}
	}
	owners := make([]string, len(m.owners))
	for p, o := range m.owners {
		owners[p] = o.leader
		if l := m.leads[p]; l != nil && l.ending {
			owners[p] = busy
		}
		if o.leader == me && m.leads[p] == nil {
			// A key of an earlier session whose lease is still alive: no Lead runs for it here.
			owners[p] = busy
			stale = append(stale, key{p, o.epoch})
		}
		if until, ok := m.cooldown[p]; ok {
			if now.Before(until) {
				if owners[p] == "" {
					owners[p] = busy
				}
			} else {
				delete(m.cooldown, p)
			}
		}
	}
	live := slices.Collect(maps.Keys(m.live))
	m.mu.Unlock()

	for _, k := range stale {
		if n := s.deleteKey(k.p, k.epoch); n != nil {
			m.mu.Lock()
			m.setSlot(*n)
			m.mu.Unlock()
		}
	}
	if s.needResync {
		return // the view may be stale: take nothing, give nothing up
	}
	// A lead younger than settleTTLs is not given up for balance (nor one this view has no
	// lead for, which plan never offers).
	young := func(p int) bool {
		l := m.leads[p]
		return l == nil || now.Sub(l.since) < settleTTLs*m.cfg.SessionTTL
	}
	m.mu.Lock()
	acquire, release := plan(me, live, owners, young)
	for _, p := range release {
		l := m.leads[p]
		l.ending = true
		l.cancel()
	}
	m.mu.Unlock()
	if len(release) > 0 {
		m.log.Info("handing partitions over", "partitions", release, "replicas", len(live))
	}
	if len(acquire) > 0 {
		s.acquire(acquire)
	}
}

// acquire tries to take the partitions, each in a txn of its own (in parallel: a failover takes
// many at once), and starts a Lead for every one it got.
func (s *membership) acquire(parts []int) {
	m := s.m
	type result struct {
		p     int
		epoch int64
		news  *slotNews
		err   error
	}
	res := make([]result, len(parts))
	var wg sync.WaitGroup
	for i, p := range parts {
		wg.Go(func() {
			key := m.partitions + strconv.Itoa(p)
			resp, err := m.cfg.Etcd.Txn(s.lctx).
				If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
				Then(clientv3.OpPut(key, m.cfg.ReplicaID, clientv3.WithLease(s.sess.Lease()))).
				Else(clientv3.OpGet(key)).Commit()
			if err != nil {
				res[i] = result{p: p, err: err}
				return
			}
			rev := resp.Header.Revision
			if resp.Succeeded {
				kv := &mvccpb.KeyValue{Key: []byte(key), Value: []byte(m.cfg.ReplicaID), CreateRevision: rev, ModRevision: rev}
				res[i] = result{p: p, epoch: rev, news: &slotNews{p: p, kv: kv, rev: rev}}
				return
			}
			var kv *mvccpb.KeyValue
			if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
				kv = kvs[0]
			}
			res[i] = result{p: p, news: &slotNews{p: p, kv: kv, rev: rev}}
		})
	}
	wg.Wait()
	var got []int
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range res {
		if r.err != nil {
			if s.lctx.Err() == nil {
				m.log.Warn("acquiring a partition failed", "partition", r.p, "error", r.err)
			}
			continue
		}
		m.setSlot(*r.news)
		if r.epoch == 0 {
			continue // someone else was faster
		}
		got = append(got, r.p)
		m.acquired++
		lctx, cancel := context.WithCancel(s.lctx)
		l := &lead{p: r.p, epoch: r.epoch, since: m.cfg.Clock.Now(), cancel: cancel}
		m.leads[r.p] = l
		go s.runLead(lctx, l)
	}
	if len(got) > 0 {
		m.log.Info("acquired partitions", "partitions", got)
	}
}

// runLead runs Config.Lead for l, then releases l's key unless the lead was lost, and reports.
func (s *membership) runLead(ctx context.Context, l *lead) {
	m := s.m
	m.cfg.Lead(ctx, l.p, l.epoch)
	early := ctx.Err() == nil
	l.cancel()
	m.mu.Lock()
	l.ending = true // the key's deletion below is not a loss
	lost := l.lost
	m.mu.Unlock()
	d := leadDone{l: l, early: early}
	if !lost && !closed(s.sess.Done()) {
		d.kv = s.deleteKey(l.p, l.epoch)
	}
	s.done <- d
}

// deleteKey deletes partition p's key if it is still the one created at epoch, and returns the
// key's state after (nil when the delete failed).
func (s *membership) deleteKey(p int, epoch int64) *slotNews {
	m := s.m
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.lctx), opTimeout)
	defer cancel()
	key := m.partitions + strconv.Itoa(p)
	resp, err := m.cfg.Etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", epoch)).
		Then(clientv3.OpDelete(key)).
		Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		m.log.Warn("releasing a partition key failed; it vanishes with the lease", "partition", p, "epoch", epoch, "error", err)
		return nil
	}
	n := &slotNews{p: p, rev: resp.Header.Revision}
	if !resp.Succeeded {
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			n.kv = kvs[0]
		}
	}
	return n
}
