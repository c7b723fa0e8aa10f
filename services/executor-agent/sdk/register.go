package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
)

// registrar keeps the executor in the registry's live view: it holds a RegisterExecutor stream
// (the registry writes the executor's etcd key under a lease while the stream lasts) and sends
// its heartbeats; when the stream breaks (registry restart, network) it registers again with
// backoff, until stopped.
type registrar struct {
	cli registryv1.RegistryServiceClient
	log *slog.Logger
	reg *registryv1.Executor
	key string // app/instance, for logs

	cancel context.CancelFunc // ends the registration and its stream
	done   chan struct{}
}

func newRegistrar(cli registryv1.RegistryServiceClient, cfg Config, advertise string, started time.Time, log *slog.Logger) *registrar {
	return &registrar{
		cli: cli, log: log, key: cfg.AppName + "/" + cfg.InstanceID,
		reg: &registryv1.Executor{
			AppName: cfg.AppName, InstanceId: cfg.InstanceID, Address: advertise, Version: cfg.Version,
			StartTime: timestamppb.New(started), Capacity: int32(cfg.Capacity), Labels: cfg.Labels,
			HoldsFires: true, // Run honours start_delay_us (worker.go: hold)
		},
	}
}

// start registers once (an error means no registration: a refused credential or an unreachable
// registry within ctx) and keeps the registration until stop.
func (r *registrar) start(ctx context.Context) error {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	beats, err := r.register(ctx, rctx)
	// The instance id may still be held by this executor's previous registration (a restart
	// before the registry saw the old stream end): wait for it within ctx.
	for backoff := 100 * time.Millisecond; status.Code(err) == codes.AlreadyExists; backoff = min(2*backoff, 2*time.Second) {
		r.log.Info("executor instance still registered by an earlier stream; waiting", "executor", r.key)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			cancel()
			return fmt.Errorf("RegistryAddr: register executor %s: %w", r.key, err)
		case <-t.C:
		}
		beats, err = r.register(ctx, rctx)
	}
	if err != nil {
		cancel()
		return fmt.Errorf("RegistryAddr: register executor %s: %w", r.key, err)
	}
	r.cancel = cancel
	r.done = make(chan struct{})
	go func() {
		defer close(r.done)
		r.keep(rctx, beats)
	}()
	r.log.Info("executor registered", "executor", r.key)
	return nil
}

// register opens a registration stream bounded by streamCtx, sends the registration and waits,
// within ctx, for the registry's answer; the returned function sends heartbeats until the stream
// ends and returns why it ended.
func (r *registrar) register(ctx, streamCtx context.Context) (func() error, error) {
	sctx, cancel := context.WithCancel(streamCtx)
	stream, err := r.cli.RegisterExecutor(sctx, grpc.WaitForReady(true))
	if err != nil {
		cancel()
		return nil, err
	}
	if err := stream.Send(&registryv1.RegisterExecutorRequest{Executor: r.reg}); err != nil {
		cancel()
		_, err = stream.Recv() // the status the stream ended with
		return nil, err
	}
	first := make(chan error, 1)
	var resp *registryv1.RegisterExecutorResponse
	go func() {
		var err error
		resp, err = stream.Recv()
		first <- err
	}()
	select {
	case err := <-first:
		if err != nil {
			cancel()
			return nil, err
		}
	case <-ctx.Done():
		cancel()
		return nil, ctx.Err()
	}
	interval := time.Duration(resp.GetHeartbeatIntervalMs()) * time.Millisecond
	if interval <= 0 {
		interval = time.Second
	}
	return func() error {
		defer cancel()
		answers := make(chan error, 1)
		go func() {
			for {
				if _, err := stream.Recv(); err != nil {
					answers <- err
					return
				}
			}
		}()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case err := <-answers:
				return err
			case <-t.C:
				if err := stream.Send(&registryv1.RegisterExecutorRequest{}); err != nil {
					return <-answers
				}
			case <-streamCtx.Done():
				return streamCtx.Err()
			}
		}
	}, nil
}

// keep runs the heartbeats and registers again whenever the stream ends, until ctx ends.
func (r *registrar) keep(ctx context.Context, beats func() error) {
	for {
		err := beats()
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, io.EOF) {
			err = errors.New("the registry ended the registration")
		}
		r.log.Warn("executor registration lost; registering again", "executor", r.key, "reason", err)
		backoff := 100 * time.Millisecond
		for {
			beats, err = r.register(ctx, ctx)
			if err == nil {
				r.log.Info("executor registered again", "executor", r.key)
				break
			}
			if ctx.Err() != nil {
				return
			}
			r.log.Warn("registering executor failed; retrying", "executor", r.key, "error", err, "backoff", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, 5*time.Second)
		}
	}
}

// stop ends the registration by cancelling its stream: the registry revokes the executor's
// lease at once, as it does for a stream closed cleanly. (Not CloseSend: a heartbeat may be in
// Send on keep's goroutine, and a gRPC stream does not allow CloseSend concurrently with Send.)
func (r *registrar) stop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	<-r.done
	r.log.Info("executor deregistered", "executor", r.key)
}
