// Package registry is the registry service: executor groups stored in the database and the live
// executor view built from etcd TTL keys, streamed to the scheduler so routing needs no RPC per
// fire.
package registry

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/hostport"
	"github.com/jobmesh/jobmesh/internal/seal"
)

//go:embed migrations
var migrations embed.FS

// MigrationsFS returns the registry's migrations, a folder per dialect.
func MigrationsFS() fs.FS {
	sub, _ := fs.Sub(migrations, "migrations")
	return sub
}

// Config tunes the registry.
type Config struct {
	// Logger receives the registry's logs; nil discards them.
	Logger *slog.Logger
	// RevealTokens reports whether a call comes from another jobmesh service (the auth guard's
	// internal caller), which reads groups' access tokens in clear: the scheduler presents them
	// to executors. Everyone else, people included, reads them as MaskedToken. Nil reveals them
	// to no one.
	RevealTokens func(ctx context.Context) bool
	// SealSecret is the secret the registry seals the registrations it writes to etcd with (the
	// services' internal token); the live view leaves out keys without a valid seal, so a host
	// that can write to etcd still cannot add an executor. Required.
	SealSecret string
	// Executor identifies a call made with an executor group's access token (auth.ExecutorOf):
	// RegisterExecutor accepts such a caller only for its own group's app. Nil accepts only
	// services (RevealTokens).
	Executor func(ctx context.Context) (groupID int64, app string, ok bool)
	// ExecutorTTL is how long a registration outlives its executor's last heartbeat (and its
	// etcd lease's TTL), and how long a new registration stream may wait before it registers.
	// Default 10s; at least 1s.
	ExecutorTTL time.Duration
	// MaxExecutorsPerGroup caps the executors registered under one app at once. Default 1000.
	MaxExecutorsPerGroup int
	// XxlMinDeadTime is the shortest dead time RegisterXxlExecutor accepts. Default (and the
	// API's rule) MinXxlDeadTime, 10s; tests lower it, to at least 1s, to see registrations expire.
	XxlMinDeadTime time.Duration
}

// MaskedToken is what reads return in place of a group's access token. Sent back in an update
// (as a form that shows the masked value does), it keeps the stored token.
const MaskedToken = "****"

// Service serves RegistryService.
type Service struct {
	registryv1.UnimplementedRegistryServiceServer

	log       *slog.Logger
	store     *db.DB
	etcd      *clientv3.Client
	view      *view
	reveal    func(context.Context) bool
	executor  func(context.Context) (int64, string, bool)
	seal      *seal.Key
	credKey   *seal.Key // fingerprints registrations' access tokens (Executor.credential)
	ttl       time.Duration
	maxPerApp int
	// xxlMinDeadTime is Config.XxlMinDeadTime.
	xxlMinDeadTime time.Duration

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	done    chan struct{}
	metrics metric.Registration // the executors-online callback
}

// New returns a registry over its store and an etcd client.
func New(cfg Config, store *db.DB, etcd *clientv3.Client) (*Service, error) {
	if store == nil || etcd == nil {
		return nil, errors.New("registry: store and etcd client are required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reveal := cfg.RevealTokens
	if reveal == nil {
		reveal = func(context.Context) bool { return false }
	}
	executor := cfg.Executor
	if executor == nil {
		executor = func(context.Context) (int64, string, bool) { return 0, "", false }
	}
	if cfg.SealSecret == "" {
		return nil, errors.New("registry: seal secret is required")
	}
	ttl := cfg.ExecutorTTL
	if ttl == 0 {
		ttl = 10 * time.Second
	}
	if ttl < time.Second {
		return nil, fmt.Errorf("registry: executor TTL %v: want at least 1s", ttl)
	}
	maxPerApp := cfg.MaxExecutorsPerGroup
	if maxPerApp == 0 {
		maxPerApp = 1000
	}
	if maxPerApp < 0 {
		return nil, fmt.Errorf("registry: max executors per group %d: must not be negative", maxPerApp)
	}
	xxlMin := cfg.XxlMinDeadTime
	if xxlMin == 0 {
		xxlMin = MinXxlDeadTime
	}
	if xxlMin < time.Second || xxlMin%time.Second != 0 {
		return nil, fmt.Errorf("registry: XXL-JOB min dead time %v: want whole seconds, at least 1s", xxlMin)
	}
	sk := seal.New(cfg.SealSecret, seal.Registration)
	return &Service{log: log, store: store, etcd: etcd, view: newView(log, etcd, time.Now, sk), reveal: reveal,
		executor: executor, seal: sk, credKey: seal.New(cfg.SealSecret, seal.Credential), ttl: ttl, maxPerApp: maxPerApp,
		xxlMinDeadTime: xxlMin}, nil
}

// Register adds RegistryService to g.
func (s *Service) Register(g *grpc.Server) { registryv1.RegisterRegistryServiceServer(g, s) }

// Start loads the live view from etcd and keeps it current until Stop.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("registry: already started")
	}
	rev, err := s.view.load(ctx)
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	if s.metrics, err = s.view.observeOnline(); err != nil {
		s.log.Warn("executors-online metric not registered", "error", err)
	}
	ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	s.done = make(chan struct{})
	s.started = true
	go func() {
		defer close(s.done)
		s.view.run(ctx, rev)
	}()
	return nil
}

// Stop ends the watch. It is idempotent.
func (s *Service) Stop() {
	s.mu.Lock()
	cancel, done, reg := s.cancel, s.done, s.metrics
	s.cancel, s.metrics = nil, nil
	s.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	if reg != nil {
		_ = reg.Unregister()
	}
}

// ListExecutors implements RegistryService; each executor's last-seen time is its lease's last
// refresh.
func (s *Service) ListExecutors(ctx context.Context, req *registryv1.ListExecutorsRequest) (*registryv1.ListExecutorsResponse, error) {
	return &registryv1.ListExecutorsResponse{Executors: s.view.withLastSeen(ctx, s.view.list(req.GetAppName()))}, nil
}

// WatchExecutors implements RegistryService: a snapshot, then every change; a lagging stream
// gets a fresh snapshot instead of an unbounded queue.
func (s *Service) WatchExecutors(req *registryv1.WatchExecutorsRequest, stream grpc.ServerStreamingServer[registryv1.WatchExecutorsResponse]) error {
	sub, snap := s.view.subscribe(req.GetAppName())
	defer s.view.unsubscribe(sub)
	if err := stream.Send(snap); err != nil {
		return err
	}
	ctx := stream.Context()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-sub.events:
			if err := stream.Send(ev); err != nil {
				return err
			}
		case <-sub.resync:
			if err := stream.Send(s.view.resnapshot(sub)); err != nil {
				return err
			}
		}
	}
}

const groupColumns = "id, app_name, title, address_type, manual_addresses, access_token, update_ms"

// ListExecutorGroups implements RegistryService.
func (s *Service) ListExecutorGroups(ctx context.Context, req *registryv1.ListExecutorGroupsRequest) (*registryv1.ListExecutorGroupsResponse, error) {
	var fs apierr.Fields
	fs.Filter("app_name", req.GetAppName())
	fs.Filter("title", req.GetTitle())
	if err := fs.Err(); err != nil {
		return nil, err
	}
	app := db.Contains(req.GetAppName())
	if req.GetWholeAppName() {
		app = db.Escape(req.GetAppName())
	}
	rows, err := s.store.QueryContext(ctx, s.store.Q(`SELECT `+groupColumns+` FROM executor_groups
		WHERE ($1 = '' OR lower(app_name) LIKE lower($1) ESCAPE '\')
		  AND ($2 = '' OR lower(title) LIKE lower($2) ESCAPE '\')
		ORDER BY id`), app, db.Contains(req.GetTitle()))
	if err != nil {
		return nil, fmt.Errorf("list executor groups: %w", err)
	}
	defer rows.Close()
	resp := &registryv1.ListExecutorGroupsResponse{}
	for rows.Next() {
		g, err := scanGroup(rows)
		if err != nil {
			return nil, err
		}
		if req.GetWithoutExecutors() {
			s.mask(ctx, g)
		} else {
			g = s.resolve(ctx, g)
		}
		resp.Groups = append(resp.Groups, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list executor groups: %w", err)
	}
	return resp, nil
}

// GetExecutorGroup implements RegistryService.
func (s *Service) GetExecutorGroup(ctx context.Context, req *registryv1.GetExecutorGroupRequest) (*registryv1.GetExecutorGroupResponse, error) {
	g, err := s.getGroup(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	return &registryv1.GetExecutorGroupResponse{Group: s.resolve(ctx, g)}, nil
}

// CreateExecutorGroup implements RegistryService.
func (s *Service) CreateExecutorGroup(ctx context.Context, req *registryv1.CreateExecutorGroupRequest) (*registryv1.CreateExecutorGroupResponse, error) {
	g := req.GetGroup()
	if g == nil {
		return nil, apierr.Field("group", "required")
	}
	if g.AddressType == registryv1.AddressType_ADDRESS_TYPE_UNSPECIFIED {
		g.AddressType = registryv1.AddressType_ADDRESS_TYPE_AUTO
	}
	if g.AccessToken == MaskedToken {
		return nil, apierr.Field("access_token", "%q is how reads mask a token; give the token itself", MaskedToken)
	}
	if err := validateGroup(g); err != nil {
		return nil, err
	}
	var id int64
	err := s.store.QueryRowContext(ctx, s.store.Q(`INSERT INTO executor_groups (app_name, title, address_type, manual_addresses, access_token, update_ms)
		VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`),
		g.AppName, g.Title, int32(g.AddressType), strings.Join(g.ManualAddresses, ","), g.AccessToken, time.Now().UnixMilli()).Scan(&id)
	if err != nil {
		if db.IsUniqueViolation(err) {
			return nil, fmt.Errorf("executor group with app_name %q: %w", g.AppName, apierr.ErrExecutorGroupExists)
		}
		return nil, fmt.Errorf("create executor group: %w", err)
	}
	stored, err := s.getGroup(ctx, id)
	if err != nil {
		return nil, err
	}
	return &registryv1.CreateExecutorGroupResponse{Group: s.resolve(ctx, stored)}, nil
}

// UpdateExecutorGroup implements RegistryService.
func (s *Service) UpdateExecutorGroup(ctx context.Context, req *registryv1.UpdateExecutorGroupRequest) (*registryv1.UpdateExecutorGroupResponse, error) {
	in := req.GetGroup()
	if in == nil {
		return nil, apierr.Field("group", "required")
	}
	cur, err := s.getGroup(ctx, in.Id)
	if err != nil {
		return nil, err
	}
	paths := req.GetUpdateMask().GetPaths()
	if len(paths) == 0 {
		paths = []string{"app_name", "title", "address_type", "manual_addresses", "access_token"}
	}
	for _, p := range paths {
		switch p {
		case "app_name":
			cur.AppName = in.AppName
		case "title":
			cur.Title = in.Title
		case "address_type":
			cur.AddressType = in.AddressType
		case "manual_addresses":
			cur.ManualAddresses = in.ManualAddresses
		case "access_token":
			if in.AccessToken != MaskedToken { // the masked value read back: keep the token
				cur.AccessToken = in.AccessToken
			}
		default:
			return nil, apierr.Field("update_mask", "unknown or read-only field %q", p)
		}
	}
	if err := validateGroup(cur); err != nil {
		return nil, err
	}
	_, err = s.store.ExecContext(ctx, s.store.Q(`UPDATE executor_groups SET app_name = $2, title = $3, address_type = $4,
		manual_addresses = $5, access_token = $6, update_ms = $7 WHERE id = $1`),
		cur.Id, cur.AppName, cur.Title, int32(cur.AddressType), strings.Join(cur.ManualAddresses, ","), cur.AccessToken, time.Now().UnixMilli())
	if err != nil {
		if db.IsUniqueViolation(err) {
			return nil, fmt.Errorf("executor group with app_name %q: %w", cur.AppName, apierr.ErrExecutorGroupExists)
		}
		return nil, fmt.Errorf("update executor group %d: %w", cur.Id, err)
	}
	stored, err := s.getGroup(ctx, cur.Id)
	if err != nil {
		return nil, err
	}
	return &registryv1.UpdateExecutorGroupResponse{Group: s.resolve(ctx, stored)}, nil
}

// DeleteExecutorGroup implements RegistryService.
func (s *Service) DeleteExecutorGroup(ctx context.Context, req *registryv1.DeleteExecutorGroupRequest) (*registryv1.DeleteExecutorGroupResponse, error) {
	res, err := s.store.ExecContext(ctx, s.store.Q(`DELETE FROM executor_groups WHERE id = $1`), req.GetId())
	if err != nil {
		return nil, fmt.Errorf("delete executor group %d: %w", req.GetId(), err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil, fmt.Errorf("executor group %d: %w", req.GetId(), apierr.ErrExecutorGroupNotFound)
	}
	return &registryv1.DeleteExecutorGroupResponse{}, nil
}

func (s *Service) getGroup(ctx context.Context, id int64) (*registryv1.ExecutorGroup, error) {
	row := s.store.QueryRowContext(ctx, s.store.Q(`SELECT `+groupColumns+` FROM executor_groups WHERE id = $1`), id)
	g, err := scanGroup(row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("executor group %d: %w", id, apierr.ErrExecutorGroupNotFound)
	}
	return g, err
}

// resolve fills in the addresses in use now (for AUTO groups, the online executors with their
// last-seen times) and masks the token unless the caller is a service (Config.RevealTokens).
func (s *Service) resolve(ctx context.Context, g *registryv1.ExecutorGroup) *registryv1.ExecutorGroup {
	s.mask(ctx, g)
	switch g.AddressType {
	case registryv1.AddressType_ADDRESS_TYPE_MANUAL:
		// Compacted too, for lists stored before repeats were refused: routing takes a set.
		g.Addresses = slices.Compact(slices.Sorted(slices.Values(g.ManualAddresses)))
	default:
		g.Executors = s.view.withLastSeen(ctx, s.view.list(g.AppName))
		for _, e := range g.Executors {
			g.Addresses = append(g.Addresses, e.Address)
		}
		slices.Sort(g.Addresses)
		g.Addresses = slices.Compact(g.Addresses)
	}
	return g
}

// mask hides the group's access token unless the caller is a service (Config.RevealTokens).
func (s *Service) mask(ctx context.Context, g *registryv1.ExecutorGroup) {
	if g.AccessToken != "" && !s.reveal(ctx) {
		g.AccessToken = MaskedToken
	}
}

type scanner interface{ Scan(dest ...any) error }

func scanGroup(r scanner) (*registryv1.ExecutorGroup, error) {
	var (
		g        registryv1.ExecutorGroup
		typ      int32
		manual   string
		updateMs int64
	)
	if err := r.Scan(&g.Id, &g.AppName, &g.Title, &typ, &manual, &g.AccessToken, &updateMs); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
		return nil, fmt.Errorf("read executor group: %w", err)
	}
	g.AddressType = registryv1.AddressType(typ)
	if manual != "" {
		g.ManualAddresses = strings.Split(manual, ",")
	}
	g.UpdateTime = timestamppb.New(time.UnixMilli(updateMs))
	return &g, nil
}

var appName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

func validateGroup(g *registryv1.ExecutorGroup) error {
	var fs apierr.Fields
	if !appName.MatchString(g.AppName) {
		fs.Add("app_name", "want 1-64 of [A-Za-z0-9_.-], got %q", g.AppName)
	}
	if n := len([]rune(g.Title)); n < 1 || n > 64 {
		fs.Add("title", "want 1-64 characters, got %d", n)
	}
	switch g.AddressType {
	case registryv1.AddressType_ADDRESS_TYPE_AUTO:
	case registryv1.AddressType_ADDRESS_TYPE_MANUAL:
		if len(g.ManualAddresses) == 0 {
			fs.Add("manual_addresses", "a MANUAL group needs at least one address")
		}
	default:
		fs.Add("address_type", "unknown value %d", int32(g.AddressType))
	}
	if len(g.ManualAddresses) > 1000 {
		fs.Add("manual_addresses", "at most 1000 addresses, got %d", len(g.ManualAddresses))
	}
	seen := make(map[string]int, len(g.ManualAddresses))
	for i, a := range g.ManualAddresses {
		if u, ok := hostport.XxlURL(a); ok {
			a = u // an XXL-JOB executor's URL, kept as the scheduler calls it
			g.ManualAddresses[i] = a
		}
		if !hostport.Executor(a) {
			fs.Add(fmt.Sprintf("manual_addresses[%d]", i), "want host:port (a jobmesh agent) or an http(s) URL (an XXL-JOB executor), got %q", a)
		} else if j, dup := seen[a]; dup {
			// Routing takes a set: a repeated address would get two ROUND turns or two shards.
			fs.Add(fmt.Sprintf("manual_addresses[%d]", i), "%q repeats manual_addresses[%d]", a, j)
		} else {
			seen[a] = i
		}
	}
	if len(g.AccessToken) > 255 {
		fs.Add("access_token", "at most 255 characters")
	}
	return fs.Err()
}
