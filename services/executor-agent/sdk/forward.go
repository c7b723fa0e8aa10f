package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
)

// ForwardTo returns a handler that runs fires on an application's HandlerService (the sidecar
// case: the application, in any language, serves the handlers and the agent does the rest).
// The application's log lines become the fire's log lines and its result the fire's result,
// message and outputs included (HandleResult.outputs, as Job.SetOutput takes them: outputs over
// its bounds fail the fire). The fire's workflow context reaches the application in its
// Trigger (context, workflow_instance_id, workflow_node_id).
// A timeout or kill cancels the Handle call, which asks the application to stop; the fire then
// ends TIMEOUT or KILLED whatever the application does.
func ForwardTo(client executorv1.HandlerServiceClient) HandlerFunc {
	return func(ctx context.Context, job *Job) error {
		var t *executorv1.Trigger
		if job.run != nil {
			t = job.run.t
		} else {
			t = &executorv1.Trigger{TriggerId: job.TriggerID, JobId: job.ID, GroupId: job.GroupID, Handler: job.Handler,
				Params: job.Params, ShardIndex: int32(job.ShardIndex), ShardTotal: int32(job.ShardTotal), Attempt: int32(job.Attempt),
				Context: job.Context, WorkflowInstanceId: job.WorkflowInstanceID, WorkflowNodeId: job.WorkflowNodeID}
		}
		stream, err := client.Handle(ctx, &executorv1.HandleRequest{Trigger: t})
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return fmt.Errorf("application handler %s: %w", job.Handler, err)
		}
		for {
			resp, err := stream.Recv()
			switch {
			case ctx.Err() != nil:
				return context.Cause(ctx)
			case errors.Is(err, io.EOF):
				return fmt.Errorf("application handler %s ended without a result", job.Handler)
			case err != nil:
				return fmt.Errorf("application handler %s: %w", job.Handler, err)
			}
			switch ev := resp.GetEvent().(type) {
			case *executorv1.HandleResponse_LogLine:
				if job.run != nil {
					job.run.logText(ev.LogLine)
				}
			case *executorv1.HandleResponse_Result:
				outs := ev.Result.GetOutputs()
				for _, k := range slices.Sorted(maps.Keys(outs)) {
					if err := job.SetOutput(k, outs[k]); err != nil {
						return fmt.Errorf("application handler %s: %w", job.Handler, err)
					}
				}
				if ev.Result.GetSuccess() {
					job.SetMessage(ev.Result.GetMessage())
					return nil
				}
				msg := ev.Result.GetMessage()
				if msg == "" {
					msg = "application handler " + job.Handler + " failed"
				}
				return errors.New(msg)
			}
		}
	}
}

// ForwardHandlers asks an application which handlers it serves (ListHandlers, retried until
// ctx ends) and registers each of them to be forwarded to it with ForwardTo. It returns the
// names registered.
func (e *Executor) ForwardHandlers(ctx context.Context, client executorv1.HandlerServiceClient) ([]string, error) {
	backoff := 100 * time.Millisecond
	for {
		resp, err := client.ListHandlers(ctx, &executorv1.ListHandlersRequest{})
		if err == nil {
			fwd := ForwardTo(client)
			for _, name := range resp.GetHandlers() {
				e.Handle(name, fwd)
			}
			return resp.GetHandlers(), nil
		}
		e.log.Warn("application's handler service not answering ListHandlers; retrying", "error", err, "backoff", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("list the application's handlers: %w", err)
		case <-t.C:
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}
