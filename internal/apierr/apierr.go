// Package apierr holds the domain errors every jobmesh service returns and the one place they
// become gRPC statuses, so a REST client gets the same code and field name a gRPC client gets.
package apierr

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinels for the errors callers act on; wrap them with context (fmt.Errorf("job 7: %w", ErrNotFound)).
var (
	// ErrNotFound: the named resource does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: a stale version, or the change collides with the current state.
	ErrConflict = errors.New("conflict")
	// ErrAlreadyExists: a resource with the same unique key exists.
	ErrAlreadyExists = errors.New("already exists")
	// ErrUnavailable: a dependency (store, leader, executor) cannot be reached now; retry.
	ErrUnavailable = errors.New("unavailable")
	// ErrFailedPrecondition: the resource is not in a state that allows the operation.
	ErrFailedPrecondition = errors.New("failed precondition")
)

// FieldError is invalid input in one named field. Field uses the proto field path
// ("schedule.expression", "timeout_seconds").
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Field returns a FieldError for field with a formatted reason.
func Field(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Fields collects several FieldErrors, so a form can show every problem at once.
type Fields []*FieldError

// Add records a problem with field.
func (fs *Fields) Add(field, format string, args ...any) {
	*fs = append(*fs, &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)})
}

// Err returns nil when nothing was recorded, else the errors as one error.
func (fs Fields) Err() error {
	if len(fs) == 0 {
		return nil
	}
	return fs
}

func (fs Fields) Error() string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = f.Error()
	}
	return strings.Join(parts, "; ")
}

// ToStatus turns an error into a gRPC status error; errors already carrying a status pass
// through. Unknown errors become Internal with the error text, which never holds secrets.
//
// Messages echo request values ("got %q"); a value longer than MaxEcho bytes is cut to MaxEcho
// and marked with its length, and a whole message to MaxMessage, so a megabyte of input never
// comes back in an error.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if st, ok := status.FromError(err); ok {
		return boundStatus(st, err)
	}
	var fe *FieldError
	var fs Fields
	switch {
	case errors.As(err, &fs):
		return badRequest(err.Error(), fs...)
	case errors.As(err, &fe):
		return badRequest(err.Error(), fe)
	case errors.Is(err, ErrNotFound):
		return status.Error(codes.NotFound, Bound(err.Error()))
	case errors.Is(err, ErrConflict):
		return status.Error(codes.Aborted, Bound(err.Error()))
	case errors.Is(err, ErrAlreadyExists):
		return status.Error(codes.AlreadyExists, Bound(err.Error()))
	case errors.Is(err, ErrFailedPrecondition):
		return status.Error(codes.FailedPrecondition, Bound(err.Error()))
	case errors.Is(err, ErrUnavailable):
		return status.Error(codes.Unavailable, Bound(err.Error()))
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Internal, Bound(err.Error()))
}

func badRequest(msg string, fields ...*FieldError) error {
	st := status.New(codes.InvalidArgument, Bound(msg))
	br := &errdetails.BadRequest{}
	for _, f := range fields {
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: Bound(f.Field), Description: Bound(f.Reason)})
	}
	if d, err := st.WithDetails(br); err == nil {
		st = d
	}
	return st.Err()
}

// Limits of what an error message echoes.
const (
	// MaxEcho is the longest quoted value a message keeps whole.
	MaxEcho = 200
	// MaxMessage is the longest message.
	MaxMessage = 2048
)

// quoted matches a Go-quoted string, as %q writes it.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// Bound shortens msg for a client: every quoted value longer than MaxEcho is cut (Clip), then
// the whole to MaxMessage. Short messages are returned as they are.
func Bound(msg string) string {
	if len(msg) <= MaxEcho {
		return msg
	}
	msg = quoted.ReplaceAllStringFunc(msg, func(q string) string {
		if len(q) <= MaxEcho+2 {
			return q
		}
		return `"` + Clip(q[1:len(q)-1]) + `"`
	})
	return clipTo(msg, MaxMessage)
}

// Clip returns s whole when it has at most MaxEcho bytes, else its first MaxEcho bytes (on a
// rune boundary) followed by "…(N bytes)", N being len(s).
func Clip(s string) string { return clipTo(s, MaxEcho) }

func clipTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…(" + strconv.Itoa(len(s)) + " bytes)"
}

// boundStatus returns err, or a copy of its status with the message and any field violations
// bounded when they are too long.
func boundStatus(st *status.Status, err error) error {
	p := st.Proto()
	long := len(p.GetMessage()) > MaxEcho
	for _, d := range p.GetDetails() {
		long = long || len(d.GetValue()) > MaxEcho
	}
	if !long {
		return err
	}
	out := status.New(st.Code(), Bound(st.Message()))
	for _, d := range st.Details() {
		br, ok := d.(*errdetails.BadRequest)
		if !ok {
			continue // other details are the server's own, not echoes
		}
		b := &errdetails.BadRequest{}
		for _, v := range br.GetFieldViolations() {
			b.FieldViolations = append(b.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: Bound(v.GetField()), Description: Bound(v.GetDescription())})
		}
		if d, err := out.WithDetails(b); err == nil {
			out = d
		}
	}
	return out.Err()
}

// MaxFilter is the longest text filter a listing accepts, in characters: a filter is a search
// term typed by a person, and a longer one only costs the store.
const MaxFilter = 256

// Filter records a problem with a listing's text filter that is longer than MaxFilter.
func (fs *Fields) Filter(field, value string) {
	if n := len([]rune(value)); n > MaxFilter {
		fs.Add(field, "at most %d characters, got %d", MaxFilter, n)
	}
}
