package xxltest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobmesh/jobmesh/internal/xxl"
)

// fakeAdmin records the executor's calls to the admin and answers them with code.
type fakeAdmin struct {
	mu    sync.Mutex
	calls []string // "path body"
	code  int
}

func (a *fakeAdmin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	a.calls = append(a.calls, r.URL.Path+" "+string(body))
	code := a.code
	a.mu.Unlock()
	_, _ = w.Write([]byte(`{"code":` + map[bool]string{true: "200", false: "500"}[code == 200] + `,"msg":null,"content":null}`))
}

func (a *fakeAdmin) setCode(c int) {
	a.mu.Lock()
	a.code = c
	a.mu.Unlock()
}

func setup(t *testing.T, token string) (*Executor, *fakeAdmin) {
	t.Helper()
	admin := &fakeAdmin{code: 200}
	srv := httptest.NewServer(admin)
	t.Cleanup(srv.Close)
	e, err := New(Config{AppName: "xxl-demo", AdminAddresses: []string{srv.URL + "/xxl-job-admin"}, AccessToken: token,
		LogDir: t.TempDir(), Location: time.UTC})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Stop)
	return e, admin
}

func post(t *testing.T, e *Executor, path, token, body string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, strings.TrimSuffix(e.Address(), "/")+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set(xxl.TokenHeader, token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("HTTP %d", resp.StatusCode)
	}
	out, _ := io.ReadAll(resp.Body)
	return string(out)
}

func waitFor(t *testing.T, e *Executor, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.Wait(ctx, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func TestProtocolErrors(t *testing.T) {
	t.Parallel()
	e, _ := setup(t, "tok")
	for _, tc := range []struct{ path, token, body, want string }{
		{"/beat", "", `""`, `{"code":500,"msg":"The access token is wrong."}`},
		{"/beat", "nope", `""`, `{"code":500,"msg":"The access token is wrong."}`},
		{"/beat", "tok", `""`, `{"code":200}`},
		{"/run?x=1", "tok", `{}`, `{"code":500,"msg":"invalid request, uri-mapping(/run?x\u003d1) not found."}`},
		{"/run/", "tok", `{}`, `{"code":500,"msg":"invalid request, uri-mapping(/run/) not found."}`},
		{"/run", "tok", `{"jobId":1,"executorHandler":"nope","glueType":"BEAN","logId":5}`, `{"code":500,"msg":"job handler [nope] not found."}`},
		{"/run", "tok", `{"jobId":1,"logId":5}`, `{"code":500,"msg":"glueType[null] is not valid."}`},
		{"/kill", "tok", `{"jobId":"79"}`, `{"code":200,"msg":"job thread already killed."}`},
		{"/idleBeat", "tok", `{"jobId":79}`, `{"code":200}`},
		{"/log", "tok", `{"logDateTim":0,"logId":404,"fromLineNum":1}`, `{"code":200,"content":{"fromLineNum":1,"toLineNum":0,"logContent":"readLog fail, logFile not exists","isEnd":true}}`},
	} {
		if got := post(t, e, tc.path, tc.token, tc.body); got != tc.want {
			t.Errorf("%s token %q: got %s, want %s", tc.path, tc.token, got, tc.want)
		}
	}
	resp, err := http.Get(e.Address() + "beat")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if got, want := string(b), `{"code":500,"msg":"invalid request, HttpMethod not support."}`; got != want {
		t.Errorf("GET: got %s, want %s", got, want)
	}
}

func TestRunQueueKillAndCallbacks(t *testing.T) {
	t.Parallel()
	e, admin := setup(t, "")
	release := make(chan struct{})
	e.Handle("block", func(ctx context.Context, job *Job) {
		job.Log("waiting %s", job.Param.ExecutorParams)
		select {
		case <-ctx.Done():
		case <-release:
		}
	})
	e.Handle("ok", func(ctx context.Context, job *Job) { job.Success("shard " + job.Param.ExecutorParams) })
	run := func(logID int64, handler, block string) string {
		p := xxl.TriggerParam{JobID: 7, ExecutorHandler: handler, ExecutorBlockStrategy: block, LogID: logID,
			LogDateTime: 1795628003792, GlueType: "BEAN", BroadcastTotal: 1}
		b, _ := json.Marshal(p)
		return post(t, e, "/run", "", string(b))
	}
	if got := run(1010, "block", "SERIAL_EXECUTION"); got != `{"code":200}` {
		t.Fatalf("run 1010: %s", got)
	}
	waitFor(t, e, "1010 running", func() bool {
		return e.Running(7) && strings.Contains(e.ReadLog(1795628003792, 1010, 1).LogContent, "waiting")
	})
	if got := run(1011, "block", "SERIAL_EXECUTION"); got != `{"code":200}` {
		t.Fatalf("run 1011: %s", got)
	}
	if got, want := run(1011, "block", "SERIAL_EXECUTION"), `{"code":500,"msg":"repeate trigger job, logId:1011"}`; got != want {
		t.Fatalf("repeat 1011: got %s, want %s", got, want)
	}
	if got, want := run(1012, "block", "DISCARD_LATER"), `{"code":500,"msg":"block strategy effect：Discard Later"}`; got != want {
		t.Fatalf("discard: got %s, want %s", got, want)
	}
	if got, want := post(t, e, "/idleBeat", "", `{"jobId":7}`), `{"code":500,"msg":"job thread is running or has trigger queue."}`; got != want {
		t.Fatalf("idleBeat: got %s, want %s", got, want)
	}
	if got := post(t, e, "/kill", "", `{"jobId":7}`); got != `{"code":200}` {
		t.Fatalf("kill: %s", got)
	}
	waitFor(t, e, "2 callbacks", func() bool { return len(e.Callbacks()) == 2 })
	got := map[int64]string{}
	for _, c := range e.Callbacks() {
		got[c.LogID] = c.HandleMsg
		if c.HandleCode != 500 || c.LogDateTim != 1795628003792 {
			t.Errorf("callback %+v", c)
		}
	}
	if got[1010] != "scheduling center kill job. [job running, killed]" ||
		got[1011] != "scheduling center kill job. [job not executed, in the job queue, killed.]" {
		t.Errorf("kill callbacks: %v", got)
	}
	if e.RunCount(1011) != 2 {
		t.Errorf("RunCount(1011) = %d, want 2", e.RunCount(1011))
	}

	// A failed callback is kept and sent again.
	admin.setCode(500)
	if got := run(1020, "ok", ""); got != `{"code":200}` {
		t.Fatalf("run 1020: %s", got)
	}
	waitFor(t, e, "failed callback", func() bool { return e.PendingCallbacks() == 1 })
	admin.setCode(200)
	e.RetryCallbacksNow(context.Background())
	waitFor(t, e, "retried callback", func() bool { return len(e.Callbacks()) == 3 })
	if c := e.Callbacks()[2]; c.LogID != 1020 || c.HandleCode != 200 || c.HandleMsg != "shard " {
		t.Errorf("retried callback %+v", c)
	}
	lr := e.ReadLog(1795628003792, 1020, 2)
	if lr.FromLineNum != 2 || lr.ToLineNum < 3 || !strings.Contains(lr.LogContent, "execute end(finish)") || strings.Contains(lr.LogContent, "\r") {
		t.Errorf("log from 2: %+v", lr)
	}
}

func TestTimeoutAndRegistry(t *testing.T) {
	t.Parallel()
	e, admin := setup(t, "tok")
	e.Handle("slow", func(ctx context.Context, job *Job) { <-ctx.Done() })
	body := `{"jobId":9,"executorHandler":"slow","executorTimeout":1,"logId":1030,"logDateTime":1,"glueType":"BEAN"}`
	if got := post(t, e, "/run", "tok", body); got != `{"code":200}` {
		t.Fatalf("run: %s", got)
	}
	waitFor(t, e, "timeout callback", func() bool { return len(e.Callbacks()) == 1 })
	if c := e.Callbacks()[0]; c.HandleCode != 502 || c.HandleMsg != "job execute timeout " {
		t.Errorf("timeout callback %+v", c)
	}
	e.Stop()
	admin.mu.Lock()
	defer admin.mu.Unlock()
	first, last := admin.calls[0], ""
	for _, c := range admin.calls {
		if strings.HasPrefix(c, "/xxl-job-admin/api/registryRemove") {
			last = c
		}
	}
	want := `{"registryGroup":"EXECUTOR","registryKey":"xxl-demo","registryValue":"` + e.Address() + `"}`
	if first != "/xxl-job-admin/api/registry "+want || last != "/xxl-job-admin/api/registryRemove "+want {
		t.Errorf("registry calls %q", admin.calls)
	}
}

func TestMarshalIsGson(t *testing.T) {
	t.Parallel()
	got, err := xxl.Marshal(xxl.HandleCallbackParam{LogID: 1, LogDateTim: 2, HandleCode: 500, HandleMsg: "a<b>&c='d'"})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"logId":1,"logDateTim":2,"handleCode":500,"handleMsg":"a\u003cb\u003e\u0026c\u003d\u0027d\u0027"}`; !bytes.Equal(got, []byte(want)) {
		t.Errorf("got %s, want %s", got, want)
	}
	var items []xxl.HandleCallbackParam
	if err := xxl.Unmarshal([]byte(`[{"logId":"79","handleCode":200,"extra":1},{"logId":80,"logDateTim":null}]`), &items); err != nil {
		t.Fatal(err)
	}
	if len(items) != 2 || items[0].LogID != 79 || items[0].HandleCode != 200 || items[1].LogID != 80 {
		t.Errorf("lenient decode: %+v", items)
	}
	if err := xxl.Unmarshal([]byte(`[{"logId":"x"}]`), &items); err == nil || !strings.Contains(err.Error(), "$[0].logId") {
		t.Errorf("bad number: %v", err)
	}
}

// TestCallbacksBatchFirstTakenLast: callbacks queued while the admin answers slowly go in one
// list, the first one taken last, as TriggerCallbackThread sends them.
func TestCallbacksBatchFirstTakenLast(t *testing.T) {
	t.Parallel()
	gate, arrived := make(chan struct{}), make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	var mu sync.Mutex
	var lists []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.HasSuffix(r.URL.Path, "/api/callback") {
			mu.Lock()
			lists = append(lists, string(body))
			first := len(lists) == 1
			mu.Unlock()
			if first {
				close(arrived)
				<-gate
			}
		}
		w.Write([]byte(`{"code":200}`))
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(open) // before srv.Close, even when the test fails
	e, err := New(Config{AppName: "batch", AdminAddresses: []string{srv.URL}, LogDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e.Handle("ok", func(context.Context, *Job) {})
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Stop)
	run := func(job, logID int64) {
		if got := post(t, e, "/run", "", fmt.Sprintf(`{"jobId":%d,"executorHandler":"ok","glueType":"BEAN","logId":%d,"logDateTime":1}`, job, logID)); got != `{"code":200}` {
			t.Fatalf("run %d: %s", logID, got)
		}
	}
	run(1, 1071)
	select {
	case <-arrived:
	case <-time.After(20 * time.Second):
		t.Fatal("the first callback did not arrive")
	}
	run(2, 1072)
	waitFor(t, e, "1072's callback is queued", func() bool { return e.PendingCallbacks() == 1 })
	run(3, 1073)
	waitFor(t, e, "1073's callback is queued", func() bool { return e.PendingCallbacks() == 2 })
	open()
	waitFor(t, e, "three callbacks", func() bool { return len(e.Callbacks()) == 3 })
	mu.Lock()
	defer mu.Unlock()
	want := []string{`[{"logId":1071,"logDateTim":1,"handleCode":200}]`,
		`[{"logId":1073,"logDateTim":1,"handleCode":200},{"logId":1072,"logDateTim":1,"handleCode":200}]`}
	if len(lists) != 2 || lists[0] != want[0] || lists[1] != want[1] {
		t.Errorf("callback lists %q, want %q", lists, want)
	}
}
