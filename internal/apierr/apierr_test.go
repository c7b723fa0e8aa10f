package apierr_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jobmesh/jobmesh/internal/apierr"
)

func TestClip(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 1<<20)
	for _, c := range []struct{ in, want string }{
		{"short", "short"},
		{strings.Repeat("b", 200), strings.Repeat("b", 200)},
		{long, strings.Repeat("a", 200) + "…(1048576 bytes)"},
		{strings.Repeat("é", 150), strings.Repeat("é", 100) + "…(300 bytes)"},
	} {
		if got := apierr.Clip(c.in); got != c.want {
			t.Errorf("Clip(%.20q… %d bytes) = %.40q… (%d bytes), want %.40q… (%d bytes)", c.in, len(c.in), got, len(got), c.want, len(c.want))
		}
	}
}

// TestToStatusBoundsEchoes: a megabyte of input echoed by an error comes back as 200 bytes and
// its length, in the message and the field violations, whatever made the error.
func TestToStatusBoundsEchoes(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 1<<20)
	var fs apierr.Fields
	fs.Add("alarm_emails[0]", "not an email address: %q", long)
	for name, err := range map[string]error{
		"a field error":    apierr.Field("time_zone", "unknown IANA time zone %q", long),
		"several fields":   fs,
		"a sentinel":       fmt.Errorf("executor group with app_name %q: %w", long, apierr.ErrAlreadyExists),
		"a status":         status.Errorf(codes.InvalidArgument, "trigger_id %q: want 1-128 of [A-Za-z0-9_.:-]", long),
		"an unknown error": errors.New("store said " + fmt.Sprintf("%q", long)),
	} {
		st, _ := status.FromError(apierr.ToStatus(err))
		size := len(st.Message())
		for _, d := range st.Details() {
			if br, ok := d.(*errdetails.BadRequest); ok {
				for _, v := range br.GetFieldViolations() {
					size += len(v.GetDescription())
				}
			}
		}
		if size > 2*apierr.MaxMessage || !strings.Contains(st.Message(), "…(1048576 bytes)") {
			t.Errorf("%s: message of %d bytes (%.300q), want the value cut to %d bytes and its length", name, size, st.Message(), apierr.MaxEcho)
		}
	}
	// A status with bounded details keeps them, and gets its ErrorInfo first.
	st := status.New(codes.InvalidArgument, "bad: "+fmt.Sprintf("%q", long))
	st, _ = st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "name", Description: "got " + fmt.Sprintf("%q", long)}}})
	got, _ := status.FromError(apierr.ToStatus(st.Err()))
	d := got.Details()
	if len(d) != 2 || len(d[1].(*errdetails.BadRequest).GetFieldViolations()[0].GetDescription()) > 300 {
		t.Errorf("details after bounding: %v, want the ErrorInfo and the one violation, bounded", d)
	}
}

// TestEveryErrorHasAReason: whatever a handler returns, the status has an ErrorInfo of
// jobmesh's domain: the specific reason where the error has one, else its code's name.
func TestEveryErrorHasAReason(t *testing.T) {
	t.Parallel()
	var two apierr.Fields
	two.Add("name", "required")
	two.Add("schedule.expression", "bad")
	for _, c := range []struct {
		name       string
		err        error
		code       codes.Code
		reason     string
		field      string
		violations int
	}{
		{"a job not found", fmt.Errorf("job 7: %w", apierr.ErrJobNotFound), codes.NotFound, "JOB_NOT_FOUND", "", 0},
		{"a stale version", fmt.Errorf("job 7: %w", apierr.ErrVersionConflict), codes.Aborted, "VERSION_CONFLICT", "", 0},
		{"a taken app name", fmt.Errorf("group: %w", apierr.ErrExecutorGroupExists), codes.AlreadyExists, "EXECUTOR_GROUP_EXISTS", "", 0},
		{"the last admin", fmt.Errorf("user 1: %w", apierr.ErrLastAdmin), codes.FailedPrecondition, "LAST_ADMIN", "", 0},
		{"a bare sentinel", fmt.Errorf("thing 7: %w", apierr.ErrNotFound), codes.NotFound, "NOT_FOUND", "", 0},
		{"unavailable", fmt.Errorf("%w: store down", apierr.ErrUnavailable), codes.Unavailable, "UNAVAILABLE", "", 0},
		{"a field", apierr.Field("time_zone", "unknown"), codes.InvalidArgument, "INVALID_ARGUMENT", "time_zone", 1},
		{"fields", two, codes.InvalidArgument, "INVALID_ARGUMENT", "name", 2},
		{"a status without one", status.Error(codes.Unavailable, "connection refused"), codes.Unavailable, "UNAVAILABLE", "", 0},
		{"a status with one", apierr.Status(codes.Unauthenticated, apierr.ReasonTokenMissing, "missing bearer token"), codes.Unauthenticated, "TOKEN_MISSING", "", 0},
		{"a wrapped status", fmt.Errorf("calling: %w", apierr.Status(codes.PermissionDenied, apierr.ReasonRoleRequired, "no")), codes.PermissionDenied, "ROLE_REQUIRED", "", 0},
		{"an unknown error", errors.New("boom"), codes.Internal, "INTERNAL", "", 0},
		{"a canceled call", context.Canceled, codes.Canceled, "CANCELLED", "", 0},
	} {
		err := apierr.ToStatus(c.err)
		st, _ := status.FromError(err)
		info := apierr.Info(err)
		if st.Code() != c.code || info == nil || info.GetReason() != c.reason || info.GetDomain() != apierr.Domain || info.GetMetadata()["field"] != c.field {
			t.Errorf("%s: ToStatus = %v %v, want %v with reason %s, domain %s, field %q", c.name, st.Code(), info, c.code, c.reason, apierr.Domain, c.field)
		}
		var br *errdetails.BadRequest
		for _, d := range st.Details() {
			if b, ok := d.(*errdetails.BadRequest); ok {
				br = b
			}
		}
		if len(br.GetFieldViolations()) != c.violations {
			t.Errorf("%s: field violations %v, want %d", c.name, br.GetFieldViolations(), c.violations)
		}
		if again := apierr.ToStatus(err); len(status.Convert(again).Details()) != len(st.Details()) {
			t.Errorf("%s: a second ToStatus changed the details: %v, want %v", c.name, status.Convert(again).Details(), st.Details())
		}
	}
	if !errors.Is(fmt.Errorf("job 7: %w", apierr.ErrJobNotFound), apierr.ErrNotFound) {
		t.Error("ErrJobNotFound is not an ErrNotFound")
	}
}

// TestBoundingKeepsTheReason: a message cut for length keeps its ErrorInfo.
func TestBoundingKeepsTheReason(t *testing.T) {
	t.Parallel()
	long := fmt.Sprintf("%q", strings.Repeat("x", 10000))
	err := apierr.ToStatus(apierr.Status(codes.NotFound, apierr.ReasonRunNotFound, "run "+long))
	if info := apierr.Info(err); info.GetReason() != "RUN_NOT_FOUND" || len(status.Convert(err).Message()) > 300 {
		t.Errorf("bounded status: %q, info %v; want it short with RUN_NOT_FOUND", status.Convert(err).Message(), info)
	}
}

// TestReasonsAreDocumented: docs/auth.md's table lists every specific reason.
func TestReasonsAreDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/auth.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range apierr.Reasons {
		if !strings.Contains(string(doc), "| `"+r+"` |") {
			t.Errorf("docs/auth.md has no row for reason %s", r)
		}
	}
}
