package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
	"github.com/jobmesh/jobmesh/internal/hostport"
	"github.com/jobmesh/jobmesh/internal/seal"
)

var instanceID = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)

// RegisterExecutor implements RegistryService: it checks the registration against the caller's
// credential (an executor registers only under its own group's app), writes the sealed key under
// a lease, keeps the lease alive while heartbeats arrive, and revokes it when the stream ends.
func (s *Service) RegisterExecutor(stream grpc.BidiStreamingServer[registryv1.RegisterExecutorRequest, registryv1.RegisterExecutorResponse]) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	e := first.GetExecutor()
	if err := s.checkRegistration(ctx, e); err != nil {
		return err
	}
	key, val, err := registration(s.seal, e)
	if err != nil {
		return fmt.Errorf("register executor %s: %w", key, err)
	}

	lease, err := s.etcd.Grant(ctx, int64((s.ttl+time.Second-1)/time.Second))
	if err != nil {
		return status.Errorf(codes.Unavailable, "register executor %s: grant lease: %v", key, err)
	}
	defer func() {
		// The registration ends with the stream: revoke at once rather than wait out the TTL.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if _, err := s.etcd.Revoke(rctx, lease.ID); err != nil {
			s.log.Warn("revoking an executor's lease failed; it expires with its TTL", "key", key, "error", err)
		}
	}()
	if _, err := s.etcd.Put(ctx, key, string(val), clientv3.WithLease(lease.ID)); err != nil {
		return status.Errorf(codes.Unavailable, "register executor %s: %v", key, err)
	}
	kctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kept, err := s.etcd.KeepAlive(kctx, lease.ID)
	if err != nil {
		return status.Errorf(codes.Unavailable, "register executor %s: keep lease alive: %v", key, err)
	}
	interval := s.ttl / 3
	resp := &registryv1.RegisterExecutorResponse{HeartbeatTimeoutMs: s.ttl.Milliseconds(), HeartbeatIntervalMs: interval.Milliseconds()}
	if err := stream.Send(resp); err != nil {
		return err
	}
	s.log.Info("executor registered", "key", key, "address", e.Address, "lease_id", fmt.Sprintf("%x", lease.ID))

	beats := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err == nil && m.GetExecutor() != nil {
				err = status.Error(codes.InvalidArgument, "executor: only the first message registers; later ones are heartbeats")
			}
			select {
			case beats <- err:
			case <-kctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	timeout := time.NewTimer(s.ttl)
	defer timeout.Stop()
	for {
		select {
		case err := <-beats:
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
				s.log.Info("executor deregistered", "key", key)
				return nil
			}
			if err != nil {
				return err
			}
			timeout.Reset(s.ttl)
			if err := stream.Send(resp); err != nil {
				return err
			}
		case _, ok := <-kept:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return status.Errorf(codes.Unavailable, "executor %s: its registration's lease was lost; register again", key)
			}
		case <-timeout.C:
			s.log.Warn("executor missed its heartbeats; removing it", "key", key, "timeout", s.ttl)
			return status.Errorf(codes.DeadlineExceeded, "executor %s: no heartbeat within %v", key, s.ttl)
		case <-ctx.Done():
			return nil
		}
	}
}

// checkRegistration validates a registration and that the caller may make it.
func (s *Service) checkRegistration(ctx context.Context, e *registryv1.Executor) error {
	if e == nil {
		return apierr.Field("executor", "required in the first message")
	}
	var fs apierr.Fields
	if !appName.MatchString(e.AppName) {
		fs.Add("executor.app_name", "want 1-64 of [A-Za-z0-9_.-], got %q", e.AppName)
	}
	if !instanceID.MatchString(e.InstanceId) {
		fs.Add("executor.instance_id", "want 1-128 of [A-Za-z0-9_.:-], got %q", e.InstanceId)
	}
	if !hostport.Valid(e.Address) {
		fs.Add("executor.address", "want host:port, got %q", e.Address)
	}
	if e.Capacity < 0 {
		fs.Add("executor.capacity", "want 0 or more, got %d", e.Capacity)
	}
	if err := fs.Err(); err != nil {
		return err
	}
	if _, app, ok := s.executor(ctx); ok {
		if app != e.AppName {
			return status.Errorf(codes.PermissionDenied, "executor.app_name %q: your credential is executor group %q's", e.AppName, app)
		}
		return nil
	}
	if !s.reveal(ctx) {
		return status.Error(codes.PermissionDenied, "only executors (with their group's access token) and services register executors")
	}
	return nil
}

// sealed is what a registration's seal covers: the executor as registered, without its seal and
// last-seen time, in deterministic wire form.
func sealed(e *registryv1.Executor) []byte {
	s, seen := e.Seal, e.LastSeenTime
	e.Seal, e.LastSeenTime = "", nil
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(e)
	e.Seal, e.LastSeenTime = s, seen
	return b
}

// Registration returns the etcd key and value RegisterExecutor writes for e (sealed with secret,
// the registry's Config.SealSecret): for tools and tests that put a registration into etcd on a
// registry's behalf. The key is held by whatever lease the caller puts it under.
func Registration(secret string, e *registryv1.Executor) (key, value string, err error) {
	return registration(seal.New(secret, seal.Registration), e)
}

func registration(k *seal.Key, e *registryv1.Executor) (key, value string, err error) {
	c := proto.Clone(e).(*registryv1.Executor)
	key = KeyPrefix + c.AppName + "/" + c.InstanceId
	c.LastSeenTime, c.Seal = nil, ""
	c.Seal = k.Sum(key, string(sealed(c)))
	b, err := protojson.Marshal(c)
	return key, string(b), err
}
