package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
	"github.com/jobmesh/jobmesh/internal/clock"
	"github.com/jobmesh/jobmesh/internal/hostport"
	"github.com/jobmesh/jobmesh/internal/seal"
)

// executorPool keeps one long-lived connection per executor address, and coalesces the Run
// calls to each executor (runbatch.go). Connections and lanes unused for idleConnAfter are
// closed (prune): executors come and go (a redeploy gives them new addresses), and the pool
// must not keep every address it ever called.
type executorPool struct {
	opts  []grpc.DialOption
	mu    sync.Mutex
	conns map[string]*poolConn
	lanes map[laneKey]*runLane
	// batched, when set, is told the number of fires of each Run call (metrics).
	batched func(fires int)
	// clk times a fire's start delay as its call leaves (the scheduler's clock).
	clk clock.Clock
	// inflight counts the fires handed to lanes and not answered yet (metrics).
	inflight atomic.Int64
	// health is what the executors' answers said of them (routing passes over the unreachable
	// and the full).
	health *executorHealth
	// xxl serves the executors whose address is an http(s) URL: XXL-JOB executors.
	xxl *xxlDriver
}

func newExecutorPool(opts []grpc.DialOption) *executorPool {
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	opts = append(opts[:len(opts):len(opts)], grpc.WithStatsHandler(otelgrpc.NewClientHandler())) // the Run client span, and W3C context in metadata
	return &executorPool{opts: opts, conns: map[string]*poolConn{}, lanes: map[laneKey]*runLane{}, clk: clock.Real(),
		health: newExecutorHealth(clock.Real())}
}

// poolConn is an executor connection and when a call last took it.
type poolConn struct {
	cc       *grpc.ClientConn
	lastUsed time.Time
}

// idleConnAfter is how long an executor connection may go unused before prune closes it: far
// longer than any call (dispatch deadlines are seconds), so a call never loses its connection.
const idleConnAfter = 30 * time.Minute

// client returns the client of an executor: an XXL-JOB executor (an http(s) URL) is driven over
// its HTTP protocol, any other over a pooled gRPC connection.
func (p *executorPool) client(addr string) (executorv1.ExecutorServiceClient, error) {
	if isXxlAddress(addr) {
		if p.xxl == nil {
			return nil, fmt.Errorf("executor %s: XXL-JOB executors are not served here", addr)
		}
		return &xxlExecutor{d: p.xxl, addr: addr}, nil
	}
	now := time.Now() // housekeeping, not scheduling: the wall clock
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[addr]; ok {
		c.lastUsed = now
		return executorv1.NewExecutorServiceClient(c.cc), nil
	}
	cc, err := grpc.NewClient(addr, p.opts...)
	if err != nil {
		return nil, fmt.Errorf("dial executor %s: %w", addr, err)
	}
	p.conns[addr] = &poolConn{cc: cc, lastUsed: now}
	return executorv1.NewExecutorServiceClient(cc), nil
}

// prune closes the connections last used before cutoff, except those of an executor whose Run
// lane has fires queued or a call in flight, and forgets the idle Run lanes of the addresses it
// closed; it returns how many connections it closed.
func (p *executorPool) prune(cutoff time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	busy := map[string]bool{}
	for k, l := range p.lanes {
		l.mu.Lock()
		if l.sending || len(l.queue) > 0 {
			busy[k.addr] = true
		}
		l.mu.Unlock()
	}
	n := 0
	for addr, c := range p.conns {
		if busy[addr] || !c.lastUsed.Before(cutoff) {
			continue
		}
		c.cc.Close()
		delete(p.conns, addr)
		n++
	}
	for k := range p.lanes {
		if _, open := p.conns[k.addr]; !open && !busy[k.addr] {
			delete(p.lanes, k)
		}
	}
	return n
}

// pruneLoop closes idle executor connections every few minutes until ctx ends.
func (p *executorPool) pruneLoop(ctx context.Context, log *slog.Logger) {
	t := time.NewTicker(idleConnAfter / 6)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			p.health.prune(now.Add(-idleConnAfter))
			if n := p.prune(now.Add(-idleConnAfter)); n > 0 {
				log.Info("closed idle executor connections", "closed", n)
			}
		}
	}
}

// Beat implements route.Prober.
func (p *executorPool) Beat(ctx context.Context, addr string) error {
	cli, err := p.client(addr)
	if err != nil {
		return err
	}
	_, err = cli.Beat(ctx, &executorv1.BeatRequest{})
	return err
}

// IdleBeat implements route.Prober.
func (p *executorPool) IdleBeat(ctx context.Context, addr string, jobID int64) (bool, string, error) {
	cli, err := p.client(addr)
	if err != nil {
		return false, "", err
	}
	resp, err := cli.IdleBeat(ctx, &executorv1.IdleBeatRequest{JobId: jobID})
	if err != nil {
		return false, "", err
	}
	return resp.GetIdle(), resp.GetReason(), nil
}

func (p *executorPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for a, c := range p.conns {
		c.cc.Close()
		delete(p.conns, a)
	}
}

// groupRefresh is how old a cached executor group may get before it is read again.
const groupRefresh = 5 * time.Second

// routeView is the scheduler's copy of the executor view: online executors per app from the
// registry's watch stream, and groups (app name, manual addresses) cached briefly, so a routing
// decision needs no RPC.
type routeView struct {
	reg registryv1.RegistryServiceClient
	log *slog.Logger
	// cred fingerprints access tokens as the registry does (Executor.credential); nil routes
	// over every executor of an app, whatever token it registered with.
	cred *seal.Key

	mu    sync.RWMutex
	byApp map[string]map[string]string // app → instance → address
	creds map[string]map[string]string // app → instance → credential
	// sorted: app → credential → sorted distinct addresses of the executors that registered
	// with that token: a group routes over those of its token now.
	sorted map[string]map[string][]string
	// holds: instances registered with holds_fires; allHold: apps whose every instance did.
	holds   map[string]map[string]bool
	allHold map[string]bool
	groups  map[int64]groupEntry
	// synced is closed once the first snapshot of the registry's view has arrived.
	synced     chan struct{}
	syncedOnce sync.Once
}

type groupEntry struct {
	g       *registryv1.ExecutorGroup
	cred    string // the fingerprint of g's access token
	fetched time.Time
}

func newRouteView(reg registryv1.RegistryServiceClient, log *slog.Logger, cred *seal.Key) *routeView {
	return &routeView{reg: reg, log: log, cred: cred, byApp: map[string]map[string]string{}, creds: map[string]map[string]string{},
		sorted: map[string]map[string][]string{}, groups: map[int64]groupEntry{},
		holds: map[string]map[string]bool{}, allHold: map[string]bool{},
		synced: make(chan struct{})}
}

// run follows WatchExecutors until ctx ends, reconnecting after errors.
func (v *routeView) run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := v.follow(ctx)
		if ctx.Err() != nil {
			return
		}
		v.log.Warn("executor watch broken; reconnecting", "error", err)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func (v *routeView) follow(ctx context.Context) error {
	st, err := v.reg.WatchExecutors(ctx, &registryv1.WatchExecutorsRequest{})
	if err != nil {
		return err
	}
	for {
		ev, err := st.Recv()
		if err != nil {
			return err
		}
		v.apply(ev)
	}
}

func (v *routeView) apply(ev *registryv1.WatchExecutorsResponse) {
	v.mu.Lock()
	defer v.mu.Unlock()
	touched := map[string]bool{}
	if ev.GetType() == registryv1.ExecutorEventType_EXECUTOR_EVENT_TYPE_SNAPSHOT {
		for app := range v.byApp {
			touched[app] = true
		}
		v.byApp = map[string]map[string]string{}
		v.creds = map[string]map[string]string{}
		v.holds = map[string]map[string]bool{}
	}
	for _, e := range ev.GetExecutors() {
		touched[e.AppName] = true
		m, c, h := v.byApp[e.AppName], v.creds[e.AppName], v.holds[e.AppName]
		if m == nil {
			m, c, h = map[string]string{}, map[string]string{}, map[string]bool{}
			v.byApp[e.AppName], v.creds[e.AppName], v.holds[e.AppName] = m, c, h
		}
		if ev.GetType() == registryv1.ExecutorEventType_EXECUTOR_EVENT_TYPE_DELETE {
			delete(m, e.InstanceId)
			delete(c, e.InstanceId)
			delete(h, e.InstanceId)
		} else {
			m[e.InstanceId] = e.Address
			c[e.InstanceId] = v.credOf(e)
			h[e.InstanceId] = e.GetHoldsFires()
		}
	}
	for app := range touched {
		byCred := map[string][]string{}
		all := len(v.byApp[app]) > 0
		for inst, a := range v.byApp[app] {
			cred := v.creds[app][inst]
			byCred[cred] = append(byCred[cred], a)
			all = all && v.holds[app][inst]
		}
		for cred, addrs := range byCred {
			slices.Sort(addrs)
			byCred[cred] = slices.Compact(addrs)
		}
		v.allHold[app] = all
		v.sorted[app] = byCred
	}
	if ev.GetType() == registryv1.ExecutorEventType_EXECUTOR_EVENT_TYPE_SNAPSHOT {
		v.syncedOnce.Do(func() { close(v.synced) })
	}
}

// waitSynced waits up to d for the first snapshot of the executor view (a replica elected right
// after it started may not have it yet) and reports whether it has come.
func (v *routeView) waitSynced(ctx context.Context, d time.Duration) bool {
	select {
	case <-v.synced:
		return true
	default:
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-v.synced:
		return true
	case <-ctx.Done():
	case <-t.C:
	}
	return false
}

// addresses returns the sorted addresses a group routes over now and the access token its
// executors expect (empty for none).
func (v *routeView) addresses(ctx context.Context, groupID int64) ([]string, string, error) {
	g, err := v.group(ctx, groupID)
	if err != nil {
		return nil, "", err
	}
	if g.AddressType == registryv1.AddressType_ADDRESS_TYPE_MANUAL {
		return g.Addresses, g.AccessToken, nil
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.sorted[g.AppName][v.groups[groupID].cred], g.AccessToken, nil
}

// credOf is the credential e is routed by: "" for every executor without a key (cred).
func (v *routeView) credOf(e *registryv1.Executor) string {
	if v.cred == nil {
		return ""
	}
	return e.GetCredential()
}

// credOfToken is the credential of the executors that registered with a group's token.
func (v *routeView) credOfToken(token string) string {
	if v.cred == nil || token == "" {
		return ""
	}
	return v.cred.Sum(token)
}

// holdsFires reports whether a group's fires may be sent ahead of their time: it routes over the
// registered executors of its app (not manual addresses), and every one of them registered with
// holds_fires. It answers from the cache only (false for a group not read yet), since the ring's
// hand-over asks it for every fire; the view is a moment old, so an executor without it that
// registers just then may get a fire early.
func (v *routeView) holdsFires(groupID int64) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	e, ok := v.groups[groupID]
	if !ok || e.g.GetAddressType() == registryv1.AddressType_ADDRESS_TYPE_MANUAL {
		return false
	}
	return v.allHold[e.g.GetAppName()]
}

// tokenFor returns the access token of a group to present to addr: empty when the group has
// none or cannot be read, or when addr is not one of the group's executors now (an address it
// routes over or one of its manual addresses, as checkTriggerAddresses asks of a trigger's
// addresses). A group's token goes only to its own executors.
func (v *routeView) tokenFor(ctx context.Context, groupID int64, addr string) string {
	g, err := v.group(ctx, groupID)
	if err != nil {
		return ""
	}
	addrs, token, err := v.addresses(ctx, groupID)
	if err != nil || !slices.Contains(addrs, addr) && !slices.Contains(g.GetManualAddresses(), addr) {
		return ""
	}
	return token
}

// withAccessToken presents a group's access token on the executor calls made with ctx (Run,
// Kill, Beat, IdleBeat), as the metadata agents check: "authorization: Bearer <token>"
// (sdk.Config.AccessToken). An empty token presents nothing.
func withAccessToken(ctx context.Context, token string) context.Context {
	if token == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// killContext presents, on a Kill of a run of job jobID on addr, the access token of the job's
// group (see tokenFor); the run of a job deleted meanwhile is killed without one.
func (s *Service) killContext(ctx context.Context, jobID int64, addr string) context.Context {
	j, err := s.jobs.get(ctx, jobID)
	if err != nil {
		return ctx
	}
	return withAccessToken(ctx, s.groups.tokenFor(ctx, j.GroupID, addr))
}

// presentsToken reports whether calls made with ctx present an access token.
func presentsToken(ctx context.Context) bool {
	md, _ := metadata.FromOutgoingContext(ctx)
	return len(md.Get("authorization")) > 0
}

// group returns a group from the cache, reading it again when older than groupRefresh, so a
// changed group (its addresses, its rotated access token) takes effect within groupRefresh.
// The scheduler calls the registry as a service, so the group's access token comes in clear.
func (v *routeView) group(ctx context.Context, id int64) (*registryv1.ExecutorGroup, error) {
	v.mu.RLock()
	e, ok := v.groups[id]
	v.mu.RUnlock()
	if ok && time.Since(e.fetched) < groupRefresh {
		return e.g, nil
	}
	resp, err := v.reg.GetExecutorGroup(ctx, &registryv1.GetExecutorGroupRequest{Id: id})
	if status.Code(err) == codes.NotFound {
		return nil, fmt.Errorf("executor group %d: %w", id, apierr.ErrExecutorGroupNotFound)
	}
	if err != nil {
		if ok { // the registry is briefly away: route on what we knew
			return e.g, nil
		}
		return nil, fmt.Errorf("executor group %d: %w", id, err)
	}
	g := resp.GetGroup()
	g.Executors = nil // the watch is the authority on who is online
	cred := v.credOfToken(g.GetAccessToken())
	v.mu.Lock()
	v.groups[id] = groupEntry{g: g, cred: cred, fetched: time.Now()}
	v.mu.Unlock()
	return g, nil
}

// CheckGroup reports whether a group exists (apierr.ErrNotFound when not).
func (v *routeView) CheckGroup(ctx context.Context, id int64) error {
	_, err := v.group(ctx, id)
	return err
}

// validAddress reports whether a is an executor address a caller may name: an agent's host:port
// or an XXL-JOB executor's URL.
func validAddress(a string) bool { return hostport.Executor(a) }
