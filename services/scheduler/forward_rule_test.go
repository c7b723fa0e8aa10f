package scheduler

import (
	"context"
	"testing"

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
