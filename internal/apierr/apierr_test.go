package apierr_test

import (
	"errors"
	"fmt"
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
	// A status with bounded details keeps them.
	st := status.New(codes.InvalidArgument, "bad: "+fmt.Sprintf("%q", long))
	st, _ = st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "name", Description: "got " + fmt.Sprintf("%q", long)}}})
	got, _ := status.FromError(apierr.ToStatus(st.Err()))
	if d := got.Details(); len(d) != 1 || len(d[0].(*errdetails.BadRequest).GetFieldViolations()[0].GetDescription()) > 300 {
		t.Errorf("details after bounding: %v, want the one violation, bounded", d)
	}
}
