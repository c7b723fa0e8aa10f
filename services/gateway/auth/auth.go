// Package auth is jobmesh's account service and access guard. The service (AuthService) keeps
// users with roles and executor-group permissions, password login that issues expiring session
// tokens, API tokens for automation and the audit trail; passwords are hashed with argon2id and
// tokens are random and stored only as hashes. The first admin is created at first start with a
// random password that is returned once to be printed (or one taken from the environment), never
// a built-in default like XXL-JOB's admin/123456. The Guard enforces the access rules of
// policy.go on every jobmesh gRPC server (docs/auth.md).
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/argon2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	authv1 "github.com/jobmesh/jobmesh/gen/jobmesh/auth/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
	"github.com/jobmesh/jobmesh/internal/db"
)

//go:embed migrations
var migrations embed.FS

// MigrationsFS returns the auth schema's migrations, a folder per dialect.
func MigrationsFS() fs.FS {
	sub, _ := fs.Sub(migrations, "migrations")
	return sub
}

// Config tunes the service.
type Config struct {
	// SessionTTL is how long a login lasts; default 12 h.
	SessionTTL time.Duration
	// Throttle limits failed logins per user name and client address; zero values take its
	// defaults.
	Throttle ThrottleConfig
	// Now is the time source (tests move it); nil means time.Now.
	Now func() time.Time
	// HashMemoryKiB is argon2id's memory for new password hashes; default 64 MiB (RFC 9106).
	// Tests lower it to save time; stored hashes carry their own parameters.
	HashMemoryKiB uint32
	// Logger receives the service's logs (never passwords or tokens); nil discards them.
	Logger *slog.Logger
	// Groups lists the executor groups, so CreateUser and UpdateUser refuse group ids that do
	// not exist (ClientResolver asks the registry). Nil leaves them unchecked; every jobmesh
	// process sets it.
	Groups GroupLister
	// MaxConcurrentHashes bounds the argon2id computations running at once (each takes
	// HashMemoryKiB): a login, password change or user write beyond it fails at once with
	// ResourceExhausted instead of waiting. Default 2.
	MaxConcurrentHashes int
	// InternalToken, when set, lets the gateway report the address of its HTTP client
	// (ClientAddrKey with GatewayTokenKey equal to it), which the login throttle then counts.
	// Without it, or without the proof, the throttle counts the gRPC peer's address.
	InternalToken string
	// TrustedProxies are the peers whose x-forwarded-for is believed (proxies in front of the
	// auth gRPC port). Empty: x-forwarded-for is ignored.
	TrustedProxies []netip.Prefix
}

// Service serves AuthService: login and sessions, users, API tokens and the audit trail. It is
// also the Authenticator and AuditSink the guard of every in-process service uses.
type Service struct {
	authv1.UnimplementedAuthServiceServer
	cfg      Config
	log      *slog.Logger
	store    *db.DB
	now      func() time.Time
	throttle *throttle
	hashes   chan struct{} // one token per argon2id computation running
}

// New returns the service over its store (schema "auth").
func New(cfg Config, store *db.DB) (*Service, error) {
	if store == nil {
		return nil, errors.New("auth: store is required")
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = 12 * time.Hour
	}
	if cfg.HashMemoryKiB == 0 {
		cfg.HashMemoryKiB = argonMemory
	}
	if cfg.HashMemoryKiB < 8*argonThreads {
		return nil, fmt.Errorf("auth: hash memory %d KiB: at least %d", cfg.HashMemoryKiB, 8*argonThreads)
	}
	if cfg.SessionTTL < time.Minute {
		return nil, fmt.Errorf("auth: session ttl %v: at least 1m", cfg.SessionTTL)
	}
	if cfg.MaxConcurrentHashes == 0 {
		cfg.MaxConcurrentHashes = 2
	}
	if cfg.MaxConcurrentHashes < 1 {
		return nil, fmt.Errorf("auth: max concurrent hashes %d: at least 1", cfg.MaxConcurrentHashes)
	}
	th, err := newThrottle(cfg.Throttle)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &Service{cfg: cfg, log: log, store: store, now: now, throttle: th, hashes: make(chan struct{}, cfg.MaxConcurrentHashes)}, nil
}

// MaxMessageBytes bounds the requests the auth service's gRPC server reads (ServerOptions): its
// messages are user names, passwords, tokens and audit events, far below it.
const MaxMessageBytes = 1 << 20

// ServerOptions are the options of the gRPC server that serves the service, besides the guard's.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.MaxRecvMsgSize(MaxMessageBytes)}
}

// Register adds AuthService to g.
func (s *Service) Register(g *grpc.Server) { authv1.RegisterAuthServiceServer(g, s) }

// Bootstrap creates the first admin when there are no users. It uses password when given (from
// the environment), else a random one, and returns the password it set so the caller can print
// it once; it returns "" when users already exist.
func (s *Service) Bootstrap(ctx context.Context, username, password string) (string, error) {
	var n int
	if err := s.store.QueryRowContext(ctx, `SELECT COUNT(*) FROM users`).Scan(&n); err != nil {
		return "", fmt.Errorf("auth: count users: %w", err)
	}
	if n > 0 {
		return "", nil
	}
	if password == "" {
		password = randomToken(12)
	}
	if err := checkPassword("password", username, password); err != nil {
		return "", err
	}
	_, err := s.store.ExecContext(ctx, s.store.Q(`INSERT INTO users (username, password_hash, role, create_ms) VALUES ($1, $2, $3, $4)`),
		username, hashPassword(password, s.cfg.HashMemoryKiB), int32(authv1.Role_ROLE_ADMIN), s.now().UnixMilli())
	if err != nil && !db.IsUniqueViolation(err) {
		return "", fmt.Errorf("auth: create first admin: %w", err)
	}
	s.log.Info("created the first admin", "username", username)
	return password, nil
}

// Login implements AuthService. Failed attempts are counted per user name and client address,
// per address and per user name (ThrottleConfig); a locked-out attempt fails with
// ResourceExhausted without checking the password, and so does one that finds
// MaxConcurrentHashes password checks running.
func (s *Service) Login(ctx context.Context, req *authv1.LoginRequest) (*authv1.LoginResponse, error) {
	if req.GetUsername() == "" {
		return nil, apierr.Field("username", "required")
	}
	if req.GetPassword() == "" {
		return nil, apierr.Field("password", "required")
	}
	if len(req.GetUsername()) > maxUsernameBytes {
		return nil, apierr.Status(codes.Unauthenticated, apierr.ReasonLoginFailed, "wrong user name or password")
	}
	client := s.clientAddr(ctx)
	now := s.now()
	release, err := s.acquireHash()
	if err != nil {
		return nil, err
	}
	defer release()
	r, err := s.reserveGuess(ctx, "login", req.GetUsername(), client, now)
	if err != nil {
		return nil, err
	}
	u, hash, err := s.userByName(ctx, req.GetUsername())
	if errors.Is(err, apierr.ErrNotFound) {
		verifyPassword(req.GetPassword(), dummyHash()) // same cost whether or not the user exists
		hash = ""
	} else if err != nil {
		return nil, err
	}
	if hash == "" || !verifyPassword(req.GetPassword(), hash) {
		return nil, apierr.Status(codes.Unauthenticated, apierr.ReasonLoginFailed, "wrong user name or password")
	}
	r.succeed()
	token := sessionPrefix + randomToken(32)
	exp := now.Add(s.cfg.SessionTTL)
	if _, err := s.store.ExecContext(ctx, s.store.Q(`INSERT INTO sessions (token_hash, user_id, expire_ms) VALUES ($1, $2, $3)`),
		tokenHash(token), u.Id, exp.UnixMilli()); err != nil {
		return nil, fmt.Errorf("auth: create session: %w", err)
	}
	// Expired sessions of this user go now, so the table does not grow without bound.
	if _, err := s.store.ExecContext(ctx, s.store.Q(`DELETE FROM sessions WHERE user_id = $1 AND expire_ms <= $2`), u.Id, now.UnixMilli()); err != nil {
		s.log.WarnContext(ctx, "pruning expired sessions", "error", err)
	}
	s.log.InfoContext(ctx, "login", "username", u.Username, "client", client)
	return &authv1.LoginResponse{Token: token, ExpireTime: timestamppb.New(exp), User: u}, nil
}

// Logout implements AuthService.
func (s *Service) Logout(ctx context.Context, _ *authv1.LogoutRequest) (*authv1.LogoutResponse, error) {
	tok, err := bearer(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := s.store.ExecContext(ctx, s.store.Q(`DELETE FROM sessions WHERE token_hash = $1`), tokenHash(tok)); err != nil {
		return nil, fmt.Errorf("auth: logout: %w", err)
	}
	return &authv1.LogoutResponse{}, nil
}

// GetCurrentUser implements AuthService.
func (s *Service) GetCurrentUser(ctx context.Context, _ *authv1.GetCurrentUserRequest) (*authv1.GetCurrentUserResponse, error) {
	u, err := s.Authenticate(ctx)
	if err != nil {
		return nil, err
	}
	return &authv1.GetCurrentUserResponse{User: u}, nil
}

// ChangePassword implements AuthService. The caller's other sessions end.
func (s *Service) ChangePassword(ctx context.Context, req *authv1.ChangePasswordRequest) (*authv1.ChangePasswordResponse, error) {
	u, err := s.Authenticate(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkPassword("new_password", u.Username, req.GetNewPassword()); err != nil {
		return nil, err
	}
	release, err := s.acquireHash()
	if err != nil {
		return nil, err
	}
	defer release()
	r, err := s.reserveGuess(ctx, "password change", u.Username, s.clientAddr(ctx), s.now())
	if err != nil {
		return nil, err
	}
	_, hash, err := s.userByName(ctx, u.Username)
	if err != nil {
		return nil, err
	}
	if !verifyPassword(req.GetOldPassword(), hash) {
		return nil, apierr.Field("old_password", "does not match the current password")
	}
	r.succeed()
	if _, err := s.store.ExecContext(ctx, s.store.Q(`UPDATE users SET password_hash = $2 WHERE id = $1`), u.Id, hashPassword(req.GetNewPassword(), s.cfg.HashMemoryKiB)); err != nil {
		return nil, fmt.Errorf("auth: change password: %w", err)
	}
	tok, _ := bearer(ctx)
	if _, err := s.store.ExecContext(ctx, s.store.Q(`DELETE FROM sessions WHERE user_id = $1 AND token_hash <> $2`), u.Id, tokenHash(tok)); err != nil {
		return nil, fmt.Errorf("auth: end other sessions: %w", err)
	}
	return &authv1.ChangePasswordResponse{}, nil
}

// Authenticate returns the user of the call: the one the guard put in the context, else the one
// of the call's bearer token; Unauthenticated when there is none.
func (s *Service) Authenticate(ctx context.Context) (*authv1.User, error) {
	if c, ok := CallerFrom(ctx); ok && c.Kind == KindUser {
		return c.User, nil
	}
	tok, err := bearer(ctx)
	if err != nil {
		return nil, err
	}
	return s.AuthenticateToken(ctx, tok)
}

// AuthenticateToken returns the user a session or API token belongs to, or Unauthenticated when
// the token is unknown, expired or revoked.
func (s *Service) AuthenticateToken(ctx context.Context, tok string) (*authv1.User, error) {
	var uid, exp int64
	now := s.now().UnixMilli()
	h := tokenHash(tok)
	if strings.HasPrefix(tok, apiTokenPrefix) {
		var id int64
		err := s.store.QueryRowContext(ctx, s.store.Q(`SELECT id, user_id, expire_ms FROM api_tokens WHERE token_hash = $1`), h).Scan(&id, &uid, &exp)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && exp != 0 && exp <= now) {
			return nil, apierr.Status(codes.Unauthenticated, apierr.ReasonTokenInvalid, "invalid, expired or revoked token")
		}
		if err != nil {
			return nil, fmt.Errorf("auth: read api token: %w", err)
		}
		if _, err := s.store.ExecContext(ctx, s.store.Q(`UPDATE api_tokens SET last_used_ms = $2 WHERE id = $1`), id, now); err != nil {
			s.log.WarnContext(ctx, "recording api token use", "token_id", id, "error", err)
		}
	} else {
		err := s.store.QueryRowContext(ctx, s.store.Q(`SELECT user_id, expire_ms FROM sessions WHERE token_hash = $1`), h).Scan(&uid, &exp)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && exp <= now) {
			return nil, apierr.Status(codes.Unauthenticated, apierr.ReasonTokenInvalid, "invalid or expired token")
		}
		if err != nil {
			return nil, fmt.Errorf("auth: read session: %w", err)
		}
	}
	u, err := s.userByID(ctx, uid)
	if errors.Is(err, apierr.ErrNotFound) {
		return nil, apierr.Status(codes.Unauthenticated, apierr.ReasonTokenInvalid, "the token's user no longer exists")
	}
	return u, err
}

func (s *Service) userByID(ctx context.Context, id int64) (*authv1.User, error) {
	u, err := scanUser(s.store.QueryRowContext(ctx, s.store.Q(`SELECT id, username, role, group_ids, create_ms, password_hash FROM users WHERE id = $1`), id), nil)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("user %d: %w", id, apierr.ErrUserNotFound)
	}
	return u, err
}

func (s *Service) userByName(ctx context.Context, name string) (*authv1.User, string, error) {
	var hash string
	u, err := scanUser(s.store.QueryRowContext(ctx, s.store.Q(`SELECT id, username, role, group_ids, create_ms, password_hash FROM users WHERE username = $1`), name), &hash)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, "", fmt.Errorf("user %q: %w", name, apierr.ErrUserNotFound)
	}
	return u, hash, err
}

func scanUser(r *sql.Row, hash *string) (*authv1.User, error) {
	var (
		u        authv1.User
		role     int32
		groups   string
		createMs int64
		h        string
	)
	if err := r.Scan(&u.Id, &u.Username, &role, &groups, &createMs, &h); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
		return nil, fmt.Errorf("auth: read user: %w", err)
	}
	if hash != nil {
		*hash = h
	}
	fillUser(&u, role, groups, createMs)
	return &u, nil
}

func fillUser(u *authv1.User, role int32, groups string, createMs int64) {
	u.Role = authv1.Role(role)
	for _, g := range strings.Split(groups, ",") {
		if id, err := strconv.ParseInt(g, 10, 64); err == nil {
			u.GroupIds = append(u.GroupIds, id)
		}
	}
	u.CreateTime = timestamppb.New(time.UnixMilli(createMs))
}

// Token prefixes tell the two kinds of token apart (and make a leaked one easy to recognise).
const (
	sessionPrefix  = "jms_"
	apiTokenPrefix = "jmt_"
)

func bearer(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if tok, ok := strings.CutPrefix(v, "Bearer "); ok && tok != "" {
			return tok, nil
		}
	}
	return "", apierr.Status(codes.Unauthenticated, apierr.ReasonTokenMissing, "missing bearer token")
}

// maxUsernameBytes bounds the user names a login looks up (usernameRE allows 50 characters).
const maxUsernameBytes = 200

// errBusy is the answer when MaxConcurrentHashes password checks are running.
var errBusy = apierr.Status(codes.ResourceExhausted, apierr.ReasonServerBusy, "too many password checks in progress; retry shortly")

// acquireHash takes a slot for an argon2id computation, or fails at once with ResourceExhausted
// when every slot is taken. The caller calls release when its hashing is done.
func (s *Service) acquireHash() (release func(), err error) {
	select {
	case s.hashes <- struct{}{}:
		return func() { <-s.hashes }, nil
	default:
		return nil, errBusy
	}
}

// reserveGuess counts a failed guess of user's password from client ahead of checking it
// (ThrottleConfig), or fails with ResourceExhausted while a lockout runs. what names the attempt
// in logs.
func (s *Service) reserveGuess(ctx context.Context, what, user, client string, now time.Time) (*reservation, error) {
	wait, r, err := s.throttle.reserve(user, client, now)
	if err != nil {
		s.log.WarnContext(ctx, what+" refused: throttle full", "username", user, "client", client)
		return nil, apierr.Status(codes.ResourceExhausted, apierr.ReasonServerBusy, "too many clients; retry later")
	}
	if wait > 0 {
		s.log.WarnContext(ctx, what+" refused: locked out", "username", user, "client", client, "retry_after", wait.Round(time.Second).String())
		return nil, apierr.Statusf(codes.ResourceExhausted, apierr.ReasonLoginThrottled, "too many failed attempts; retry in %s", wait.Round(time.Second))
	}
	if r.lock > 0 {
		s.log.WarnContext(ctx, what+" locked out", "username", user, "client", client, "failures", r.n, "lockout", r.lock.String())
	}
	return r, nil
}

// argon2id parameters (RFC 9106's second recommended option, with 64 MiB).
const (
	argonTime    = 3
	argonMemory  = 64 * 1024
	argonThreads = 2
	argonKeyLen  = 32
)

// dummyHash keeps a failed login for an unknown user as slow as for a known one. It is computed
// at the first such login, not at start-up: argon2id with 64 MiB would otherwise cost that memory
// and time in every process that links this package (scheduler, registry, logsvc, agents).
var dummyHash = sync.OnceValue(func() string { return hashPassword("not a real password", argonMemory) })

func hashPassword(p string, memKiB uint32) string {
	salt := make([]byte, 16)
	_, _ = rand.Read(salt)
	key := argon2.IDKey([]byte(p), salt, argonTime, memKiB, argonThreads, argonKeyLen)
	return fmt.Sprintf("$argon2id$v=19$m=%d,t=%d,p=%d$%s$%s", memKiB, argonTime, argonThreads,
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key))
}

func verifyPassword(p, encoded string) bool {
	parts := strings.Split(encoded, "$")
	if len(parts) != 6 || parts[1] != "argon2id" {
		return false
	}
	var m uint32
	var t uint32
	var th uint8
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &m, &t, &th); err != nil {
		return false
	}
	salt, err1 := base64.RawStdEncoding.DecodeString(parts[4])
	want, err2 := base64.RawStdEncoding.DecodeString(parts[5])
	if err1 != nil || err2 != nil {
		return false
	}
	got := argon2.IDKey([]byte(p), salt, t, m, th, uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1
}

func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func tokenHash(tok string) string {
	h := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(h[:])
}

// NewSecret returns a random secret for an internal or agent token (256 bits, URL-safe).
func NewSecret() string { return randomToken(32) }
