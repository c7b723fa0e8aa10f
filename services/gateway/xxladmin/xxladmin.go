// Package xxladmin serves the part of XXL-JOB's admin API that unchanged XXL-JOB executors
// (xxl-job-core) call: POST {context}/api/registry, api/registryRemove and api/callback. So an
// executor configured with jobmesh's address as its admin joins its group's live view in the
// registry and reports its runs' results to the scheduler, which sent them.
//
// Every answer is HTTP 200 with XXL-JOB's ReturnT JSON: {"code":200} or {"code":500,"msg":"…"};
// an executor reads only code, retries a failed callback and registers again in its next round.
package xxladmin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
	"github.com/jobmesh/jobmesh/internal/xxl"
)

// Defaults of Config.
const (
	// DefaultContextPath is XXL-JOB's own, so "http://HOST:8080/xxl-job-admin" is an admin address.
	DefaultContextPath = "/xxl-job-admin"
	// DefaultDeadTime is XXL-JOB's: an executor leaves 90 s after its last registry call.
	DefaultDeadTime = 90 * time.Second
	// DefaultMaxBodyBytes bounds a request body.
	DefaultMaxBodyBytes = 4 << 20
	// MinDeadTime and MaxDeadTime bound DeadTime as the registry does
	// (RegisterXxlExecutorRequest.dead_time_seconds).
	MinDeadTime = 10 * time.Second
	MaxDeadTime = time.Hour
)

// TokenHeader is the header XXL-JOB's access token travels in.
const TokenHeader = xxl.TokenHeader

// Messages XXL-JOB's admin answers with, which executors log.
const (
	msgWrongToken = xxl.MsgTokenWrong
	msgIllegalArg = "Illegal Argument."
	msgBadMethod  = xxl.MsgMethodNotAllow
)

// TokenChecker checks an executor's access token against its group's (auth.ExecutorTokens).
type TokenChecker interface {
	// Check reports whether app's group has a token of its own (and token is it); for a group
	// without one, token must be fallback (anything when fallback is empty). Errors: NotFound
	// for an unknown app, Unauthenticated for a wrong token.
	Check(ctx context.Context, app, token, fallback string) (grouped bool, err error)
}

// Config is what the API needs.
type Config struct {
	// ContextPath is where the API is served: "{ContextPath}/api/registry" and so on. It starts
	// with "/" and has no trailing "/". Default DefaultContextPath.
	ContextPath string
	// AccessToken is the token executors of groups without one of their own present; empty with
	// such a group means no token is needed (as in XXL-JOB with no accessToken).
	AccessToken string
	// DeadTime is how long a registration lives after the executor's last registry call, in whole
	// seconds. Default DefaultDeadTime.
	DeadTime time.Duration
	// MaxBodyBytes bounds a request body; a longer one is refused unread. Default
	// DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Registry and Scheduler are the services, reached with the internal token. Required.
	Registry  registryv1.RegistryServiceClient
	Scheduler schedulerv1.SchedulerServiceClient
	// Tokens checks executors' tokens. Required.
	Tokens TokenChecker
	// Logger receives refusals and failures (never tokens); nil discards them.
	Logger *slog.Logger
}

var contextPath = regexp.MustCompile(`^(/[A-Za-z0-9._~-]+)+$`)

// CheckContextPath checks a context path as Config.ContextPath wants it.
func CheckContextPath(p string) error {
	if !contextPath.MatchString(p) {
		return fmt.Errorf("context path %q: want a path such as %q (segments of [A-Za-z0-9._~-], no trailing /)", p, DefaultContextPath)
	}
	if first, _, _ := strings.Cut(p[1:], "/"); first == "api" || first == "healthz" {
		return fmt.Errorf("context path %q: /%s is the gateway's own", p, first)
	}
	return nil
}

// CheckDeadTime checks a dead time as Config.DeadTime wants it.
func CheckDeadTime(d time.Duration) error {
	if d < MinDeadTime || d > MaxDeadTime || d%time.Second != 0 {
		return fmt.Errorf("dead time %v: want whole seconds from %v to %v", d, MinDeadTime, MaxDeadTime)
	}
	return nil
}

// Handler serves the API. Mount it at ContextPath()+"/".
type Handler struct {
	cfg Config
	log *slog.Logger
}

// New checks cfg and returns the API's handler.
func New(cfg Config) (*Handler, error) {
	if cfg.ContextPath == "" {
		cfg.ContextPath = DefaultContextPath
	}
	if err := CheckContextPath(cfg.ContextPath); err != nil {
		return nil, fmt.Errorf("xxladmin: %w", err)
	}
	if cfg.DeadTime == 0 {
		cfg.DeadTime = DefaultDeadTime
	}
	if err := CheckDeadTime(cfg.DeadTime); err != nil {
		return nil, fmt.Errorf("xxladmin: %w", err)
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.MaxBodyBytes < 0 {
		return nil, fmt.Errorf("xxladmin: max body bytes %d: want a positive size", cfg.MaxBodyBytes)
	}
	if cfg.Registry == nil || cfg.Scheduler == nil || cfg.Tokens == nil {
		return nil, errors.New("xxladmin: registry, scheduler and token checker are required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Handler{cfg: cfg, log: log}, nil
}

// ContextPath is where the API is served.
func (h *Handler) ContextPath() string { return h.cfg.ContextPath }

// Owns reports whether an HTTP request path is the API's (the gateway's edge lets the API bound
// such bodies itself, to answer in XXL-JOB's style).
func (h *Handler) Owns(path string) bool {
	return path == h.cfg.ContextPath || strings.HasPrefix(path, h.cfg.ContextPath+"/")
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	uri := strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, h.cfg.ContextPath), "/")
	if r.Method != http.MethodPost {
		h.reply(w, r, fail(msgBadMethod))
		return
	}
	var serve func(context.Context, []byte, string) xxl.ReturnT
	switch uri {
	case "api/registry":
		serve = h.registry
	case "api/registryRemove":
		serve = h.registryRemove
	case "api/callback":
		serve = h.callback
	default:
		h.reply(w, r, fail("invalid request, uri-mapping("+apierr.Clip(uri)+") not found."))
		return
	}
	if r.ContentLength > h.cfg.MaxBodyBytes {
		h.reply(w, r, h.tooLarge())
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		h.reply(w, r, h.tooLarge())
		return
	case err != nil:
		h.reply(w, r, fail("request error: reading the body: "+err.Error()))
		return
	}
	h.reply(w, r, serve(r.Context(), body, r.Header.Get(TokenHeader)))
}

func (h *Handler) tooLarge() xxl.ReturnT {
	return fail(fmt.Sprintf("request error: body larger than %d bytes", h.cfg.MaxBodyBytes))
}

func fail(msg string) xxl.ReturnT { return xxl.ReturnT{Code: xxl.CodeFail, Msg: msg} }

var ok = xxl.ReturnT{Code: xxl.CodeSuccess}

// reply writes t with HTTP 200, as XXL-JOB's admin does for every answer.
func (h *Handler) reply(w http.ResponseWriter, r *http.Request, t xxl.ReturnT) {
	if t.Code != xxl.CodeSuccess {
		h.log.InfoContext(r.Context(), "XXL-JOB admin API call refused", "path", r.URL.Path, "remote_addr", r.RemoteAddr, "msg", t.Msg)
	}
	b, _ := xxl.Marshal(t) // as Gson writes it
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// parseRegistry decodes a RegistryParam and checks it as XXL-JOB's admin does.
func parseRegistry(body []byte) (xxl.RegistryParam, *xxl.ReturnT) {
	var p xxl.RegistryParam
	if err := xxl.Unmarshal(body, &p); err != nil {
		r := badBody(err)
		return p, &r
	}
	if p.RegistryGroup == "" || p.RegistryKey == "" || p.RegistryValue == "" {
		r := fail(msgIllegalArg)
		return p, &r
	}
	if p.RegistryGroup != "EXECUTOR" {
		r := fail(fmt.Sprintf("registryGroup %q: jobmesh keeps only executors (EXECUTOR)", apierr.Clip(p.RegistryGroup)))
		return p, &r
	}
	return p, nil
}

// registry registers (or renews) an executor in its group's live view.
func (h *Handler) registry(ctx context.Context, body []byte, token string) xxl.ReturnT {
	p, bad := parseRegistry(body)
	if bad != nil {
		return *bad
	}
	grouped, refused := h.checkToken(ctx, p.RegistryKey, token)
	if refused != nil {
		return *refused
	}
	credited := "" // a group without a token of its own: its executors carry none
	if grouped {
		credited = token
	}
	_, err := h.cfg.Registry.RegisterXxlExecutor(ctx, &registryv1.RegisterXxlExecutorRequest{
		AppName: p.RegistryKey, Address: p.RegistryValue, AccessToken: credited,
		DeadTimeSeconds: int32(h.cfg.DeadTime / time.Second),
	})
	if err != nil {
		return fail("registry failed: " + status.Convert(err).Message())
	}
	return ok
}

// registryRemove takes an executor out of the live view.
func (h *Handler) registryRemove(ctx context.Context, body []byte, token string) xxl.ReturnT {
	p, bad := parseRegistry(body)
	if bad != nil {
		return *bad
	}
	if _, refused := h.checkToken(ctx, p.RegistryKey, token); refused != nil {
		return *refused
	}
	_, err := h.cfg.Registry.RemoveXxlExecutor(ctx, &registryv1.RemoveXxlExecutorRequest{
		AppName: p.RegistryKey, Address: p.RegistryValue,
	})
	if err != nil {
		return fail("registryRemove failed: " + status.Convert(err).Message())
	}
	return ok // removing what is not registered is done too, as in XXL-JOB
}

// checkToken checks token against app's group; a refusal is the answer to send.
func (h *Handler) checkToken(ctx context.Context, app, token string) (grouped bool, refused *xxl.ReturnT) {
	grouped, err := h.cfg.Tokens.Check(ctx, app, token, h.cfg.AccessToken)
	switch status.Code(err) {
	case codes.OK:
		return grouped, nil
	case codes.Unauthenticated, codes.PermissionDenied:
		r := fail(msgWrongToken)
		return false, &r
	}
	r := fail(status.Convert(err).Message())
	return false, &r
}

// maxCallbackItems is the most items one callback may carry (XxlCallbackRequest's bound).
const maxCallbackItems = 10000

// callbackChunkBytes bounds the messages of one XxlCallback call, well under gRPC's 4 MiB.
const callbackChunkBytes = 1 << 20

// callback hands a callback list to the scheduler, which checks the token per item's group and
// applies each item once; the answer is 200 only when every item is applied (now or before).
func (h *Handler) callback(ctx context.Context, body []byte, token string) xxl.ReturnT {
	list, err := xxl.UnmarshalCallbacks(body)
	if err != nil {
		return badBody(err)
	}
	if len(list) == 0 {
		return ok // nothing to apply, as XXL-JOB answers
	}
	if len(list) > maxCallbackItems {
		return fail(fmt.Sprintf("request error: %d callback items, at most %d in one list", len(list), maxCallbackItems))
	}
	items := make([]*schedulerv1.XxlCallbackItem, len(list))
	for i, p := range list {
		if p.HandleCode < -1<<31 || p.HandleCode > 1<<31-1 {
			return fail(fmt.Sprintf("request error: item %d: handleCode %d is not an int", i, p.HandleCode))
		}
		items[i] = &schedulerv1.XxlCallbackItem{LogId: p.LogID, LogDateTime: p.LogDateTim, HandleCode: int32(p.HandleCode), HandleMsg: p.HandleMsg}
	}
	applied := make(map[int64]bool, len(items))
	var unknown []int64
	for _, chunk := range chunks(items) {
		resp, err := h.cfg.Scheduler.XxlCallback(ctx, &schedulerv1.XxlCallbackRequest{Items: chunk, AccessToken: token})
		switch status.Code(err) {
		case codes.OK:
		case codes.Unauthenticated, codes.PermissionDenied:
			h.log.InfoContext(ctx, "XXL-JOB callback refused", "reason", status.Convert(err).Message())
			return fail(msgWrongToken)
		default:
			return fail("callback not stored: " + status.Convert(err).Message())
		}
		for _, id := range resp.GetAppliedLogIds() {
			applied[id] = true
		}
		unknown = append(unknown, resp.GetUnknownLogIds()...)
	}
	var missing []int64
	for _, it := range items {
		if !applied[it.LogId] && !containsID(unknown, it.LogId) {
			missing = append(missing, it.LogId)
		}
	}
	var msgs []string
	if len(unknown) > 0 {
		msgs = append(msgs, "unknown logId "+ids(unknown)+": no run was sent under it")
	}
	if len(missing) > 0 {
		msgs = append(msgs, "logId "+ids(missing)+" not applied")
	}
	if len(msgs) > 0 {
		return fail(strings.Join(msgs, "; "))
	}
	return ok
}

// chunks splits items into calls whose messages stay under callbackChunkBytes.
func chunks(items []*schedulerv1.XxlCallbackItem) [][]*schedulerv1.XxlCallbackItem {
	var out [][]*schedulerv1.XxlCallbackItem
	start, size := 0, 0
	for i, it := range items {
		n := len(it.HandleMsg) + 64
		if i > start && size+n > callbackChunkBytes {
			out = append(out, items[start:i])
			start, size = i, 0
		}
		size += n
	}
	return append(out, items[start:])
}

func containsID(ids []int64, id int64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// ids lists log ids for a message, at most 20 of them.
func ids(v []int64) string {
	const most = 20
	parts := make([]string, 0, min(len(v), most)+1)
	for i, id := range v {
		if i == most {
			parts = append(parts, fmt.Sprintf("and %d more", len(v)-most))
			break
		}
		parts = append(parts, strconv.FormatInt(id, 10))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// badBody is the answer to a body that is not the JSON expected.
func badBody(err error) xxl.ReturnT {
	return fail("request error: body is not the JSON expected: " + apierr.Clip(err.Error()))
}
