package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
)

// ExecutorCredentials finds an executor group by app name: its id and access token (empty when
// the group has none). An unknown app is codes.NotFound. ClientResolver implements it over the
// registry.
type ExecutorCredentials interface {
	ExecutorGroup(ctx context.Context, app string) (groupID int64, token string, err error)
}

// ExecutorGroup implements ExecutorCredentials: the registry reveals tokens to the internal
// caller ClientResolver's connection presents.
func (r ClientResolver) ExecutorGroup(ctx context.Context, app string) (int64, string, error) {
	resp, err := r.Registry.ListExecutorGroups(ctx, &registryv1.ListExecutorGroupsRequest{AppName: app})
	if err != nil {
		return 0, "", lookupErr("executor", err)
	}
	for _, g := range resp.GetGroups() { // the filter matches substrings
		if g.GetAppName() == app {
			return g.GetId(), g.GetAccessToken(), nil
		}
	}
	return 0, "", status.Errorf(codes.NotFound, "no executor group %q", app)
}

// execCacheTTL is how long the guard trusts what it learnt of a group's credential: a changed or
// removed access token stops working for new calls within it, and a stranger retrying bad
// credentials costs the registry at most one lookup per app in it.
const execCacheTTL = 5 * time.Second

// execCache remembers executor groups' credentials (and unknown apps) for execCacheTTL.
type execCache struct {
	creds ExecutorCredentials

	mu      sync.Mutex
	entries map[string]execEntry
}

type execEntry struct {
	at      time.Time
	groupID int64
	sum     [32]byte // SHA-256 of the access token
	hasTok  bool
	err     error // NotFound for an unknown app
}

// maxExecEntries bounds the cache against strangers naming endless apps.
const maxExecEntries = 10000

// identify checks that sum is the SHA-256 of app's group's access token.
func (c *execCache) identify(ctx context.Context, app string, sum [32]byte) (*Caller, error) {
	if c.creds == nil {
		return nil, status.Error(codes.Unauthenticated, "executors are not accepted here")
	}
	e, err := c.lookup(ctx, app)
	if err != nil {
		return nil, err
	}
	if e.err != nil || !e.hasTok || subtle.ConstantTimeCompare(sum[:], e.sum[:]) != 1 {
		// One answer for an unknown app, a group without a token and a wrong token.
		return nil, status.Errorf(codes.Unauthenticated, "executor %q: not the access token of its executor group (a group must have one)", app)
	}
	return &Caller{Kind: KindExecutor, GroupID: e.groupID, App: app}, nil
}

func (c *execCache) lookup(ctx context.Context, app string) (execEntry, error) {
	now := time.Now()
	c.mu.Lock()
	e, ok := c.entries[app]
	c.mu.Unlock()
	if ok && now.Sub(e.at) < execCacheTTL {
		return e, nil
	}
	id, tok, err := c.creds.ExecutorGroup(ctx, app)
	e = execEntry{at: now, groupID: id, hasTok: tok != "", sum: sha256.Sum256([]byte(tok))}
	switch status.Code(err) {
	case codes.OK:
	case codes.NotFound, codes.InvalidArgument:
		e.err = err
	default:
		return execEntry{}, status.Errorf(codes.Unavailable, "checking the executor's credential: %v", status.Convert(err).Message())
	}
	c.mu.Lock()
	if c.entries == nil || len(c.entries) >= maxExecEntries {
		c.entries = make(map[string]execEntry)
	}
	c.entries[app] = e
	c.mu.Unlock()
	return e, nil
}

// executorApp is the app an executor's call names, if any.
func executorApp(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(ExecutorAppHeader); len(v) > 0 {
		return v[0]
	}
	return ""
}
