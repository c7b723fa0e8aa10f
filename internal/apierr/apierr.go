// Package apierr holds the domain errors every jobmesh service returns and the one place they
// become gRPC statuses, so a REST client gets the same code, field name and reason a gRPC client
// gets.
//
// Every status an API returns carries a google.rpc.ErrorInfo (domain Domain) whose reason is a
// stable UPPER_SNAKE word that clients branch on: a specific one where the error says which
// (JOB_NOT_FOUND, VERSION_CONFLICT, TOKEN_MISSING, …), else the name of its gRPC code
// (NOT_FOUND, UNAVAILABLE, …). ToStatus adds it; the servers' interceptors (internal/grpcserver)
// and the gateway's error handler run every error through ToStatus, so none leaves without one.
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
	"google.golang.org/protobuf/types/known/anypb"
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

// Domain is the ErrorInfo domain of every jobmesh error.
const Domain = "jobmesh.dev"

// Reasons: the ErrorInfo reasons that say more than the gRPC code. docs/auth.md lists them
// (TestReasonsAreDocumented keeps the list complete).
const (
	// ReasonTokenMissing: the call carries no bearer token (401).
	ReasonTokenMissing = "TOKEN_MISSING"
	// ReasonTokenInvalid: the bearer token is unknown, expired or revoked, or its user is gone (401).
	ReasonTokenInvalid = "TOKEN_INVALID"
	// ReasonLoginFailed: wrong user name or password (401).
	ReasonLoginFailed = "LOGIN_FAILED"
	// ReasonExecutorTokenInvalid: an executor's credential is not its group's access token (401).
	ReasonExecutorTokenInvalid = "EXECUTOR_TOKEN_INVALID"
	// ReasonRoleRequired: the caller's role or kind of credential does not allow the call (403).
	ReasonRoleRequired = "ROLE_REQUIRED"
	// ReasonGroupNotAllowed: the call touches an executor group the caller was not given (403).
	ReasonGroupNotAllowed = "GROUP_NOT_ALLOWED"
	// ReasonNotTokenOwner: the API token belongs to another user (403).
	ReasonNotTokenOwner = "NOT_TOKEN_OWNER"
	// ReasonInvalidArgument: a field of the request is invalid; the ErrorInfo's metadata
	// "field" names the first one and a google.rpc.BadRequest lists them all (400).
	ReasonInvalidArgument = "INVALID_ARGUMENT"
	// ReasonRequestTooLarge: the request body is larger than the gateway accepts (413).
	ReasonRequestTooLarge = "REQUEST_TOO_LARGE"
	// ReasonJobNotFound: no job has the id (404).
	ReasonJobNotFound = "JOB_NOT_FOUND"
	// ReasonGlueVersionNotFound: the job has no GLUE version of that number (404).
	ReasonGlueVersionNotFound = "GLUE_VERSION_NOT_FOUND"
	// ReasonRunNotFound: no run has the id (404).
	ReasonRunNotFound = "RUN_NOT_FOUND"
	// ReasonExecutorGroupNotFound: no executor group has the id (404).
	ReasonExecutorGroupNotFound = "EXECUTOR_GROUP_NOT_FOUND"
	// ReasonUserNotFound: no user has the id or name (404).
	ReasonUserNotFound = "USER_NOT_FOUND"
	// ReasonAPITokenNotFound: no API token has the id (404).
	ReasonAPITokenNotFound = "API_TOKEN_NOT_FOUND"
	// ReasonVersionConflict: the job changed since the version the update was based on (409).
	ReasonVersionConflict = "VERSION_CONFLICT"
	// ReasonExecutorGroupExists: another executor group has the app name (409).
	ReasonExecutorGroupExists = "EXECUTOR_GROUP_EXISTS"
	// ReasonLastAdmin: the change would leave no admin (400).
	ReasonLastAdmin = "LAST_ADMIN"
	// ReasonRunEnded: the run has already ended (400).
	ReasonRunEnded = "RUN_ENDED"
	// ReasonLoginThrottled: too many failed password attempts; retry after the lockout (429).
	ReasonLoginThrottled = "LOGIN_THROTTLED"
	// ReasonServerBusy: too many password checks or clients at once; retry shortly (429).
	ReasonServerBusy = "SERVER_BUSY"
)

// Reasons lists every specific reason above, for documentation and tests.
var Reasons = []string{
	ReasonTokenMissing, ReasonTokenInvalid, ReasonLoginFailed, ReasonExecutorTokenInvalid,
	ReasonRoleRequired, ReasonGroupNotAllowed, ReasonNotTokenOwner,
	ReasonInvalidArgument, ReasonRequestTooLarge,
	ReasonJobNotFound, ReasonGlueVersionNotFound, ReasonRunNotFound, ReasonExecutorGroupNotFound,
	ReasonUserNotFound, ReasonAPITokenNotFound,
	ReasonVersionConflict, ReasonExecutorGroupExists,
	ReasonLastAdmin, ReasonRunEnded,
	ReasonLoginThrottled, ReasonServerBusy,
}

// CodeReason is the reason of an error that has no more specific one: its gRPC code's name in
// UPPER_SNAKE (NOT_FOUND, UNAVAILABLE, …).
func CodeReason(c codes.Code) string {
	if r, ok := codeReasons[c]; ok {
		return r
	}
	return "UNKNOWN"
}

var codeReasons = map[codes.Code]string{
	codes.Canceled: "CANCELLED", codes.Unknown: "UNKNOWN", codes.InvalidArgument: ReasonInvalidArgument,
	codes.DeadlineExceeded: "DEADLINE_EXCEEDED", codes.NotFound: "NOT_FOUND", codes.AlreadyExists: "ALREADY_EXISTS",
	codes.PermissionDenied: "PERMISSION_DENIED", codes.ResourceExhausted: "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION", codes.Aborted: "ABORTED", codes.OutOfRange: "OUT_OF_RANGE",
	codes.Unimplemented: "UNIMPLEMENTED", codes.Internal: "INTERNAL", codes.Unavailable: "UNAVAILABLE",
	codes.DataLoss: "DATA_LOSS", codes.Unauthenticated: "UNAUTHENTICATED",
}

// Error is a sentinel made specific by a reason. Wrap it as the sentinel it refines:
// fmt.Errorf("job %d: %w", id, ErrJobNotFound); errors.Is(err, ErrNotFound) still holds.
type Error struct {
	// Kind is the sentinel refined (ErrNotFound, ErrConflict, …).
	Kind error
	// Reason is the ErrorInfo reason.
	Reason string
}

func (e *Error) Error() string { return e.Kind.Error() }

// Unwrap returns Kind.
func (e *Error) Unwrap() error { return e.Kind }

// The sentinels with their reasons.
var (
	ErrJobNotFound           = &Error{ErrNotFound, ReasonJobNotFound}
	ErrGlueVersionNotFound   = &Error{ErrNotFound, ReasonGlueVersionNotFound}
	ErrRunNotFound           = &Error{ErrNotFound, ReasonRunNotFound}
	ErrExecutorGroupNotFound = &Error{ErrNotFound, ReasonExecutorGroupNotFound}
	ErrUserNotFound          = &Error{ErrNotFound, ReasonUserNotFound}
	ErrAPITokenNotFound      = &Error{ErrNotFound, ReasonAPITokenNotFound}
	ErrVersionConflict       = &Error{ErrConflict, ReasonVersionConflict}
	ErrExecutorGroupExists   = &Error{ErrAlreadyExists, ReasonExecutorGroupExists}
	ErrLastAdmin             = &Error{ErrFailedPrecondition, ReasonLastAdmin}
	ErrRunEnded              = &Error{ErrFailedPrecondition, ReasonRunEnded}
)

// Status returns a status error with code, msg and an ErrorInfo of reason; kv are metadata
// pairs (key, value, …).
func Status(code codes.Code, reason, msg string, kv ...string) error {
	return withInfo(status.New(code, msg), reason, kv...).Err()
}

// Statusf is Status with a formatted message.
func Statusf(code codes.Code, reason, format string, args ...any) error {
	return Status(code, reason, fmt.Sprintf(format, args...))
}

// Info returns the ErrorInfo of err's status; nil when it has none.
func Info(err error) *errdetails.ErrorInfo {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

// withInfo returns st with an ErrorInfo of reason (CodeReason when empty) added, unless it has
// one.
func withInfo(st *status.Status, reason string, kv ...string) *status.Status {
	if st.Code() == codes.OK || hasInfo(st) {
		return st
	}
	if reason == "" {
		reason = CodeReason(st.Code())
	}
	info := &errdetails.ErrorInfo{Reason: reason, Domain: Domain}
	for i := 0; i+1 < len(kv); i += 2 {
		if info.Metadata == nil {
			info.Metadata = map[string]string{}
		}
		info.Metadata[kv[i]] = kv[i+1]
	}
	a, err := anypb.New(info)
	if err != nil {
		return st
	}
	// st.Proto is a copy; the ErrorInfo goes first, where clients look.
	p := st.Proto()
	p.Details = append([]*anypb.Any{a}, p.Details...)
	return status.FromProto(p)
}

// Type URLs of the details looked at.
var (
	errorInfoURL  = "type.googleapis.com/" + string((&errdetails.ErrorInfo{}).ProtoReflect().Descriptor().FullName())
	badRequestURL = "type.googleapis.com/" + string((&errdetails.BadRequest{}).ProtoReflect().Descriptor().FullName())
)

func hasInfo(st *status.Status) bool {
	for _, d := range st.Proto().GetDetails() {
		if d.GetTypeUrl() == errorInfoURL {
			return true
		}
	}
	return false
}

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

// ToStatus turns an error into a gRPC status error with an ErrorInfo; errors already carrying a
// status keep their code and message (and their ErrorInfo, or get one named after the code).
// Unknown errors become Internal with the error text, which never holds secrets.
//
// Messages echo request values ("got %q"); a value longer than MaxEcho bytes is cut to MaxEcho
// and marked with its length, and a whole message to MaxMessage, so a megabyte of input never
// comes back in an error.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if st, ok := status.FromError(err); ok {
		b := boundStatus(st)
		if b == st && hasInfo(st) {
			return err
		}
		return withInfo(b, "").Err()
	}
	reason := ""
	var re *Error
	if errors.As(err, &re) {
		reason = re.Reason
	}
	code := codes.Internal
	var fe *FieldError
	var fs Fields
	switch {
	case errors.As(err, &fs):
		return badRequest(err.Error(), fs...)
	case errors.As(err, &fe):
		return badRequest(err.Error(), fe)
	case errors.Is(err, ErrNotFound):
		code = codes.NotFound
	case errors.Is(err, ErrConflict):
		code = codes.Aborted
	case errors.Is(err, ErrAlreadyExists):
		code = codes.AlreadyExists
	case errors.Is(err, ErrFailedPrecondition):
		code = codes.FailedPrecondition
	case errors.Is(err, ErrUnavailable):
		code = codes.Unavailable
	case errors.Is(err, context.Canceled):
		return Status(codes.Canceled, "", err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return Status(codes.DeadlineExceeded, "", err.Error())
	}
	return Status(code, reason, Bound(err.Error()))
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
	var kv []string
	if len(fields) > 0 {
		kv = []string{"field", Bound(fields[0].Field)}
	}
	return withInfo(st, ReasonInvalidArgument, kv...).Err()
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

// boundStatus returns st, or a copy of it with the message and any field violations bounded
// when they are too long.
func boundStatus(st *status.Status) *status.Status {
	p := st.Proto()
	long := len(p.GetMessage()) > MaxEcho
	for _, d := range p.GetDetails() {
		long = long || len(d.GetValue()) > MaxEcho
	}
	if !long {
		return st
	}
	p.Message = Bound(p.GetMessage())
	for i, d := range p.GetDetails() {
		var br errdetails.BadRequest
		if d.GetTypeUrl() != badRequestURL || d.UnmarshalTo(&br) != nil {
			continue // other details are the server's own, not echoes
		}
		for _, v := range br.GetFieldViolations() {
			v.Field, v.Description = Bound(v.GetField()), Bound(v.GetDescription())
		}
		if a, err := anypb.New(&br); err == nil {
			p.Details[i] = a
		}
	}
	return status.FromProto(p)
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
