package registry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
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
// a lease of its own, keeps the lease alive while heartbeats arrive, and revokes it when the
// stream ends, a heartbeat is missed, or the group's access token is no longer the one the
// executor registered with.
func (s *Service) RegisterExecutor(stream grpc.BidiStreamingServer[registryv1.RegisterExecutorRequest, registryv1.RegisterExecutorResponse]) error {
	ctx := stream.Context()
	first, err := recvWithin(ctx, stream, s.ttl)
	if err != nil {
		return err
	}
	e := first.GetExecutor()
	if err := s.checkRegistration(ctx, e); err != nil {
		return err
	}
	e.Credential = s.credential(bearer(ctx))
	key := KeyPrefix + e.AppName + "/" + e.InstanceId
	n := 0
	for _, x := range s.view.list(e.AppName) {
		if x.InstanceId != e.InstanceId { // the instance itself is refused below if it is live
			n++
		}
	}
	if n >= s.maxPerApp {
		return status.Errorf(codes.ResourceExhausted, "executor group %q has %d executors registered, the most a group may have", e.AppName, n)
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
	_, val, err := registration(s.seal, e, lease.ID)
	if err != nil {
		return fmt.Errorf("register executor %s: %w", key, err)
	}
	// An instance id held by a live registration stays its holder's: a second registration of it
	// (a restarted executor before its old lease ended, or another host of the group) waits.
	put, err := s.etcd.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, val, clientv3.WithLease(lease.ID))).Commit()
	if err != nil {
		return status.Errorf(codes.Unavailable, "register executor %s: %v", key, err)
	}
	if !put.Succeeded {
		return status.Errorf(codes.AlreadyExists, "executor %s is registered by another stream; register again once it has ended", key)
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
	// An executor's credential is checked again while it stays; a service's needs no check.
	recheck := time.NewTicker(credentialRecheck)
	defer recheck.Stop()
	if _, _, isExecutor := s.executor(ctx); !isExecutor {
		recheck.Stop()
	}
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
		case <-recheck.C:
			if err := s.stillCredited(ctx, e); err != nil {
				s.log.Warn("executor's credential is no longer its group's; removing it", "key", key, "reason", err)
				return err
			}
		case <-timeout.C:
			s.log.Warn("executor missed its heartbeats; removing it", "key", key, "timeout", s.ttl)
			return status.Errorf(codes.DeadlineExceeded, "executor %s: no heartbeat within %v", key, s.ttl)
		case <-ctx.Done():
			return nil
		}
	}
}

// credentialRecheck is how often a registration's credential is compared with its group's
// access token: a rotated token removes the executors registered with the old one within it.
const credentialRecheck = 5 * time.Second

// stillCredited fails with Unauthenticated when e's group no longer exists or its access token
// is no longer the one e registered with (e.Credential).
func (s *Service) stillCredited(ctx context.Context, e *registryv1.Executor) error {
	var tok string
	err := s.store.QueryRowContext(ctx, s.store.Q(`SELECT access_token FROM executor_groups WHERE app_name = $1`), e.AppName).Scan(&tok)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return apierr.Statusf(codes.Unauthenticated, apierr.ReasonExecutorTokenInvalid, "executor group %q no longer exists", e.AppName)
	case err != nil:
		return nil // the store is away: keep the registration; the next check decides
	case s.credential(tok) != e.Credential:
		return apierr.Statusf(codes.Unauthenticated, apierr.ReasonExecutorTokenInvalid, "executor group %q has another access token now", e.AppName)
	}
	return nil
}

// credential is the fingerprint of an access token that registrations carry (Executor.credential):
// empty for no token.
func (s *Service) credential(token string) string {
	if token == "" {
		return ""
	}
	return s.credKey.Sum(token)
}

// bearer is the token a call presents, if any.
func bearer(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if tok, ok := strings.CutPrefix(v, "Bearer "); ok {
			return tok
		}
	}
	return ""
}

// recvWithin receives the stream's first message, waiting at most d for it: a caller that opens
// a registration and sends nothing does not hold a stream for long.
func recvWithin(ctx context.Context, stream grpc.BidiStreamingServer[registryv1.RegisterExecutorRequest, registryv1.RegisterExecutorResponse], d time.Duration) (*registryv1.RegisterExecutorRequest, error) {
	type got struct {
		m   *registryv1.RegisterExecutorRequest
		err error
	}
	ch := make(chan got, 1)
	go func() {
		m, err := stream.Recv()
		ch <- got{m, err}
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case g := <-ch:
		return g.m, g.err
	case <-t.C:
		return nil, status.Errorf(codes.DeadlineExceeded, "no registration within %v of opening the stream", d)
	case <-ctx.Done():
		return nil, ctx.Err()
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
	if e.Capacity < 0 || e.Capacity > maxCapacity {
		fs.Add("executor.capacity", "want 0 to %d, got %d", maxCapacity, e.Capacity)
	}
	if e.Kind != registryv1.ExecutorKind_EXECUTOR_KIND_UNSPECIFIED {
		// The registry sets the kind: an agent cannot pass for an XXL-JOB executor.
		fs.Add("executor.kind", "set by the registry, not by the executor (XXL-JOB executors register through the XXL-JOB admin API), got %v", e.Kind)
	}
	if len(e.Version) > maxVersion {
		fs.Add("executor.version", "at most %d bytes, got %d", maxVersion, len(e.Version))
	}
	size := 0
	for k, v := range e.Labels {
		size += len(k) + len(v)
	}
	if len(e.Labels) > maxLabels || size > maxLabelBytes {
		fs.Add("executor.labels", "at most %d labels of %d bytes in all, got %d of %d", maxLabels, maxLabelBytes, len(e.Labels), size)
	}
	if err := fs.Err(); err != nil {
		return err
	}
	if _, app, ok := s.executor(ctx); ok {
		if app != e.AppName {
			return apierr.Statusf(codes.PermissionDenied, apierr.ReasonGroupNotAllowed, "executor.app_name %q: your credential is executor group %q's", e.AppName, app)
		}
		return nil
	}
	if !s.reveal(ctx) {
		return apierr.Status(codes.PermissionDenied, apierr.ReasonRoleRequired, "only executors (with their group's access token) and services register executors")
	}
	return nil
}

// Bounds of a registration: the live view goes whole to every scheduler, so one group's
// registrations must not be able to make it too big to send.
const (
	maxVersion    = 64
	maxLabels     = 32
	maxLabelBytes = 4096
	maxCapacity   = 1_000_000
)

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
// registry's behalf. The value must be put under lease: the seal covers it.
func Registration(secret string, e *registryv1.Executor, lease clientv3.LeaseID) (key, value string, err error) {
	return registration(seal.New(secret, seal.Registration), e, lease)
}

// registration seals e for its key and the lease it lives under, so the value is worthless under
// any other key or lease (or none: a copy put back after the executor left).
func registration(k *seal.Key, e *registryv1.Executor, lease clientv3.LeaseID) (key, value string, err error) {
	c := proto.Clone(e).(*registryv1.Executor)
	key = KeyPrefix + c.AppName + "/" + c.InstanceId
	c.LastSeenTime, c.Seal = nil, ""
	c.Seal = k.Sum(key, strconv.FormatInt(int64(lease), 16), string(sealed(c)))
	b, err := protojson.Marshal(c)
	return key, string(b), err
}
