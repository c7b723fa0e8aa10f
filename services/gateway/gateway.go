// Package gateway is the edge of jobmesh: REST for every service through grpc-gateway under
// /api/v1, the merged OpenAPI document at /api/openapi.json, health at /healthz, and the web UI,
// all on one HTTP listener.
package gateway

import (
	"context"
	"crypto/tls"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/jobmesh/jobmesh/services/executor-agent/buildinfo"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	authv1 "github.com/jobmesh/jobmesh/gen/jobmesh/auth/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
	"github.com/jobmesh/jobmesh/services/executor-agent/meshtls"
	"github.com/jobmesh/jobmesh/services/gateway/auth"
	"github.com/jobmesh/jobmesh/services/gateway/openapi"
	"github.com/jobmesh/jobmesh/services/gateway/xxladmin"
)

//go:embed ui
var uiFiles embed.FS

// Config says where the gateway listens and where the services are.
type Config struct {
	// ListenAddr is the HTTP address, e.g. "127.0.0.1:8080".
	ListenAddr string
	// SchedulerAddr, RegistryAddr, LogsAddr and AuthAddr are the services' gRPC addresses.
	// AuthAddr may be empty until the auth service exists.
	SchedulerAddr, RegistryAddr, LogsAddr, AuthAddr string
	// Logger receives the gateway's logs; nil discards them.
	Logger *slog.Logger
	// TLS, when set, is the identity the gateway dials the services with (mutual TLS); nil
	// dials plaintext.
	TLS *meshtls.Identity
	// HTTPTLS, when set, makes the HTTP listener serve HTTPS with it (server certificate only:
	// browsers and REST clients authenticate with tokens).
	HTTPTLS *tls.Config
	// TraceURLTemplate turns a run's trace id into a link in the web UI: an http(s) URL in
	// which every "{trace_id}" is replaced by the id, e.g. a Grafana explore URL on Tempo.
	// Empty shows the id without a link.
	TraceURLTemplate string
	// MaxBodyBytes bounds a request body: a longer one is answered 413 before it is read past
	// the limit, decoded or authenticated. Default DefaultMaxBodyBytes (4 MiB).
	MaxBodyBytes int64
	// TrustedProxies are the reverse proxies in front of the gateway whose X-Forwarded-For is
	// believed when finding a client's address (for the login throttle). Empty: the client is
	// the TCP peer.
	TrustedProxies []netip.Prefix
	// InternalToken, when set, is presented to the auth service with the client's address, so
	// the auth service throttles logins by the real client rather than by the gateway
	// (auth.Config.InternalToken).
	InternalToken string
	// Version is the build's version, served as the API document's info.version. Empty means
	// the main module's version in the binary's build information, or "dev" without one.
	Version string
	// XxlContextPath is where the XXL-JOB admin API that XXL-JOB executors call is served
	// (package xxladmin); default "/xxl-job-admin". The API is served only with an
	// InternalToken, which it calls the registry and the scheduler with.
	XxlContextPath string
	// XxlAccessToken is the XXL-JOB access token executors of groups without a token of their
	// own present; empty lets them in with none.
	XxlAccessToken string
	// XxlDeadTime is how long an XXL-JOB executor stays registered after its last registry
	// call; default 90s, 10s to 1h in whole seconds.
	XxlDeadTime time.Duration
}

// DefaultMaxBodyBytes is the default Config.MaxBodyBytes.
const DefaultMaxBodyBytes = 4 << 20

func (c Config) validate() error {
	switch {
	case c.ListenAddr == "":
		return errors.New("gateway: listen addr: required")
	case c.SchedulerAddr == "":
		return errors.New("gateway: scheduler addr: required")
	case c.RegistryAddr == "":
		return errors.New("gateway: registry addr: required")
	case c.LogsAddr == "":
		return errors.New("gateway: logs addr: required")
	case c.MaxBodyBytes < 0:
		return fmt.Errorf("gateway: max body bytes %d: want a positive size", c.MaxBodyBytes)
	}
	if c.XxlContextPath != "" {
		if err := xxladmin.CheckContextPath(c.XxlContextPath); err != nil {
			return fmt.Errorf("gateway: XXL-JOB %w", err)
		}
	}
	if c.XxlDeadTime != 0 {
		if err := xxladmin.CheckDeadTime(c.XxlDeadTime); err != nil {
			return fmt.Errorf("gateway: XXL-JOB %w", err)
		}
	}
	if t := c.TraceURLTemplate; t != "" {
		if u, err := url.Parse(strings.ReplaceAll(t, traceIDPlaceholder, "0")); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("gateway: trace url template %q: want an http or https URL", t)
		}
		if !strings.Contains(t, traceIDPlaceholder) {
			return fmt.Errorf("gateway: trace url template %q: want %s in it", t, traceIDPlaceholder)
		}
	}
	return nil
}

// traceIDPlaceholder is what TraceURLTemplate's trace id replaces.
const traceIDPlaceholder = "{trace_id}"

// Gateway serves HTTP.
type Gateway struct {
	cfg   Config
	log   *slog.Logger
	conns []*grpc.ClientConn
	srv   *http.Server
	ln    net.Listener
	xxl   *xxladmin.Handler // nil without an internal token

	once sync.Once
	done chan error
}

// New dials the services (lazily) and prepares the HTTP handler.
func New(cfg Config) (*Gateway, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	g := &Gateway{cfg: cfg, log: cfg.Logger}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	h, err := g.handler()
	if err != nil {
		g.closeConns()
		return nil, err
	}
	g.srv = &http.Server{Handler: otelhttp.NewHandler(g.guardEdge(h), "gateway"), ReadHeaderTimeout: 10 * time.Second}
	return g, nil
}

func (g *Gateway) dial(addr string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	c, err := grpc.NewClient(addr, append([]grpc.DialOption{g.cfg.TLS.DialOption(),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler())}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("gateway: dial %s: %w", addr, err)
	}
	g.conns = append(g.conns, c)
	return c, nil
}

func (g *Gateway) handler() (http.Handler, error) {
	mux := runtime.NewServeMux(
		runtime.WithErrorHandler(errorHandler),
		// The client's address, for the auth service's login throttle (auth.ClientAddrKey).
		runtime.WithMetadata(func(_ context.Context, r *http.Request) metadata.MD {
			return metadata.Pairs(auth.ClientAddrKey, auth.ClientAddress(r.RemoteAddr, r.Header.Values("X-Forwarded-For"), g.cfg.TrustedProxies))
		}),
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitDefaultValues: true},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
		}),
	)
	ctx := context.Background()
	sched, err := g.dial(g.cfg.SchedulerAddr)
	if err != nil {
		return nil, err
	}
	reg, err := g.dial(g.cfg.RegistryAddr)
	if err != nil {
		return nil, err
	}
	logs, err := g.dial(g.cfg.LogsAddr)
	if err != nil {
		return nil, err
	}
	regs := []func() error{
		func() error { return schedulerv1.RegisterJobServiceHandler(ctx, mux, sched) },
		func() error { return schedulerv1.RegisterSchedulerServiceHandler(ctx, mux, sched) },
		func() error { return schedulerv1.RegisterWorkflowServiceHandler(ctx, mux, sched) },
		func() error { return registryv1.RegisterRegistryServiceHandler(ctx, mux, reg) },
		func() error { return logsv1.RegisterLogServiceHandler(ctx, mux, logs) },
	}
	if g.cfg.AuthAddr != "" {
		var opts []grpc.DialOption
		if tok := g.cfg.InternalToken; tok != "" {
			// Proves to the auth service that the client address comes from the gateway.
			opts = append(opts, grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, o ...grpc.CallOption) error {
				return invoker(metadata.AppendToOutgoingContext(ctx, auth.GatewayTokenKey, tok), method, req, reply, cc, o...)
			}))
		}
		authConn, err := g.dial(g.cfg.AuthAddr, opts...)
		if err != nil {
			return nil, err
		}
		regs = append(regs, func() error { return authv1.RegisterAuthServiceHandler(ctx, mux, authConn) })
	}
	for _, r := range regs {
		if err := r(); err != nil {
			return nil, fmt.Errorf("gateway: register handlers: %w", err)
		}
	}
	ui, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		return nil, err
	}
	root := http.NewServeMux()
	root.Handle("/api/v1/", mux)
	doc, err := openapi.Versioned(buildVersion(g.cfg.Version))
	if err != nil {
		return nil, err
	}
	root.HandleFunc("GET /api/openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(doc)
	})
	// What the web UI needs to know of the gateway's configuration.
	uiConfig, err := json.Marshal(map[string]string{"trace_url_template": g.cfg.TraceURLTemplate})
	if err != nil {
		return nil, err
	}
	root.HandleFunc("GET /api/ui-config", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(uiConfig)
	})
	if g.cfg.InternalToken != "" {
		if g.xxl, err = g.xxlAdmin(); err != nil {
			return nil, err
		}
		root.Handle(g.xxl.ContextPath()+"/", g.xxl)
	}
	root.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	root.Handle("/", http.FileServerFS(ui))
	return root, nil
}

// xxlAdmin builds the XXL-JOB admin API over connections to the registry and the scheduler that
// present the internal token: the API vouches for executors it has checked itself.
func (g *Gateway) xxlAdmin() (*xxladmin.Handler, error) {
	reg, err := g.dial(g.cfg.RegistryAddr, auth.BearerToken(g.cfg.InternalToken))
	if err != nil {
		return nil, err
	}
	sched, err := g.dial(g.cfg.SchedulerAddr, auth.BearerToken(g.cfg.InternalToken))
	if err != nil {
		return nil, err
	}
	regClient := registryv1.NewRegistryServiceClient(reg)
	h, err := xxladmin.New(xxladmin.Config{
		ContextPath: g.cfg.XxlContextPath, AccessToken: g.cfg.XxlAccessToken, DeadTime: g.cfg.XxlDeadTime,
		MaxBodyBytes: g.cfg.MaxBodyBytes, Registry: regClient, Scheduler: schedulerv1.NewSchedulerServiceClient(sched),
		Tokens: auth.NewExecutorTokens(auth.ClientResolver{Registry: regClient}, nil), Logger: g.log.With("api", "xxl-job-admin"),
	})
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	return h, nil
}

// buildVersion is v, else the version the binary's build information gives.
func buildVersion(v string) string {
	return buildinfo.Read(v, "", "").Version
}

// Start listens and serves until Stop.
func (g *Gateway) Start(ctx context.Context) error {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", g.cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("gateway: listen %s: %w", g.cfg.ListenAddr, err)
	}
	if g.cfg.HTTPTLS != nil {
		ln = tls.NewListener(ln, g.cfg.HTTPTLS)
	}
	g.ln = ln
	g.done = make(chan error, 1)
	go func() {
		err := g.srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		g.done <- err
	}()
	return nil
}

// Addr is the address the gateway listens on, after Start.
func (g *Gateway) Addr() string { return g.ln.Addr().String() }

// Stop stops accepting, lets requests in flight finish (up to 5 s) and closes the connections to
// the services. It is idempotent.
func (g *Gateway) Stop() {
	g.once.Do(func() {
		if g.ln != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := g.srv.Shutdown(ctx); err != nil {
				g.log.Warn("gateway shutdown cut requests short", "error", err)
			}
			<-g.done
		}
		g.closeConns()
	})
}

func (g *Gateway) closeConns() {
	for _, c := range g.conns {
		c.Close()
	}
}

// Security headers of every response. The console loads its scripts and styles from the
// gateway only, with no inline script or style attribute, so the policy needs no 'unsafe-inline';
// data: images are the empty favicon.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// forgedMetadata is the prefix of headers by which an HTTP client could pass the metadata the
// gateway itself sets for the auth service (grpc-gateway forwards Grpc-Metadata-* headers).
const forgedMetadata = "grpc-metadata-x-jobmesh-"

// bodyTooLarge is set on a request whose body hit the limit, so the error handler answers 413.
type bodyTooLarge struct {
	limit int64
	hit   bool
}

type bodyTooLargeKey struct{}

// guardEdge is what every request passes before anything else: security headers on the
// response, a refusal (413) of a body over MaxBodyBytes before any of it is read, a body reader
// cut at the limit for chunked bodies, and the removal of headers that would forge the metadata
// the gateway sets.
func (g *Gateway) guardEdge(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", contentSecurityPolicy)
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		if g.xxl != nil && g.xxl.Owns(r.URL.Path) {
			// XXL-JOB executors read only HTTP 200 answers: the API bounds its bodies itself
			// (at MaxBodyBytes too) and refuses in XXL-JOB's way.
			next.ServeHTTP(w, r)
			return
		}
		if r.ContentLength > g.cfg.MaxBodyBytes {
			tooLarge(w, g.cfg.MaxBodyBytes)
			return
		}
		for k := range r.Header {
			if strings.HasPrefix(strings.ToLower(k), forgedMetadata) {
				delete(r.Header, k)
			}
		}
		flag := &bodyTooLarge{limit: g.cfg.MaxBodyBytes}
		r = r.WithContext(context.WithValue(r.Context(), bodyTooLargeKey{}, flag))
		r.Body = &limitedBody{ReadCloser: http.MaxBytesReader(w, r.Body, g.cfg.MaxBodyBytes), flag: flag}
		next.ServeHTTP(w, r)
	})
}

// limitedBody notes in flag when the body went past the limit.
type limitedBody struct {
	io.ReadCloser
	flag *bodyTooLarge
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		b.flag.hit = true
	}
	return n, err
}

// tooLarge answers 413 in the API's error shape.
func tooLarge(w http.ResponseWriter, limit int64) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Connection", "close")
	w.WriteHeader(http.StatusRequestEntityTooLarge)
	_, _ = fmt.Fprintf(w, `{"code":%d,"message":"request body: larger than %d bytes","details":[`+
		`{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":%q,"domain":%q,"metadata":{"limit_bytes":"%d"}}]}`+"\n",
		codes.InvalidArgument, limit, apierr.ReasonRequestTooLarge, apierr.Domain, limit)
}

// decodeField finds the field a JSON decoding error is about ("… enum field routeStrategy: …").
var decodeField = regexp.MustCompile(`field (\w+)`)

// errorHandler is grpc-gateway's default, except that request-body decoding errors name the
// field by its proto name (route_strategy), as every other error of the API does.
func errorHandler(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	if f, ok := r.Context().Value(bodyTooLargeKey{}).(*bodyTooLarge); ok && f.hit {
		tooLarge(w, f.limit)
		return
	}
	if st, ok := status.FromError(err); ok && st.Code() == codes.InvalidArgument && strings.HasPrefix(st.Message(), "proto:") {
		var field []string // ErrorInfo metadata naming the field, when the error names one
		msg := decodeField.ReplaceAllStringFunc(st.Message(), func(s string) string {
			f := snake(strings.TrimPrefix(s, "field "))
			if field == nil {
				field = []string{"field", f}
			}
			return "field " + f
		})
		msg = strings.Join(strings.Fields(strings.TrimPrefix(msg, "proto:")), " ")
		err = apierr.Status(codes.InvalidArgument, apierr.ReasonInvalidArgument, "request body: "+msg, field...)
	}
	// Bounds echoed input (decoding errors quote it) and gives the gateway's own errors (a
	// service down, an unknown path) their ErrorInfo.
	err = apierr.ToStatus(err)
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
}

// snake turns a JSON (lowerCamel) field name into its proto name.
func snake(s string) string {
	var b strings.Builder
	for i, c := range s {
		if unicode.IsUpper(c) {
			if i > 0 {
				b.WriteByte('_')
			}
			c = unicode.ToLower(c)
		}
		b.WriteRune(c)
	}
	return b.String()
}
