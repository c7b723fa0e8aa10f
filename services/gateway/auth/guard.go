package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	authv1 "github.com/jobmesh/jobmesh/gen/jobmesh/auth/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
	"github.com/jobmesh/jobmesh/internal/grpcserver"
)

// Kind says which sort of credential a caller presented.
type Kind int

const (
	// KindUser is a person: a login session or an API token.
	KindUser Kind = iota + 1
	// KindInternal is a jobmesh service calling another with the internal token: allowed
	// everything.
	KindInternal
	// KindExecutor is an executor (agent or SDK) with its group's access token and app name:
	// allowed only to register itself and to deliver the results and log lines of the fires
	// dispatched to it.
	KindExecutor
)

// ExecutorAppHeader is the metadata an executor names its group's app with; its bearer token is
// then that group's access token.
const ExecutorAppHeader = "x-jobmesh-executor-app"

// Caller is who makes a call; the guard puts it in the call's context.
type Caller struct {
	// Kind is the sort of credential.
	Kind Kind
	// User is the person, for KindUser.
	User *authv1.User
	// GroupID and App are the executor group, for KindExecutor.
	GroupID int64
	App     string
}

// name is how logs and the audit trail call the caller.
func (c *Caller) name() string {
	switch c.Kind {
	case KindUser:
		return c.User.GetUsername()
	case KindExecutor:
		return "(executor " + c.App + ")"
	}
	return "(internal)"
}

// scoped reports whether the caller is limited to its executor groups.
func (c *Caller) scoped() bool {
	return c.Kind == KindUser && c.User.GetRole() != authv1.Role_ROLE_ADMIN
}

type callerKey struct{}

// CallerFrom returns the caller the guard found for the call.
func CallerFrom(ctx context.Context) (*Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(*Caller)
	return c, ok
}

// IsInternalCaller reports whether the guard found the call to come with the internal token: a
// jobmesh service, never a person (registry.Config.RevealTokens uses it).
func IsInternalCaller(ctx context.Context) bool {
	c, ok := CallerFrom(ctx)
	return ok && c.Kind == KindInternal
}

// ExecutorOf returns the executor group and app of a call the guard found to come from an
// executor (KindExecutor); ok is false for every other caller. Services that take deliveries
// from executors (registry.Config.Executor, logsvc.Config.Executor) scope them with it.
func ExecutorOf(ctx context.Context) (groupID int64, app string, ok bool) {
	c, found := CallerFrom(ctx)
	if !found || c.Kind != KindExecutor {
		return 0, "", false
	}
	return c.GroupID, c.App, true
}

// Authenticator turns a user's bearer token into the user: *Service in the process that owns the
// auth store, RemoteUsers elsewhere.
type Authenticator interface {
	AuthenticateToken(ctx context.Context, token string) (*authv1.User, error)
}

// GuardConfig is what a guard checks calls against.
type GuardConfig struct {
	// Users checks people's tokens. Nil accepts only the internal token and executors.
	Users Authenticator
	// InternalToken is the secret jobmesh services present to each other; at least 32
	// characters. Required.
	InternalToken string
	// Executors finds an executor group's id and access token by app name, to check executors'
	// credentials. Nil refuses every executor.
	Executors ExecutorCredentials
	// Groups maps jobs, runs and executors to executor groups for callers limited to groups.
	// Nil denies such callers every call that needs a lookup.
	Groups GroupResolver
	// Audit stores the audit trail. Nil writes it to Logger only.
	Audit AuditSink
	// Logger receives denials and audit write failures (never tokens); nil discards them.
	Logger *slog.Logger
	// Now is the time source of the executor credential cache (tests move it); nil means
	// time.Now.
	Now func() time.Time
}

// Guard enforces the access rules (policy.go) on every call of a gRPC server: a
// grpcserver.Authorizer.
type Guard struct {
	cfg         GuardConfig
	log         *slog.Logger
	internalSum [32]byte
	execs       execCache
}

// MinSecretLen is the shortest internal or agent token accepted.
const MinSecretLen = 32

// NewGuard checks cfg and returns a guard.
func NewGuard(cfg GuardConfig) (*Guard, error) {
	if len(cfg.InternalToken) < MinSecretLen {
		return nil, fmt.Errorf("auth: internal token: want at least %d characters", MinSecretLen)
	}
	g := &Guard{cfg: cfg, log: cfg.Logger, internalSum: sha256.Sum256([]byte(cfg.InternalToken))}
	g.execs.creds, g.execs.now = cfg.Executors, cfg.Now
	if g.execs.now == nil {
		g.execs.now = time.Now
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	return g, nil
}

// ServerOptions installs the guard on a server built by grpcserver.New.
func (g *Guard) ServerOptions() []grpc.ServerOption { return grpcserver.WithAuthorizer(g) }

// identify finds who presented tok. A call that names an executor app is an executor's or
// nobody's: its token is checked against that group's access token only.
func (g *Guard) identify(ctx context.Context, tok string) (*Caller, error) {
	sum := sha256.Sum256([]byte(tok))
	if app := executorApp(ctx); app != "" {
		return g.execs.identify(ctx, app, sum)
	}
	if subtle.ConstantTimeCompare(sum[:], g.internalSum[:]) == 1 {
		return &Caller{Kind: KindInternal}, nil
	}
	if g.cfg.Users == nil {
		return nil, apierr.Status(codes.Unauthenticated, apierr.ReasonTokenInvalid, "invalid token")
	}
	u, err := g.cfg.Users.AuthenticateToken(ctx, tok)
	if err != nil {
		return nil, err
	}
	return &Caller{Kind: KindUser, User: u}, nil
}

// Authorize implements grpcserver.Authorizer: it identifies the caller (once per call), checks
// the method's access level, and, for callers limited to executor groups, the groups the request
// touches.
func (g *Guard) Authorize(ctx context.Context, method string, req any) (context.Context, error) {
	r, known := rules[method]
	c, ok := CallerFrom(ctx)
	if !ok {
		if known && r.access == public {
			return ctx, nil
		}
		tok, err := bearer(ctx)
		if err != nil {
			return ctx, err
		}
		if c, err = g.identify(ctx, tok); err != nil {
			return ctx, err
		}
		ctx = context.WithValue(ctx, callerKey{}, c)
	}
	if !known {
		if c.Kind == KindInternal {
			return ctx, nil
		}
		return ctx, g.deny(ctx, c, method, "no access rule for this method")
	}
	if !r.allows(c) {
		return ctx, g.deny(ctx, c, method, "needs "+r.access.String())
	}
	if req != nil && r.grouped && c.scoped() {
		if err := g.checkGroups(ctx, c, req); err != nil {
			if status.Code(err) == codes.PermissionDenied {
				g.log.InfoContext(ctx, "call denied", "method", method, "username", c.name(), "reason", err.Error())
			}
			return ctx, err
		}
	}
	return ctx, nil
}

func (g *Guard) deny(ctx context.Context, c *Caller, method, why string) error {
	g.log.InfoContext(ctx, "call denied", "method", method, "username", c.name(), "reason", why)
	return apierr.Statusf(codes.PermissionDenied, apierr.ReasonRoleRequired, "%s: %s", method, why)
}

// allowed fails unless the caller may act on group id.
func allowed(c *Caller, id int64) error {
	if slices.Contains(c.User.GetGroupIds(), id) {
		return nil
	}
	return apierr.Statusf(codes.PermissionDenied, apierr.ReasonGroupNotAllowed, "executor group %d is not among your groups %v", id, c.User.GetGroupIds())
}

// scope fills an unset group filter for a caller limited to groups: with one group it becomes
// that group; with several the caller must choose.
func scope(c *Caller, p *int64, field string) error {
	if *p != 0 {
		return allowed(c, *p)
	}
	switch gs := c.User.GetGroupIds(); len(gs) {
	case 0:
		return apierr.Status(codes.PermissionDenied, apierr.ReasonGroupNotAllowed, "you may act on no executor group")
	case 1:
		*p = gs[0]
		return nil
	default:
		return apierr.ToStatus(apierr.Field(field, "required, one of your executor groups %v", gs))
	}
}

// scopeAll limits a filter of several groups (reports, the dashboard, running counts) for a
// caller limited to groups: every group named must be the caller's, and an empty filter (all
// groups) becomes the caller's groups.
func scopeAll(c *Caller, p *[]int64) error {
	if len(*p) == 0 {
		gs := c.User.GetGroupIds()
		if len(gs) == 0 {
			return apierr.Status(codes.PermissionDenied, apierr.ReasonGroupNotAllowed, "you may act on no executor group")
		}
		*p = slices.Clone(gs)
		return nil
	}
	for _, id := range *p {
		if err := allowed(c, id); err != nil {
			return err
		}
	}
	return nil
}

// Finish implements grpcserver.Authorizer: it trims listings to the caller's groups and writes
// the audit trail of successful changes.
func (g *Guard) Finish(ctx context.Context, method string, req, resp any, err error) (any, error) {
	r := rules[method]
	c, _ := CallerFrom(ctx)
	if err == nil && c != nil && c.scoped() {
		resp, err = g.trim(ctx, c, resp)
	}
	if err == nil && r.audit {
		g.audit(ctx, c, method, req, resp)
	}
	return resp, err
}

func (g *Guard) audit(ctx context.Context, c *Caller, method string, req, resp any) {
	who := ""
	switch {
	case c != nil && c.Kind != KindUser:
		return // services and agents change things on people's behalf or by schedule
	case c != nil:
		who = c.name()
	default:
		if l, ok := req.(*authv1.LoginRequest); ok {
			who = l.GetUsername()
		}
	}
	resource, detail := describe(req, resp)
	e := &authv1.AuditEvent{Username: who, Action: method, Resource: resource, Detail: detail}
	g.log.InfoContext(ctx, "audit", "username", who, "action", method, "resource", resource, "detail", detail)
	if g.cfg.Audit == nil {
		return
	}
	// The change is made; the client hears of it even if its record fails (and the log has it).
	if err := g.cfg.Audit.RecordAudit(context.WithoutCancel(ctx), e); err != nil {
		g.log.ErrorContext(ctx, "audit record lost", "action", method, "resource", resource, "error", err)
	}
}

// errNoResolver denies lookups a guard without a GroupResolver cannot make.
var errNoResolver = status.Error(codes.PermissionDenied, "executor group permissions cannot be checked here")

var _ grpcserver.Authorizer = (*Guard)(nil)
