package scheduler

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestUnanswered: a forwarded trigger's forwarder tries to claim the fire only when the call may
// have failed without the leader's answer and the caller still waits.
func TestUnanswered(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		caller error
		want   bool
	}{
		{"unreachable", status.Error(codes.Unavailable, "connection refused"), nil, true},
		{"no answer in time", status.Error(codes.DeadlineExceeded, "deadline"), nil, true},
		{"the connection cut after the leader took it", status.Error(codes.Unavailable, "transport is closing"), nil, true},
		{"the caller's deadline", status.Error(codes.DeadlineExceeded, "deadline"), context.DeadlineExceeded, false},
		{"the caller went away", status.Error(codes.Unavailable, "closing"), context.Canceled, false},
		{"the leader's answer", status.Error(codes.NotFound, "job 7"), nil, false},
		{"the leader lost the claim", status.Error(codes.FailedPrecondition, "claimed"), nil, false},
		{"refused by the leader's guard", status.Error(codes.Unauthenticated, "token"), nil, false},
	} {
		if got := unanswered(tc.err, tc.caller); got != tc.want {
			t.Errorf("%s: unanswered = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestForwardingNeedsFromReplica: a replica that forwards triggers must be able to take the
// others' forwarded calls; without FromReplica each would be refused PermissionDenied.
func TestForwardingNeedsFromReplica(t *testing.T) {
	cfg := Config{PeerDialOptions: []grpc.DialOption{}}
	cfg.setDefaults()
	if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "FromReplica") {
		t.Errorf("validate without FromReplica = %v, want an error naming it", err)
	}
	cfg.FromReplica = func(context.Context) bool { return true }
	if err := cfg.validate(); err != nil {
		t.Errorf("validate with FromReplica = %v", err)
	}
}
