package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
)

func (c *client) workflows() (schedulerv1.WorkflowServiceClient, error) {
	cc, err := c.rest()
	if err != nil {
		return nil, err
	}
	return schedulerv1.NewWorkflowServiceClient(cc), nil
}

func workflowsList(fs *flag.FlagSet) func(context.Context, *client, []string) error {
	var req schedulerv1.ListWorkflowsRequest
	fs.Int64Var(&req.GroupId, "group", 0, "only workflows of the executor group with this `id`")
	limit := fs.Int("limit", 50, "show at most `n` workflows (all pages up to it)")
	return func(ctx context.Context, c *client, args []string) error {
		if len(args) > 0 {
			return usagef("workflows list takes no arguments")
		}
		if *limit < 1 {
			return usagef("--limit %d: at least 1", *limit)
		}
		ws, err := c.workflows()
		if err != nil {
			return err
		}
		out := &schedulerv1.ListWorkflowsResponse{}
		out.Workflows, out.NextPageToken, err = collect(ctx, *limit, func(ctx context.Context, size int32, token string) ([]*schedulerv1.Workflow, string, error) {
			req.PageSize, req.PageToken = size, token
			resp, err := ws.ListWorkflows(ctx, &req)
			return resp.GetWorkflows(), resp.GetNextPageToken(), err
		})
		if err != nil {
			return err
		}
		if c.output == "json" {
			return c.printJSON(out)
		}
		rows := make([][]string, 0, len(out.Workflows))
		for _, w := range out.Workflows {
			rows = append(rows, []string{strconv.FormatInt(w.GetId(), 10), strconv.FormatInt(w.GetGroupId(), 10), w.GetName(),
				trimEnum(w.GetSchedule().GetType().String(), "SCHEDULE_TYPE_") + " " + w.GetSchedule().GetExpression(),
				strconv.Itoa(len(w.GetNodes())), strconv.FormatInt(w.GetVersion(), 10), trimEnum(w.GetStatus().String(), "JOB_STATUS_"),
				ts(w.GetNextFireTime())})
		}
		return c.table([]string{"ID", "GROUP", "NAME", "SCHEDULE", "NODES", "VERSION", "STATUS", "NEXT FIRE"}, rows)
	}
}

func workflowsGet(*flag.FlagSet) func(context.Context, *client, []string) error {
	return func(ctx context.Context, c *client, args []string) error {
		id, err := oneID(args, "workflow")
		if err != nil {
			return err
		}
		ws, err := c.workflows()
		if err != nil {
			return err
		}
		ctx, cancel := deadline(ctx)
		defer cancel()
		resp, err := ws.GetWorkflow(ctx, &schedulerv1.GetWorkflowRequest{Id: id})
		if err != nil {
			return err
		}
		return c.printWorkflow(resp.GetWorkflow())
	}
}

func (c *client) printWorkflow(w *schedulerv1.Workflow) error {
	if c.output == "json" {
		return c.printJSON(w)
	}
	rows := [][]string{
		{"id", strconv.FormatInt(w.GetId(), 10)}, {"name", w.GetName()}, {"group", strconv.FormatInt(w.GetGroupId(), 10)},
		{"schedule", trimEnum(w.GetSchedule().GetType().String(), "SCHEDULE_TYPE_") + " " + w.GetSchedule().GetExpression() + " " + w.GetSchedule().GetTimeZone()},
		{"status", trimEnum(w.GetStatus().String(), "JOB_STATUS_")}, {"version", strconv.FormatInt(w.GetVersion(), 10)},
		{"max concurrent", strconv.Itoa(int(w.GetMaxConcurrentInstances()))}, {"next fire", ts(w.GetNextFireTime())},
	}
	for _, n := range w.GetNodes() {
		rows = append(rows, []string{"node " + n.GetId(), fmt.Sprintf("job %d", n.GetJobId())})
	}
	for _, e := range w.GetEdges() {
		rows = append(rows, []string{"edge", e.GetFrom() + " → " + e.GetTo() + " " + trimEnum(e.GetCondition().String(), "EDGE_CONDITION_")})
	}
	return c.table([]string{"FIELD", "VALUE"}, rows)
}

func workflowsCreate(fs *flag.FlagSet) func(context.Context, *client, []string) error {
	file := fs.String("f", "", "`file` holding the workflow as JSON (- for stdin); required")
	return func(ctx context.Context, c *client, args []string) error {
		if len(args) > 0 {
			return usagef("workflows create takes no arguments (the workflow comes from -f)")
		}
		if *file == "" {
			return usagef("-f: required")
		}
		var (
			b   []byte
			err error
		)
		if *file == "-" {
			b, err = io.ReadAll(c.stdin)
		} else {
			b, err = os.ReadFile(*file)
		}
		if err != nil {
			return usagef("-f %s: %v", *file, err)
		}
		var w schedulerv1.Workflow
		if err := protojson.Unmarshal(b, &w); err != nil {
			return usagef("-f %s: not a workflow: %v", *file, err)
		}
		ws, err := c.workflows()
		if err != nil {
			return err
		}
		ctx, cancel := deadline(ctx)
		defer cancel()
		resp, err := ws.CreateWorkflow(ctx, &schedulerv1.CreateWorkflowRequest{Workflow: &w})
		if err != nil {
			return err
		}
		return c.printWorkflow(resp.GetWorkflow())
	}
}

func workflowsTrigger(fs *flag.FlagSet) func(context.Context, *client, []string) error {
	var params []string
	fs.Func("param", "`key=value` merged over the workflow's params (repeatable)", func(s string) error {
		if k, _, ok := strings.Cut(s, "="); !ok || k == "" {
			return fmt.Errorf("%q: want key=value", s)
		}
		params = append(params, s)
		return nil
	})
	return func(ctx context.Context, c *client, args []string) error {
		id, err := oneID(args, "workflow")
		if err != nil {
			return err
		}
		req := &schedulerv1.TriggerWorkflowRequest{Id: id, TriggerType: schedulerv1.TriggerType_TRIGGER_TYPE_MANUAL}
		for _, p := range params {
			k, v, _ := strings.Cut(p, "=")
			if req.Params == nil {
				req.Params = map[string]string{}
			}
			req.Params[k] = v
		}
		ws, err := c.workflows()
		if err != nil {
			return err
		}
		ctx, cancel := deadline(ctx)
		defer cancel()
		resp, err := ws.TriggerWorkflow(ctx, req)
		if err != nil {
			return err
		}
		return c.printInstance(resp.GetInstance())
	}
}

func workflowsInstances(fs *flag.FlagSet) func(context.Context, *client, []string) error {
	limit := fs.Int("limit", 20, "show at most `n` instances (all pages up to it)")
	return func(ctx context.Context, c *client, args []string) error {
		id, err := oneID(args, "workflow")
		if err != nil {
			return err
		}
		if *limit < 1 {
			return usagef("--limit %d: at least 1", *limit)
		}
		ws, err := c.workflows()
		if err != nil {
			return err
		}
		out := &schedulerv1.ListWorkflowInstancesResponse{}
		out.Instances, out.NextPageToken, err = collect(ctx, *limit, func(ctx context.Context, size int32, token string) ([]*schedulerv1.WorkflowInstance, string, error) {
			resp, err := ws.ListWorkflowInstances(ctx, &schedulerv1.ListWorkflowInstancesRequest{WorkflowId: id, PageSize: size, PageToken: token})
			return resp.GetInstances(), resp.GetNextPageToken(), err
		})
		if err != nil {
			return err
		}
		if c.output == "json" {
			return c.printJSON(out)
		}
		rows := make([][]string, 0, len(out.Instances))
		for _, in := range out.Instances {
			rows = append(rows, []string{in.GetId(), strconv.FormatInt(in.GetVersion(), 10),
				trimEnum(in.GetStatus().String(), "WORKFLOW_INSTANCE_STATUS_"), trimEnum(in.GetTriggerType().String(), "TRIGGER_TYPE_"),
				msTime(in.GetScheduledUnixMs()), msTime(in.GetEndUnixMs())})
		}
		return c.table([]string{"ID", "VERSION", "STATUS", "TRIGGER", "SCHEDULED", "ENDED"}, rows)
	}
}

// instanceOp is instance, kill and retry: one instance id in, the instance out.
func instanceOp(verb string) command {
	return func(*flag.FlagSet) func(context.Context, *client, []string) error {
		return func(ctx context.Context, c *client, args []string) error {
			id, err := oneArg(args, "instance id (w<workflow>-<ms>)")
			if err != nil {
				return err
			}
			ws, err := c.workflows()
			if err != nil {
				return err
			}
			ctx, cancel := deadline(ctx)
			defer cancel()
			var in *schedulerv1.WorkflowInstance
			switch verb {
			case "instance":
				resp, err := ws.GetWorkflowInstance(ctx, &schedulerv1.GetWorkflowInstanceRequest{Id: id})
				if err != nil {
					return err
				}
				in = resp.GetInstance()
			case "kill":
				resp, err := ws.KillWorkflowInstance(ctx, &schedulerv1.KillWorkflowInstanceRequest{Id: id})
				if err != nil {
					return err
				}
				in = resp.GetInstance()
			case "retry":
				resp, err := ws.RetryWorkflowInstance(ctx, &schedulerv1.RetryWorkflowInstanceRequest{Id: id})
				if err != nil {
					return err
				}
				in = resp.GetInstance()
			}
			return c.printInstance(in)
		}
	}
}

func (c *client) printInstance(in *schedulerv1.WorkflowInstance) error {
	if c.output == "json" {
		return c.printJSON(in)
	}
	fmt.Fprintf(c.stdout, "instance %s (workflow %d version %d): %s\n", in.GetId(), in.GetWorkflowId(), in.GetVersion(),
		trimEnum(in.GetStatus().String(), "WORKFLOW_INSTANCE_STATUS_"))
	rows := make([][]string, 0, len(in.GetNodes()))
	for _, n := range in.GetNodes() {
		rows = append(rows, []string{n.GetNodeId(), trimEnum(n.GetStatus().String(), "WORKFLOW_NODE_STATUS_"), or(n.GetTriggerId(), "-"),
			msTime(n.GetStartUnixMs()), msTime(n.GetEndUnixMs()), n.GetMessage()})
	}
	if len(rows) == 0 {
		return nil
	}
	return c.table([]string{"NODE", "STATUS", "RUN", "STARTED", "ENDED", "MESSAGE"}, rows)
}

// msTime shows a Unix ms time; "-" for 0.
func msTime(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).Local().Format("2006-01-02 15:04:05.000 MST")
}
