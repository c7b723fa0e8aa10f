// Package apierr holds the domain errors every jobmesh service returns and the one place they
// become gRPC statuses, so a REST client gets the same code and field name a gRPC client gets.
package apierr

import (
	"context"
	"errors"
	"fmt"
	"strings"

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
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var fe *FieldError
	var fs Fields
	switch {
	case errors.As(err, &fs):
		return badRequest(err.Error(), fs...)
	case errors.As(err, &fe):
		return badRequest(err.Error(), fe)
	case errors.Is(err, ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, ErrConflict):
		return status.Error(codes.Aborted, err.Error())
	case errors.Is(err, ErrAlreadyExists):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, ErrFailedPrecondition):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, ErrUnavailable):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

func badRequest(msg string, fields ...*FieldError) error {
	st := status.New(codes.InvalidArgument, msg)
	br := &errdetails.BadRequest{}
	for _, f := range fields {
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: f.Field, Description: f.Reason})
	}
	if d, err := st.WithDetails(br); err == nil {
		st = d
	}
	return st.Err()
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
