package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
)

// ExecutorGroupCredential is what the guard checks an executor's credential against: a group's
// app name, id and access token (empty when the group has none).
type ExecutorGroupCredential struct {
	App     string
	GroupID int64
	Token   string
}

// ExecutorCredentials finds executor groups by app name. App names are unique exactly but the
// guard asks once for every spelling of a name: ExecutorGroups returns every group whose app
// name equals app ignoring ASCII case (none for an unknown app), and the guard picks the exact
// one. ClientResolver implements it over the registry.
type ExecutorCredentials interface {
	ExecutorGroups(ctx context.Context, app string) ([]ExecutorGroupCredential, error)
}

// ExecutorGroups implements ExecutorCredentials: the registry reveals tokens to the internal
// caller ClientResolver's connection presents. Its app filter matches substrings ignoring case.
func (r ClientResolver) ExecutorGroups(ctx context.Context, app string) ([]ExecutorGroupCredential, error) {
	resp, err := r.Registry.ListExecutorGroups(ctx, &registryv1.ListExecutorGroupsRequest{AppName: app, WholeAppName: true, WithoutExecutors: true})
	if err != nil {
		return nil, lookupErr("executor", err)
	}
	var out []ExecutorGroupCredential
	for _, g := range resp.GetGroups() {
		if strings.EqualFold(g.GetAppName(), app) {
			out = append(out, ExecutorGroupCredential{App: g.GetAppName(), GroupID: g.GetId(), Token: g.GetAccessToken()})
		}
	}
	return out, nil
}

const (
	// execCacheTTL is how long the guard trusts what it learnt of an app's groups: a changed or
	// removed access token stops working for new calls within it, and a stranger costs the
	// registry at most one lookup per app name (ignoring case) in it.
	execCacheTTL = 5 * time.Second
	// execErrTTL is how long a failed lookup (registry unavailable) is remembered, so executors
	// retrying while the registry is down do not each ask it again.
	execErrTTL = time.Second
	// execLookupTimeout bounds a lookup, which runs on its own: a caller that gives up does not
	// end it for the others waiting on it.
	execLookupTimeout = 10 * time.Second
	// maxExecMisses bounds the remembered unknown app names and failures. Names of groups that
	// exist are always remembered: there are only as many as groups.
	maxExecMisses = 10000
)

// execCache remembers executor groups' credentials by lower-cased app name: for execCacheTTL
// what the registry answered, for execErrTTL that it failed. Concurrent lookups of one name
// share one registry call.
type execCache struct {
	creds ExecutorCredentials
	now   func() time.Time

	mu       sync.Mutex
	known    map[string]*execEntry // names with at least one group
	misses   map[string]*execEntry // unknown names and failed lookups, at most maxExecMisses
	order    []execAge             // misses by age, oldest first (with stale items)
	inflight map[string]*execCall
}

// execEntry is one lookup's answer.
type execEntry struct {
	at     time.Time
	groups []execGroup
	err    error // Unavailable when the lookup failed
}

type execGroup struct {
	app     string
	groupID int64
	sum     [32]byte // SHA-256 of the access token
	hasTok  bool
}

type execAge struct {
	key string
	at  time.Time
}

// execCall is a lookup in flight: done closes when e is set.
type execCall struct {
	done chan struct{}
	e    *execEntry
}

func (e *execEntry) fresh(now time.Time) bool {
	ttl := execCacheTTL
	if e.err != nil {
		ttl = execErrTTL
	}
	return now.Sub(e.at) < ttl
}

// validAppName is the registry's rule for app names: 1–64 of [A-Za-z0-9_.-].
func validAppName(app string) bool {
	if len(app) == 0 || len(app) > 64 {
		return false
	}
	for i := 0; i < len(app); i++ {
		c := app[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// identify checks that sum is the SHA-256 of app's group's access token.
func (c *execCache) identify(ctx context.Context, app string, sum [32]byte) (*Caller, error) {
	if c.creds == nil {
		return nil, apierr.Status(codes.Unauthenticated, apierr.ReasonExecutorTokenInvalid, "executors are not accepted here")
	}
	if !validAppName(app) {
		// No group has such a name; asking the registry would only cost it.
		return nil, apierr.Status(codes.Unauthenticated, apierr.ReasonExecutorTokenInvalid, ExecutorAppHeader+": want 1-64 of [A-Za-z0-9_.-]")
	}
	e, err := c.lookup(ctx, strings.ToLower(app))
	if err != nil {
		return nil, err
	}
	if e.err != nil {
		return nil, e.err
	}
	for _, g := range e.groups {
		if g.app == app && g.hasTok && subtle.ConstantTimeCompare(sum[:], g.sum[:]) == 1 {
			return &Caller{Kind: KindExecutor, GroupID: g.groupID, App: app}, nil
		}
	}
	// One answer for an unknown app, a group without a token and a wrong token.
	return nil, apierr.Statusf(codes.Unauthenticated, apierr.ReasonExecutorTokenInvalid, "executor %q: not the access token of its executor group (a group must have one)", app)
}

// lookup returns what is known of the groups named key (a lower-cased app name), asking the
// registry when nothing fresh is known, or waiting for a lookup of key already in flight.
func (c *execCache) lookup(ctx context.Context, key string) (*execEntry, error) {
	c.mu.Lock()
	if e := c.cached(key); e != nil && e.fresh(c.now()) {
		c.mu.Unlock()
		return e, nil
	}
	call := c.inflight[key]
	if call == nil {
		if c.inflight == nil {
			c.inflight = make(map[string]*execCall)
		}
		call = &execCall{done: make(chan struct{})}
		c.inflight[key] = call
		// The lookup outlives a caller that gives up, so one caller's cancel cannot fail (and
		// cache a failure for) the others.
		go c.fetch(context.WithoutCancel(ctx), key, call)
	}
	c.mu.Unlock()
	select {
	case <-call.done:
		return call.e, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// cached is the entry for key, fresh or not. c.mu is held.
func (c *execCache) cached(key string) *execEntry {
	if e := c.known[key]; e != nil {
		return e
	}
	return c.misses[key]
}

// fetch asks the registry for the groups named key and publishes the answer on call.
func (c *execCache) fetch(ctx context.Context, key string, call *execCall) {
	ctx, cancel := context.WithTimeout(ctx, execLookupTimeout)
	defer cancel()
	groups, err := c.creds.ExecutorGroups(ctx, key)
	e := &execEntry{at: c.now()}
	switch status.Code(err) {
	case codes.OK:
		for _, g := range groups {
			e.groups = append(e.groups, execGroup{app: g.App, groupID: g.GroupID, hasTok: g.Token != "", sum: sha256.Sum256([]byte(g.Token))})
		}
	case codes.NotFound, codes.InvalidArgument: // an unknown app
	default:
		e.err = status.Errorf(codes.Unavailable, "checking the executor's credential: %v", status.Convert(err).Message())
	}
	c.mu.Lock()
	delete(c.inflight, key)
	c.store(key, e)
	c.mu.Unlock()
	call.e = e
	close(call.done)
}

// store remembers e for key. Misses are kept to maxExecMisses: expired ones make room, oldest
// first, and when none has expired the new one is not kept (a stranger naming endless apps
// cannot evict what is fresh). c.mu is held.
func (c *execCache) store(key string, e *execEntry) {
	if len(e.groups) > 0 {
		if c.known == nil {
			c.known = make(map[string]*execEntry)
		}
		delete(c.misses, key)
		c.known[key] = e
		return
	}
	delete(c.known, key)
	if c.misses == nil {
		c.misses = make(map[string]*execEntry)
	}
	// Forget expired misses from the oldest; order also holds items of keys stored again
	// since, which are dropped as they come up.
	for len(c.order) > 0 {
		old := c.order[0]
		m := c.misses[old.key]
		if m != nil && m.at.Equal(old.at) {
			if m.fresh(e.at) {
				break
			}
			delete(c.misses, old.key)
		}
		c.order = c.order[1:]
	}
	if _, ok := c.misses[key]; !ok && len(c.misses) >= maxExecMisses {
		return
	}
	c.misses[key] = e
	c.order = append(c.order, execAge{key, e.at})
}

// executorApp is the app an executor's call names, if any.
func executorApp(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(ExecutorAppHeader); len(v) > 0 {
		return v[0]
	}
	return ""
}

// ExecutorTokens checks the access tokens of executors that do not call over gRPC (XXL-JOB
// executors at the gateway's XXL-JOB admin API) against their groups' tokens, with the guard's
// cache: a changed token counts within execCacheTTL, and a stranger costs the registry one
// lookup per app name in it.
type ExecutorTokens struct {
	c execCache
}

// NewExecutorTokens returns a checker over creds (ClientResolver over a connection with the
// internal token); now is its clock, nil for time.Now.
func NewExecutorTokens(creds ExecutorCredentials, now func() time.Time) *ExecutorTokens {
	if now == nil {
		now = time.Now
	}
	return &ExecutorTokens{c: execCache{creds: creds, now: now}}
}

// Check checks the token an executor of app presented: it must be app's group's access token,
// or, for a group without one, fallback (any token when fallback is empty too). grouped reports
// whether the group has a token of its own (the executor is then credited with it). Errors:
// NotFound naming app when no group has that app name, Unauthenticated for a wrong token,
// Unavailable when the registry could not be asked.
func (t *ExecutorTokens) Check(ctx context.Context, app, token, fallback string) (grouped bool, err error) {
	notFound := apierr.Statusf(codes.NotFound, apierr.ReasonExecutorGroupNotFound, "executor group with app name %q not found", apierr.Clip(app))
	if !validAppName(app) {
		return false, notFound
	}
	e, err := t.c.lookup(ctx, strings.ToLower(app))
	if err != nil {
		return false, err
	}
	if e.err != nil {
		return false, e.err
	}
	for _, g := range e.groups {
		if g.app != app {
			continue
		}
		sum := sha256.Sum256([]byte(token))
		switch {
		case g.hasTok && subtle.ConstantTimeCompare(sum[:], g.sum[:]) == 1:
			return true, nil
		case !g.hasTok && (fallback == "" || subtle.ConstantTimeCompare([]byte(token), []byte(fallback)) == 1):
			return false, nil
		}
		return false, apierr.Statusf(codes.Unauthenticated, apierr.ReasonExecutorTokenInvalid, "executor %q: not the access token of its executor group", app)
	}
	return false, notFound
}
