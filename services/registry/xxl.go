package registry

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
	"github.com/jobmesh/jobmesh/internal/hostport"
)

// Bounds of an XXL-JOB registration's dead time (RegisterXxlExecutorRequest.dead_time_seconds).
const (
	// DefaultXxlDeadTime is XXL-JOB's own: three of its executors' 30 s registry rounds.
	DefaultXxlDeadTime = 90 * time.Second
	// MinXxlDeadTime is the shortest dead time the API accepts (Config.XxlMinDeadTime lowers it
	// for tests).
	MinXxlDeadTime = 10 * time.Second
	// MaxXxlDeadTime is the longest.
	MaxXxlDeadTime = time.Hour
	// maxXxlAddress bounds an XXL-JOB executor's address: it goes whole into the live view.
	maxXxlAddress = 512
)

// RegisterXxlExecutor implements RegistryService: it writes an XXL-JOB executor's sealed
// registration (kind XXL_JOB) under a lease of its dead time, or renews the lease of the live one
// it wrote before, so a registry restart loses nothing and each call pushes the end back.
func (s *Service) RegisterXxlExecutor(ctx context.Context, req *registryv1.RegisterXxlExecutorRequest) (*registryv1.RegisterXxlExecutorResponse, error) {
	if !s.reveal(ctx) {
		return nil, apierr.Status(codes.PermissionDenied, apierr.ReasonRoleRequired, "only services register XXL-JOB executors")
	}
	var fs apierr.Fields
	if !appName.MatchString(req.GetAppName()) {
		fs.Add("app_name", "want 1-64 of [A-Za-z0-9_.-], got %q", apierr.Clip(req.GetAppName()))
	}
	addr, inst, aerr := XxlAddress(req.GetAddress())
	if aerr != nil {
		fs.Add("address", "%v", aerr)
	}
	dead := DefaultXxlDeadTime
	if n := req.GetDeadTimeSeconds(); n != 0 {
		dead = time.Duration(n) * time.Second
	}
	if dead < s.xxlMinDeadTime || dead > MaxXxlDeadTime {
		fs.Add("dead_time_seconds", "want %d to %d (0 for %d), got %d", int(s.xxlMinDeadTime/time.Second),
			int(MaxXxlDeadTime/time.Second), int(DefaultXxlDeadTime/time.Second), req.GetDeadTimeSeconds())
	}
	if len(req.GetAccessToken()) > 255 {
		fs.Add("access_token", "at most 255 characters")
	}
	if err := fs.Err(); err != nil {
		return nil, err
	}
	if err := s.checkAutoGroup(ctx, req.GetAppName()); err != nil {
		return nil, err
	}
	e := &registryv1.Executor{
		AppName: req.GetAppName(), InstanceId: inst, Address: addr, Kind: registryv1.ExecutorKind_EXECUTOR_KIND_XXL_JOB,
		Credential: s.credential(req.GetAccessToken()),
	}
	// A concurrent call for the same executor may win a write: look again (then it renews).
	for range 3 {
		resp, retry, err := s.registerXxl(ctx, e, dead)
		if !retry {
			return resp, err
		}
	}
	return nil, status.Errorf(codes.Aborted, "executor %s/%s: registered concurrently; call again", e.AppName, e.InstanceId)
}

// registerXxl renews e's live registration when it is the same one, else writes e under a new
// lease of dead. retry reports that the key changed under it.
func (s *Service) registerXxl(ctx context.Context, e *registryv1.Executor, dead time.Duration) (_ *registryv1.RegisterXxlExecutorResponse, retry bool, _ error) {
	key := KeyPrefix + e.AppName + "/" + e.InstanceId
	got, err := s.etcd.Get(ctx, key)
	if err != nil {
		return nil, false, status.Errorf(codes.Unavailable, "register executor %s: %v", key, err)
	}
	var (
		modRev   int64
		oldLease clientv3.LeaseID
		created  = true
	)
	e = proto.CloneOf(e)
	e.StartTime = timestamppb.Now()
	if len(got.Kvs) == 1 {
		kv := got.Kvs[0]
		modRev, oldLease = kv.ModRevision, clientv3.LeaseID(kv.Lease)
		old, ok := s.view.decode(key, kv.Value, oldLease)
		switch {
		case ok && old.Kind != registryv1.ExecutorKind_EXECUTOR_KIND_XXL_JOB:
			return nil, false, status.Errorf(codes.AlreadyExists, "executor %s is a jobmesh agent's registration; an XXL-JOB executor cannot take its instance id", key)
		case ok && old.Address == e.Address && old.Credential == e.Credential:
			ka, err := s.etcd.KeepAliveOnce(ctx, oldLease)
			switch {
			case errors.Is(err, rpctypes.ErrLeaseNotFound):
				// Expired just now: the key is gone with it; write a new one.
				return nil, true, nil
			case err != nil:
				return nil, false, status.Errorf(codes.Unavailable, "renew executor %s: %v", key, err)
			case time.Duration(ka.TTL)*time.Second == dead:
				old.LastSeenTime = timestamppb.Now()
				return &registryv1.RegisterXxlExecutorResponse{Executor: old}, false, nil
			}
			// The dead time changed (the gateway's configuration did): a new lease of the new one.
			e.StartTime, created = old.StartTime, false
		case ok:
			e.StartTime, created = old.StartTime, false // a new token: the same executor, credited anew
		}
	}
	if created {
		n := 0
		for _, x := range s.view.list(e.AppName) {
			if x.InstanceId != e.InstanceId {
				n++
			}
		}
		if n >= s.maxPerApp {
			return nil, false, status.Errorf(codes.ResourceExhausted, "executor group %q has %d executors registered, the most a group may have", e.AppName, n)
		}
	}
	lease, err := s.etcd.Grant(ctx, int64(dead/time.Second))
	if err != nil {
		return nil, false, status.Errorf(codes.Unavailable, "register executor %s: grant lease: %v", key, err)
	}
	_, val, err := registration(s.seal, e, lease.ID)
	if err != nil {
		return nil, false, fmt.Errorf("register executor %s: %w", key, err)
	}
	put, err := s.etcd.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", modRev)).
		Then(clientv3.OpPut(key, val, clientv3.WithLease(lease.ID))).Commit()
	if err != nil || !put.Succeeded {
		s.revoke(ctx, lease.ID, key)
		if err != nil {
			return nil, false, status.Errorf(codes.Unavailable, "register executor %s: %v", key, err)
		}
		return nil, true, nil
	}
	if oldLease != clientv3.NoLease {
		s.revoke(ctx, oldLease, key) // it held only the key's old value
	}
	s.log.Info("XXL-JOB executor registered", "key", key, "address", e.Address, "created", created, "dead_time", dead)
	e.LastSeenTime = timestamppb.Now()
	return &registryv1.RegisterXxlExecutorResponse{Executor: e, Created: created}, false, nil
}

// RemoveXxlExecutor implements RegistryService: it revokes the lease of an XXL-JOB executor's
// registration, which takes it out of the live view at once.
func (s *Service) RemoveXxlExecutor(ctx context.Context, req *registryv1.RemoveXxlExecutorRequest) (*registryv1.RemoveXxlExecutorResponse, error) {
	if !s.reveal(ctx) {
		return nil, apierr.Status(codes.PermissionDenied, apierr.ReasonRoleRequired, "only services remove XXL-JOB executors")
	}
	var fs apierr.Fields
	if !appName.MatchString(req.GetAppName()) {
		fs.Add("app_name", "want 1-64 of [A-Za-z0-9_.-], got %q", apierr.Clip(req.GetAppName()))
	}
	_, inst, aerr := XxlAddress(req.GetAddress())
	if aerr != nil {
		fs.Add("address", "%v", aerr)
	}
	if err := fs.Err(); err != nil {
		return nil, err
	}
	key := KeyPrefix + req.GetAppName() + "/" + inst
	got, err := s.etcd.Get(ctx, key)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "remove executor %s: %v", key, err)
	}
	if len(got.Kvs) == 0 {
		return &registryv1.RemoveXxlExecutorResponse{}, nil
	}
	kv := got.Kvs[0]
	if e, ok := s.view.decode(key, kv.Value, clientv3.LeaseID(kv.Lease)); !ok || e.Kind != registryv1.ExecutorKind_EXECUTOR_KIND_XXL_JOB {
		return &registryv1.RemoveXxlExecutorResponse{}, nil // not an XXL-JOB executor's: not this call's to remove
	}
	if _, err := s.etcd.Revoke(ctx, clientv3.LeaseID(kv.Lease)); err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return &registryv1.RemoveXxlExecutorResponse{}, nil // expired meanwhile
		}
		return nil, status.Errorf(codes.Unavailable, "remove executor %s: %v", key, err)
	}
	s.log.Info("XXL-JOB executor removed", "key", key)
	return &registryv1.RemoveXxlExecutorResponse{Removed: true}, nil
}

// checkAutoGroup fails unless app names an AUTO executor group.
func (s *Service) checkAutoGroup(ctx context.Context, app string) error {
	var typ int32
	err := s.store.QueryRowContext(ctx, s.store.Q(`SELECT address_type FROM executor_groups WHERE app_name = $1`), app).Scan(&typ)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("app_name: executor group with app name %q: %w", app, apierr.ErrExecutorGroupNotFound)
	case err != nil:
		return fmt.Errorf("read executor group %q: %w", app, err)
	case registryv1.AddressType(typ) == registryv1.AddressType_ADDRESS_TYPE_MANUAL:
		return apierr.Field("app_name", "executor group %q lists its addresses by hand (MANUAL); executors register only in AUTO groups", app)
	}
	return nil
}

// revoke ends a lease, logging a failure (the lease then expires by its TTL).
func (s *Service) revoke(ctx context.Context, lease clientv3.LeaseID, key string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if _, err := s.etcd.Revoke(rctx, lease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		s.log.Warn("revoking a registration's lease failed; it expires with its TTL", "key", key, "error", err)
	}
}

// XxlAddress checks an XXL-JOB executor's address (its registryValue, as hostport.XxlURL checks
// it) and returns it normalised to end in "/", as XXL-JOB's admin appends endpoint names to it,
// with the instance id of its registration:
// "xxl-host:port" for a plain "http://host:port/", else "xxl-" and a digest of the address.
func XxlAddress(raw string) (addr, instance string, err error) {
	if raw == "" {
		return "", "", errors.New("required, the executor's URL, e.g. \"http://10.0.0.5:9999/\"")
	}
	if len(raw) > maxXxlAddress {
		return "", "", fmt.Errorf("at most %d bytes, got %d", maxXxlAddress, len(raw))
	}
	addr, ok := hostport.XxlURL(raw)
	if !ok {
		return "", "", fmt.Errorf("want an http or https URL with a host, an optional port and path, and no user, query or fragment, e.g. \"http://10.0.0.5:9999/\"; got %q", apierr.Clip(raw))
	}
	u, _ := url.Parse(addr)
	instance = "xxl-" + u.Host
	if u.Scheme != "http" || u.Path != "/" || !instanceID.MatchString(instance) {
		sum := sha256.Sum256([]byte(addr))
		instance = "xxl-" + hex.EncodeToString(sum[:12])
	}
	return addr, instance, nil
}
