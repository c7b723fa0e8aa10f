package sdk_test

import (
	"context"
	"fmt"
	"log/slog"
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
		return nil
	})
	if err := executor.Start(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	defer executor.Stop()

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
		fmt.Println(r.TriggerID, r.Status)
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
	// 7-1700000000000-0-0 SUCCESS
	// [invoicing shard 1 of 2]
}
