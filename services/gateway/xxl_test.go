package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/internal/etcdembed/etcdtest"
	"github.com/jobmesh/jobmesh/internal/grpcserver"
	"github.com/jobmesh/jobmesh/services/gateway"
	"github.com/jobmesh/jobmesh/services/gateway/auth"
	"github.com/jobmesh/jobmesh/services/registry"
)

// The XXL-JOB admin API's tests run a real registry on the package's embedded etcd.
func TestMain(m *testing.M) { os.Exit(etcdtest.Main(m)) }

// callbackScheduler is the scheduler's side of XxlCallback for the gateway's tests: log ids in
// known are applied once the token is token; every call is recorded.
type callbackScheduler struct {
	schedulerv1.UnimplementedSchedulerServiceServer
	token string
	known map[int64]bool

	mu    sync.Mutex
	calls []*schedulerv1.XxlCallbackRequest
	down  bool // answer Unavailable
}

func (s *callbackScheduler) XxlCallback(_ context.Context, req *schedulerv1.XxlCallbackRequest) (*schedulerv1.XxlCallbackResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, req)
	if s.down {
		return nil, status.Error(codes.Unavailable, "scheduler store unreachable")
	}
	if req.GetAccessToken() != s.token {
		return nil, status.Error(codes.Unauthenticated, "not the access token of the job group")
	}
	resp := &schedulerv1.XxlCallbackResponse{}
	for _, it := range req.GetItems() {
		if s.known[it.GetLogId()] {
			resp.AppliedLogIds = append(resp.AppliedLogIds, it.GetLogId())
		} else {
			resp.UnknownLogIds = append(resp.UnknownLogIds, it.GetLogId())
		}
	}
	return resp, nil
}

func (s *callbackScheduler) recorded() []*schedulerv1.XxlCallbackRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// xxlStack is a gateway in front of a real registry (on embedded etcd and SQLite) and a
// scheduler answering XxlCallback, every gRPC server behind the real guard.
type xxlStack struct {
	base     string // the gateway's http://host:port
	internal string
	reg      registryv1.RegistryServiceClient // as a service
	sched    *callbackScheduler
}

const (
	xxlApp       = "xxl-gw"        // AUTO, token xxlGroupTok
	xxlOpenApp   = "xxl-gw-open"   // AUTO, no token: the fallback applies
	xxlManualApp = "xxl-gw-manual" // MANUAL
	xxlGroupTok  = "group-token-1"
	xxlFallback  = "fallback-token"
)

func startXxlStack(t *testing.T) *xxlStack {
	t.Helper()
	internal := auth.NewSecret()
	guard, err := auth.NewGuard(auth.GuardConfig{InternalToken: internal})
	if err != nil {
		t.Fatal(err)
	}
	serve := func(register func(*grpc.Server)) string {
		g := grpcserver.New(nil, guard.ServerOptions()...)
		register(g)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go g.Serve(ln)
		t.Cleanup(g.Stop)
		return ln.Addr().String()
	}
	store := dbtest.Open(t, db.Config{DataDir: t.TempDir()}, "registry", registry.MigrationsFS())
	reg, err := registry.New(registry.Config{RevealTokens: auth.IsInternalCaller, SealSecret: internal, Executor: auth.ExecutorOf}, store, etcdtest.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Stop)
	regAddr := serve(reg.Register)
	sched := &callbackScheduler{token: xxlGroupTok, known: map[int64]bool{1000: true, 1001: true, 79: true}}
	schedAddr := serve(func(g *grpc.Server) { schedulerv1.RegisterSchedulerServiceServer(g, sched) })

	gw, err := gateway.New(gateway.Config{ListenAddr: "127.0.0.1:0", SchedulerAddr: schedAddr, RegistryAddr: regAddr, LogsAddr: "127.0.0.1:1",
		InternalToken: internal, XxlAccessToken: xxlFallback, MaxBodyBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Stop)

	conn, err := grpc.NewClient(regAddr, grpc.WithTransportCredentials(insecure.NewCredentials()), auth.BearerToken(internal))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s := &xxlStack{base: "http://" + gw.Addr(), internal: internal, reg: registryv1.NewRegistryServiceClient(conn), sched: sched}
	for _, g := range []*registryv1.ExecutorGroup{
		{AppName: xxlApp, Title: "xxl", AccessToken: xxlGroupTok},
		{AppName: xxlOpenApp, Title: "xxl open"},
		{AppName: xxlManualApp, Title: "xxl manual", AddressType: registryv1.AddressType_ADDRESS_TYPE_MANUAL, ManualAddresses: []string{"127.0.0.1:1"}},
	} {
		if _, err := s.reg.CreateExecutorGroup(t.Context(), &registryv1.CreateExecutorGroupRequest{Group: g}); err != nil {
			t.Fatalf("create group %s: %v", g.AppName, err)
		}
	}
	return s
}

// returnT is the XXL-JOB answer as an executor reads it.
type returnT struct {
	Code int     `json:"code"`
	Msg  *string `json:"msg"`
}

// call sends method {context}/path with body (a string or an io.Reader) and the token (none when
// empty) and returns the answer, failing unless it is HTTP 200 with a ReturnT.
func (s *xxlStack) call(t *testing.T, method, path, token string, body any) (returnT, string) {
	t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case string:
		r = strings.NewReader(b)
	case io.Reader:
		r = b
	}
	req, err := http.NewRequestWithContext(t.Context(), method, s.base+"/xxl-job-admin/"+path, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json;charset=UTF-8")
	if token != "" {
		req.Header.Set("XXL-JOB-ACCESS-TOKEN", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var got returnT
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &got) != nil {
		t.Fatalf("%s %s = HTTP %d %s, want HTTP 200 with a ReturnT", method, path, resp.StatusCode, raw)
	}
	return got, string(raw)
}

func (s *xxlStack) executors(t *testing.T, app string) []*registryv1.Executor {
	t.Helper()
	resp, err := s.reg.ListExecutors(t.Context(), &registryv1.ListExecutorsRequest{AppName: app})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetExecutors()
}

// waitExecutors polls app's live executors until there are n of them.
func (s *xxlStack) waitExecutors(t *testing.T, app string, n int) []*registryv1.Executor {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if got := s.executors(t, app); len(got) == n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("executors of %s = %v, want %d within 10s", app, s.executors(t, app), n)
		}
		select {
		case <-time.After(20 * time.Millisecond): // the registry's view follows etcd's watch
		case <-t.Context().Done():
		}
	}
}

func regBody(app, addr string) string {
	return `{"registryGroup":"EXECUTOR","registryKey":"` + app + `","registryValue":"` + addr + `"}`
}

const wrongToken = `{"code":500,"msg":"The access token is wrong."}`

// TestXxlAdminRegistry: registry and registryRemove over HTTP, with the group's token, the
// fallback token for a group without one, and every refusal an executor can meet.
func TestXxlAdminRegistry(t *testing.T) {
	t.Parallel()
	s := startXxlStack(t)

	// The group's token: registered, in the live view with kind XXL_JOB and a credential.
	if got, raw := s.call(t, "POST", "api/registry", xxlGroupTok, regBody(xxlApp, "http://127.0.0.1:28081/")); got.Code != 200 || raw != `{"code":200}` {
		t.Fatalf("registry with the group's token = %s, want {\"code\":200}", raw)
	}
	e := s.waitExecutors(t, xxlApp, 1)[0]
	if e.GetKind() != registryv1.ExecutorKind_EXECUTOR_KIND_XXL_JOB || e.GetAddress() != "http://127.0.0.1:28081/" || e.GetCredential() == "" {
		t.Fatalf("executor = %v, want kind XXL_JOB at http://127.0.0.1:28081/ with the group token's credential", e)
	}
	// The Go SDK registers without the trailing slash: the same executor, renewed.
	if got, raw := s.call(t, "POST", "api/registry", xxlGroupTok, regBody(xxlApp, "http://127.0.0.1:28081")); got.Code != 200 {
		t.Fatalf("second registry = %s, want code 200", raw)
	}
	// REST lists it with its kind.
	req, _ := http.NewRequestWithContext(t.Context(), "GET", s.base+"/api/v1/executors?app_name="+xxlApp, nil)
	req.Header.Set("Authorization", "Bearer "+s.internal)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(raw), `"kind":"EXECUTOR_KIND_XXL_JOB"`) || strings.Count(string(raw), `"instance_id"`) != 1 {
		t.Errorf("GET /api/v1/executors = %d %s, want one executor of kind EXECUTOR_KIND_XXL_JOB", resp.StatusCode, raw)
	}

	// Refusals: nothing more registered for any of them.
	for _, tc := range []struct {
		name, path, token, body string
		want                    string // the whole answer, or a part of msg after "~"
	}{
		{"wrong token", "api/registry", "nope", regBody(xxlApp, "http://127.0.0.1:28082/"), wrongToken},
		{"no token", "api/registry", "", regBody(xxlApp, "http://127.0.0.1:28082/"), wrongToken},
		{"fallback for a group with a token", "api/registry", xxlFallback, regBody(xxlApp, "http://127.0.0.1:28082/"), wrongToken},
		{"remove, wrong token", "api/registryRemove", "nope", regBody(xxlApp, "http://127.0.0.1:28081/"), wrongToken},
		{"remove, no token", "api/registryRemove", "", regBody(xxlApp, "http://127.0.0.1:28081/"), wrongToken},
		{"open group, wrong token", "api/registry", "nope", regBody(xxlOpenApp, "http://127.0.0.1:28082/"), wrongToken},
		{"unknown group", "api/registry", xxlGroupTok, regBody("xxl-gw-nosuch", "http://127.0.0.1:28082/"), `~xxl-gw-nosuch\" not found`},
		{"manual group", "api/registry", xxlFallback, regBody(xxlManualApp, "http://127.0.0.1:28082/"), "~app_name"},
		{"bad address", "api/registry", xxlGroupTok, regBody(xxlApp, "127.0.0.1:28082"), "~address"},
		{"no registryKey", "api/registry", xxlGroupTok, `{"registryGroup":"EXECUTOR","registryValue":"http://127.0.0.1:28082/"}`, `{"code":500,"msg":"Illegal Argument."}`},
		{"empty registryValue", "api/registry", xxlGroupTok, regBody(xxlApp, ""), `{"code":500,"msg":"Illegal Argument."}`},
		{"null registryGroup", "api/registry", xxlGroupTok, `{"registryGroup":null,"registryKey":"xxl-gw","registryValue":"http://127.0.0.1:28082/"}`, `{"code":500,"msg":"Illegal Argument."}`},
		{"remove, empty fields", "api/registryRemove", xxlGroupTok, `{}`, `{"code":500,"msg":"Illegal Argument."}`},
		{"ADMIN group", "api/registry", xxlGroupTok, `{"registryGroup":"ADMIN","registryKey":"xxl-gw","registryValue":"http://127.0.0.1:28082/"}`, "~registryGroup"},
		{"malformed JSON", "api/registry", xxlGroupTok, `{"registryGroup":"EXECUTOR","registryKey":`, "~request error"},
		{"a list", "api/registry", xxlGroupTok, `[]`, "~request error"},
		{"remove, malformed JSON", "api/registryRemove", xxlGroupTok, `not json`, "~request error"},
		{"unknown path", "api/nosuch", xxlGroupTok, regBody(xxlApp, "http://127.0.0.1:28082/"), `{"code":500,"msg":"invalid request, uri-mapping(api/nosuch) not found."}`},
	} {
		_, raw := s.call(t, "POST", tc.path, tc.token, tc.body)
		if want, part := strings.CutPrefix(tc.want, "~"); part {
			if !strings.HasPrefix(raw, `{"code":500,"msg":"`) || !strings.Contains(raw, want) {
				t.Errorf("%s: %s, want code 500 with a msg naming %s", tc.name, raw, want)
			}
		} else if raw != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, raw, tc.want)
		}
	}
	for _, m := range []string{"GET", "PUT"} {
		if _, raw := s.call(t, m, "api/registry", xxlGroupTok, ""); raw != `{"code":500,"msg":"invalid request, HttpMethod not support."}` {
			t.Errorf("%s api/registry = %s, want code 500 HttpMethod not support.", m, raw)
		}
	}
	if got := s.executors(t, xxlApp); len(got) != 1 {
		t.Errorf("executors of %s after the refusals = %v, want only the one registered", xxlApp, got)
	}
	for _, app := range []string{xxlOpenApp, xxlManualApp, "xxl-gw-nosuch"} {
		if got := s.executors(t, app); len(got) != 0 {
			t.Errorf("executors of %s after refusals = %v, want none", app, got)
		}
	}

	// A group without a token: the fallback token lets its executors in, credited with no token
	// (the group's), so routing sends them the group's fires.
	if got, raw := s.call(t, "POST", "api/registry", xxlFallback, regBody(xxlOpenApp, "http://127.0.0.1:28083/")); got.Code != 200 {
		t.Fatalf("registry with the fallback token = %s, want code 200", raw)
	}
	if e := s.waitExecutors(t, xxlOpenApp, 1)[0]; e.GetCredential() != "" || e.GetKind() != registryv1.ExecutorKind_EXECUTOR_KIND_XXL_JOB {
		t.Errorf("executor of a group without a token = %v, want kind XXL_JOB with no credential", e)
	}

	// registryRemove: gone at once.
	if got, raw := s.call(t, "POST", "api/registryRemove", xxlGroupTok, regBody(xxlApp, "http://127.0.0.1:28081/")); got.Code != 200 {
		t.Fatalf("registryRemove = %s, want code 200", raw)
	}
	s.waitExecutors(t, xxlApp, 0)
	if got, raw := s.call(t, "POST", "api/registryRemove", xxlGroupTok, regBody(xxlApp, "http://127.0.0.1:28081/")); got.Code != 200 {
		t.Errorf("registryRemove of an executor not registered = %s, want code 200 (as XXL-JOB)", raw)
	}
}

// bigBody is n bytes of a registry body whose registryValue never ends, generated as it is read.
type bigBody struct{ off, n int64 }

func (b *bigBody) Read(p []byte) (int, error) {
	if b.off >= b.n {
		return 0, io.EOF
	}
	head := `{"registryGroup":"EXECUTOR","registryKey":"` + xxlApp + `","registryValue":"http://h:1/`
	k := 0
	for ; k < len(p) && b.off < b.n; k, b.off = k+1, b.off+1 {
		if b.off < int64(len(head)) {
			p[k] = head[b.off]
		} else {
			p[k] = 'a'
		}
	}
	return k, nil
}

// TestXxlAdminBodyOverTheLimit: a 10 MB body, announced or chunked, gets a clear code 500 in
// XXL-JOB's way (not the REST API's 413), and nothing is stored or sent on.
func TestXxlAdminBodyOverTheLimit(t *testing.T) {
	t.Parallel()
	s := startXxlStack(t)
	const size = 10 << 20
	for _, path := range []string{"api/registry", "api/callback"} {
		for _, chunked := range []bool{false, true} {
			req, err := http.NewRequestWithContext(t.Context(), "POST", s.base+"/xxl-job-admin/"+path, &bigBody{n: size})
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("XXL-JOB-ACCESS-TOKEN", xxlGroupTok)
			if !chunked {
				req.ContentLength = size
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("POST %s 10 MB: %v", path, err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.HasPrefix(string(raw), `{"code":500,"msg":"request error: body larger than 1048576 bytes`) {
				t.Errorf("POST %s 10 MB (chunked %v) = %d %s, want HTTP 200 with code 500 naming the limit", path, chunked, resp.StatusCode, raw)
			}
		}
	}
	if got := s.executors(t, xxlApp); len(got) != 0 {
		t.Errorf("executors after 10 MB registrations = %v, want none", got)
	}
	if got := s.sched.recorded(); len(got) != 0 {
		t.Errorf("scheduler got %d callback calls from 10 MB bodies, want none", len(got))
	}
	// The REST API keeps its own limit and answer.
	req, _ := http.NewRequestWithContext(t.Context(), "POST", s.base+"/api/v1/jobs", &bigBody{n: size})
	req.ContentLength = size
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("POST /api/v1/jobs 10 MB = %d, want 413", resp.StatusCode)
	}
}

// TestXxlAdminCallback: callback lists go to the scheduler's XxlCallback with the token the
// executor presented, read as Gson writes (and leniently reads) them, and its answer maps to
// code 200 only when every item was applied.
func TestXxlAdminCallback(t *testing.T) {
	t.Parallel()
	s := startXxlStack(t)
	// Two items, the first taken last as executors batch them; a number as a string, a missing
	// handleMsg, an unknown field.
	body := `[{"logId":1001,"logDateTim":1795628003443,"handleCode":500,"handleMsg":"boom \u003cb\u003e"},` +
		`{"logId":"1000","logDateTim":1795628003000,"handleCode":200,"executeResult":{"code":200}}]`
	if got, raw := s.call(t, "POST", "api/callback", xxlGroupTok, body); got.Code != 200 || raw != `{"code":200}` {
		t.Fatalf("callback of known runs = %s, want {\"code\":200}", raw)
	}
	calls := s.sched.recorded()
	if len(calls) != 1 || calls[0].GetAccessToken() != xxlGroupTok || len(calls[0].GetItems()) != 2 {
		t.Fatalf("scheduler calls = %v, want one with both items and the presented token", calls)
	}
	it0, it1 := calls[0].Items[0], calls[0].Items[1]
	if it0.GetLogId() != 1001 || it0.GetLogDateTime() != 1795628003443 || it0.GetHandleCode() != 500 || it0.GetHandleMsg() != "boom <b>" ||
		it1.GetLogId() != 1000 || it1.GetLogDateTime() != 1795628003000 || it1.GetHandleCode() != 200 || it1.GetHandleMsg() != "" {
		t.Errorf("items = %v, want 1001 (500 \"boom <b>\") then 1000 (200, no message), in list order", calls[0].Items)
	}

	// XXL-JOB 3.5 wraps the list and spells logDateTime in full.
	if got, raw := s.call(t, "POST", "api/callback", xxlGroupTok, `{"callbackList":[{"logId":79,"logDateTime":5,"handleCode":"502","handleMsg":"job execute timeout "}]}`); got.Code != 200 {
		t.Errorf("wrapped callback = %s, want code 200", raw)
	}
	if c := s.sched.recorded(); len(c) != 2 || c[1].Items[0].GetLogDateTime() != 5 || c[1].Items[0].GetHandleCode() != 502 {
		t.Errorf("wrapped callback reached the scheduler as %v, want log time 5 and code 502", c[len(c)-1])
	}

	// An unknown log id: code 500 naming it (the executor retries; the known item is applied).
	_, raw := s.call(t, "POST", "api/callback", xxlGroupTok, `[{"logId":1000,"logDateTim":1,"handleCode":200},{"logId":4242,"logDateTim":1,"handleCode":200}]`)
	if !strings.HasPrefix(raw, `{"code":500,"msg":"`) || !strings.Contains(raw, "4242") || strings.Contains(raw, "1000") {
		t.Errorf("callback with an unknown log id = %s, want code 500 naming 4242 only", raw)
	}
	// The scheduler refuses the token: XXL-JOB's wrong-token answer.
	for _, tok := range []string{"nope", ""} {
		if _, raw := s.call(t, "POST", "api/callback", tok, `[{"logId":1000,"logDateTim":1,"handleCode":200}]`); raw != wrongToken {
			t.Errorf("callback with token %q = %s, want %s", tok, raw, wrongToken)
		}
	}
	before := len(s.sched.recorded())
	for _, tc := range []struct{ name, body, want string }{
		{"malformed JSON", `[{"logId":1000,`, "request error"},
		{"not a list", `"x"`, "request error"},
		{"an object without callbackList", `{"logId":1000}`, "callbackList"},
		{"a log id that is not a number", `[{"logId":"abc","handleCode":200}]`, "request error"},
		{"a handleCode beyond int", `[{"logId":1000,"handleCode":99999999999}]`, "handleCode"},
	} {
		if _, raw := s.call(t, "POST", "api/callback", xxlGroupTok, tc.body); !strings.HasPrefix(raw, `{"code":500,"msg":"`) || !strings.Contains(raw, tc.want) {
			t.Errorf("callback, %s: %s, want code 500 naming %s", tc.name, raw, tc.want)
		}
	}
	if _, raw := s.call(t, "POST", "api/callback", xxlGroupTok, `[]`); raw != `{"code":200}` {
		t.Errorf("empty callback list = %s, want code 200 (nothing to apply)", raw)
	}
	if _, raw := s.call(t, "GET", "api/callback", xxlGroupTok, ""); raw != `{"code":500,"msg":"invalid request, HttpMethod not support."}` {
		t.Errorf("GET api/callback = %s, want code 500 HttpMethod not support.", raw)
	}
	if got := len(s.sched.recorded()); got != before {
		t.Errorf("refused callbacks reached the scheduler %d times, want none", got-before)
	}

	// The scheduler is away: code 500, so the executor keeps the callback and retries it.
	s.sched.mu.Lock()
	s.sched.down = true
	s.sched.mu.Unlock()
	if _, raw := s.call(t, "POST", "api/callback", xxlGroupTok, `[{"logId":1000,"logDateTim":1,"handleCode":200}]`); !strings.HasPrefix(raw, `{"code":500,"msg":"callback not stored`) {
		t.Errorf("callback while the scheduler fails = %s, want code 500 callback not stored", raw)
	}
}

// TestXxlAdminConfig: a context path or dead time the API cannot use is refused by name.
func TestXxlAdminConfig(t *testing.T) {
	t.Parallel()
	down := "127.0.0.1:1"
	for _, tc := range []struct {
		cfg  gateway.Config
		want string
	}{
		{gateway.Config{XxlContextPath: "/api"}, "context path"},
		{gateway.Config{XxlContextPath: "xxl-job-admin"}, "context path"},
		{gateway.Config{XxlContextPath: "/xxl-job-admin/"}, "context path"},
		{gateway.Config{XxlDeadTime: 5 * time.Second}, "dead time"},
		{gateway.Config{XxlDeadTime: 2 * time.Hour}, "dead time"},
	} {
		tc.cfg.ListenAddr, tc.cfg.SchedulerAddr, tc.cfg.RegistryAddr, tc.cfg.LogsAddr = "127.0.0.1:0", down, down, down
		if _, err := gateway.New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error naming the %s", tc.cfg, err, tc.want)
		}
	}
	// Another context path serves the API there.
	base := startDown(t, gateway.Config{InternalToken: auth.NewSecret(), XxlContextPath: "/jobs/xxl"})
	resp, err := http.Get(base + "/jobs/xxl/api/registry")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(raw) != `{"code":500,"msg":"invalid request, HttpMethod not support."}` {
		t.Errorf("GET /jobs/xxl/api/registry = %d %s, want the API's code 500", resp.StatusCode, raw)
	}
}
