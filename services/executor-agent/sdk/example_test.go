package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
)

// An application registers its own handler and serves the scheduler in-process. In production
// Config also names RegistryAddr (to register), LogsvcAddr (to deliver results) and TLS (mutual
// TLS with the scheduler, meshtls.Load); this example runs without them, behind the group's access
// token, which the scheduler presents on every call.
func ExampleExecutor_Handle() {
	dir, err := os.MkdirTemp("", "jobmesh-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	results := make(chan sdk.Result, 1)
	executor, err := sdk.New(sdk.Config{
		AppName:     "billing",
		ListenAddr:  "127.0.0.1:0",
		LogDir:      dir,
		AccessToken: "the-executor-group-access-token",
		OnResult:    func(r sdk.Result) { results <- r },
		Logger:      slog.New(slog.DiscardHandler),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	executor.Handle("invoice", func(ctx context.Context, job *sdk.Job) error {
		job.Logf("invoicing shard %d of %d", job.ShardIndex+1, job.ShardTotal)
		job.SetMessage("12 invoices sent") // the run's result message
		return nil
	})
	if err := executor.Start(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	defer executor.Stop(context.Background())

	// The scheduler sends fires over gRPC; here the example plays its part.
	conn, err := grpc.NewClient(executor.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	client := executorv1.NewExecutorServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer the-executor-group-access-token")
	resp, err := client.Run(ctx, &executorv1.RunRequest{Triggers: []*executorv1.Trigger{{
		TriggerId: "7-1700000000000-0-0", JobId: 7, GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN,
		Handler: "invoice", ShardIndex: 0, ShardTotal: 2,
	}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(resp.GetAcks()[0].GetOutcome())

	select {
	case r := <-results:
		fmt.Println(r.TriggerID, r.Status, r.Message)
	case <-ctx.Done():
		fmt.Println("no result")
		return
	}
	logs, err := client.Log(ctx, &executorv1.LogRequest{TriggerId: "7-1700000000000-0-0", FromLine: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(logs.GetLines())
	// Output:
	// RUN_OUTCOME_ACCEPTED
	// 7-1700000000000-0-0 SUCCESS 12 invoices sent
	// [invoicing shard 1 of 2]
}

// A handler that fails returns an error: the run ends FAIL with its message, and the scheduler
// retries it as many times as the job says. WithInit runs once per job worker before its first
// fire (open a connection, say), and WithDestroy when that worker ends.
func ExampleWithInit() {
	ex, err := newExampleExecutor(sdk.Config{AppName: "reports"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ex.stop()
	ex.Handle("export", func(ctx context.Context, job *sdk.Job) error {
		if job.Params == "" {
			return errors.New("params: want the report's name")
		}
		job.SetMessage("exported " + job.Params)
		return nil
	}, sdk.WithInit(func() error {
		fmt.Println("init: connected")
		return nil
	}), sdk.WithDestroy(func() { fmt.Println("destroy: disconnected") }))

	for i, params := range []string{"", "sales"} {
		r, _, err := ex.fire(&executorv1.Trigger{TriggerId: fmt.Sprintf("8-%d-0-0", i), JobId: 8, Handler: "export", Params: params})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(r.Status, r.Message)
	}
	ex.stop() // the job's worker ends with the executor
	// Output:
	// init: connected
	// FAIL params: want the report's name
	// SUCCESS exported sales
	// destroy: disconnected
}

// The built-in "command" handler runs a program without a shell: its params are a JSON array
// ["prog", "arg", ...] (or a string split on whitespace). Its output lines are the run's log.
func Example_commandHandler() {
	ex, err := newExampleExecutor(sdk.Config{AppName: "ops"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ex.stop()
	r, lines, err := ex.fire(&executorv1.Trigger{TriggerId: "9-1-0-0", JobId: 9, Handler: sdk.CommandHandler,
		Params: `["echo", "backup done"]`})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s %q\n", r.Status, lines)
	// Output:
	// SUCCESS ["backup done"]
}

// The built-in "http" handler makes one request, described by its params (an HTTPRequest in
// JSON), to a host that Config.HTTPAllowHosts allows; a status other than 2xx (or ExpectStatus)
// fails the run. The response's status is the run's message; its body goes to the run's log.
func ExampleHTTPRequest() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s ok", r.Method, r.URL.Path)
	}))
	defer srv.Close()
	host := srv.Listener.Addr().String()

	ex, err := newExampleExecutor(sdk.Config{AppName: "hooks", HTTPAllowHosts: []string{host}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ex.stop()
	r, lines, err := ex.fire(&executorv1.Trigger{TriggerId: "10-1-0-0", JobId: 10, Handler: sdk.HTTPHandler,
		Params: `{"url": "http://` + host + `/refresh", "method": "POST"}`})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(r.Status, r.Message)
	fmt.Printf("%q\n", lines[1:]) // lines[0] is "POST <the URL>"
	// Output:
	// SUCCESS HTTP 200 OK
	// ["status 200 OK" "POST /refresh ok"]
}

// A GLUE job carries its script's source in the fire (here GLUE_SHELL: bash; also python3, node,
// php and pwsh, whichever the host has). The script gets the job's params as $1, the shard as
// $2 and $3, and the fire in JOBMESH_* variables; exit code 0 is success.
func Example_glueScript() {
	ex, err := newExampleExecutor(sdk.Config{AppName: "scripts"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ex.stop()
	r, lines, err := ex.fire(&executorv1.Trigger{TriggerId: "11-1-0-0", JobId: 11,
		GlueType: schedulerv1.GlueType_GLUE_TYPE_GLUE_SHELL, GlueUpdatedUnixMs: 1,
		GlueSource: "echo \"hello $1\"\necho \"job $JOBMESH_JOB_ID\"\n", Params: "world"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s %q\n", r.Status, lines)
	// Output:
	// SUCCESS ["hello world" "job 11"]
}

// greeter is an application's HandlerService, as one written in any language would serve it.
type greeter struct {
	executorv1.UnimplementedHandlerServiceServer
}

func (greeter) ListHandlers(context.Context, *executorv1.ListHandlersRequest) (*executorv1.ListHandlersResponse, error) {
	return &executorv1.ListHandlersResponse{Handlers: []string{"greet"}}, nil
}

func (greeter) Handle(req *executorv1.HandleRequest, s grpc.ServerStreamingServer[executorv1.HandleResponse]) error {
	line := &executorv1.HandleResponse_LogLine{LogLine: "hello " + req.GetTrigger().GetParams()}
	if err := s.Send(&executorv1.HandleResponse{Event: line}); err != nil {
		return err
	}
	result := &executorv1.HandleResult{Success: true, Message: "greeted 1"}
	return s.Send(&executorv1.HandleResponse{Event: &executorv1.HandleResponse_Result{Result: result}})
}

// The sidecar case: an application in any language serves HandlerService, and the executor
// forwards its fires to it (ForwardHandlers registers every handler the application lists;
// ForwardTo forwards one). The application's lines and result become the run's.
func ExampleForwardTo() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	app := grpc.NewServer()
	executorv1.RegisterHandlerServiceServer(app, greeter{})
	go app.Serve(ln)
	defer app.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()

	ex, err := newExampleExecutor(sdk.Config{AppName: "sidecar"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ex.stop()
	ex.Handle("greet", sdk.ForwardTo(executorv1.NewHandlerServiceClient(conn)))
	r, lines, err := ex.fire(&executorv1.Trigger{TriggerId: "12-1-0-0", JobId: 12, Handler: "greet", Params: "sidecar"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(r.Status, r.Message, lines)
	// Output:
	// SUCCESS greeted 1 [hello sidecar]
}

// Stop ends an executor gracefully: it leaves the registry (no new fires are routed to it),
// lets running handlers finish while its context lasts, cancels those still running when it
// ends, and delivers their results before it returns.
func ExampleExecutor_Stop() {
	ex, err := newExampleExecutor(sdk.Config{AppName: "batch"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ex.stop()
	started := make(chan struct{})
	ex.Handle("long", func(ctx context.Context, job *sdk.Job) error {
		close(started)
		<-ctx.Done() // a handler that would run for hours returns when it is cancelled
		return ctx.Err()
	})
	if _, _, err := ex.fire(&executorv1.Trigger{TriggerId: "13-1-0-0", JobId: 13, Handler: "long"}, started); err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = ex.Stop(ctx)
	fmt.Println(errors.Is(err, context.DeadlineExceeded), err)
	// Output:
	// true executor stop: 1 running handler(s) killed: context deadline exceeded
}

// exampleToken is the examples' executor group access token.
const exampleToken = "example-group-token"

// exampleExecutor is an executor started for an example, with its results.
type exampleExecutor struct {
	*sdk.Executor
	results chan sdk.Result
	dir     string
}

// newExampleExecutor starts an executor with cfg on a loopback port, logging nowhere.
func newExampleExecutor(cfg sdk.Config) (*exampleExecutor, error) {
	dir, err := os.MkdirTemp("", "jobmesh-example-")
	if err != nil {
		return nil, err
	}
	x := &exampleExecutor{results: make(chan sdk.Result, 10), dir: dir}
	cfg.ListenAddr, cfg.LogDir, cfg.AccessToken = "127.0.0.1:0", dir, exampleToken
	cfg.OnResult = func(r sdk.Result) { x.results <- r }
	cfg.Logger = slog.New(slog.DiscardHandler)
	if x.Executor, err = sdk.New(cfg); err == nil {
		err = x.Start(context.Background())
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return x, nil
}

// stop stops the executor, giving running handlers 10 s, and removes its directory.
func (x *exampleExecutor) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	x.Stop(ctx)
	os.RemoveAll(x.dir)
}

// fire plays the scheduler's part: it sends t to the executor and returns the fire's result and
// log lines. With started, it returns once started is closed (by the handler), without a
// result.
func (x *exampleExecutor) fire(t *executorv1.Trigger, started ...chan struct{}) (sdk.Result, []string, error) {
	conn, err := grpc.NewClient(x.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return sdk.Result{}, nil, err
	}
	defer conn.Close()
	client := executorv1.NewExecutorServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+exampleToken)
	resp, err := client.Run(ctx, &executorv1.RunRequest{Triggers: []*executorv1.Trigger{t}})
	if err != nil {
		return sdk.Result{}, nil, err
	}
	if ack := resp.GetAcks()[0]; ack.GetOutcome() != executorv1.RunOutcome_RUN_OUTCOME_ACCEPTED {
		return sdk.Result{}, nil, fmt.Errorf("fire %s: %v %s", t.GetTriggerId(), ack.GetOutcome(), ack.GetMessage())
	}
	for _, s := range started {
		select {
		case <-s:
			return sdk.Result{}, nil, nil
		case <-ctx.Done():
			return sdk.Result{}, nil, fmt.Errorf("fire %s did not start", t.GetTriggerId())
		}
	}
	var r sdk.Result
	select {
	case r = <-x.results:
	case <-ctx.Done():
		return sdk.Result{}, nil, fmt.Errorf("fire %s did not end", t.GetTriggerId())
	}
	logs, err := client.Log(ctx, &executorv1.LogRequest{TriggerId: t.GetTriggerId(), FromLine: 1})
	if err != nil {
		return sdk.Result{}, nil, err
	}
	return r, logs.GetLines(), nil
}
