package scheduler

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestLeaderNeverTook: a forwarded trigger falls back to the forwarder only when the call could
// not be delivered, the leader did not say it took it, and the caller still waits.
func TestLeaderNeverTook(t *testing.T) {
	taken := metadata.Pairs(forwardAckKey, "1")
	for _, tc := range []struct {
		name   string
		err    error
		header metadata.MD
		caller error
		want   bool
	}{
		{"unreachable", status.Error(codes.Unavailable, "connection refused"), nil, nil, true},
		{"no answer in time", status.Error(codes.DeadlineExceeded, "deadline"), nil, nil, true},
		{"unreachable after the leader took it", status.Error(codes.Unavailable, "transport is closing"), taken, nil, false},
		{"deadline after the leader took it", status.Error(codes.DeadlineExceeded, "deadline"), taken, nil, false},
		{"the caller's deadline", status.Error(codes.DeadlineExceeded, "deadline"), nil, context.DeadlineExceeded, false},
		{"the caller went away", status.Error(codes.Unavailable, "closing"), nil, context.Canceled, false},
		{"the leader's answer", status.Error(codes.NotFound, "job 7"), taken, nil, false},
		{"refused by the leader's guard", status.Error(codes.Unauthenticated, "token"), nil, nil, false},
	} {
		if got := leaderNeverTook(tc.err, tc.header, tc.caller); got != tc.want {
			t.Errorf("%s: leaderNeverTook = %v, want %v", tc.name, got, tc.want)
		}
	}
}
