package cli

import (
	"bufio"
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"golang.org/x/term"
	"google.golang.org/protobuf/encoding/protojson"

	authv1 "github.com/jobmesh/jobmesh/gen/jobmesh/auth/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/xxlimport"
)

var commands = map[string]command{
	"login":               login,
	"logout":              logout,
	"jobs list":           jobsList,
	"jobs get":            jobByID("get"),
	"jobs start":          jobByID("start"),
	"jobs stop":           jobByID("stop"),
	"jobs delete":         jobByID("delete"),
	"jobs create":         jobsWrite(false),
	"jobs update":         jobsWrite(true),
	"jobs trigger":        jobsTrigger,
	"workflows list":      workflowsList,
	"workflows get":       workflowsGet,
	"workflows create":    workflowsCreate,
	"workflows trigger":   workflowsTrigger,
	"workflows instances": workflowsInstances,
	"workflows instance":  instanceOp("instance"),
	"workflows kill":      instanceOp("kill"),
	"workflows retry":     instanceOp("retry"),
	"runs list":           runsList,
	"runs tail":           runsTail,
	"runs kill":           runsKill,
	"executors list":      executorsList,
	"import xxl-job":      importXXLJob,
}

func login(fs *flag.FlagSet) func(context.Context, *client, []string) error {
	user := fs.String("user", "", "user `name` (required)")
	fromStdin := fs.Bool("password-stdin", false, "read the password from the first line of stdin (without it: a prompt on a terminal, else JOBMESH_PASSWORD)")
	return func(ctx context.Context, c *client, args []string) error {
		if len(args) > 0 {
			return usagef("login takes no arguments")
		}
		if *user == "" {
			return usagef("--user: required")
		}
		pw, err := c.password(*user, *fromStdin)
		if err != nil {
			return err
		}
		c.token = "" // a login presents none
		a, err := c.auth()
		if err != nil {
			return err
		}
		ctx, cancel := deadline(ctx)
		defer cancel()
		resp, err := a.Login(ctx, &authv1.LoginRequest{Username: *user, Password: pw})
		if err != nil {
			return err
		}
		c.cfg = Config{Token: resp.GetToken(), User: *user, Endpoint: c.endpoint, TLSCA: c.tlsCA}
		if err := saveConfig(c.cfgPath, c.cfg); err != nil {
			return fmt.Errorf("keep the token: %w", err)
		}
		if c.output == "json" {
			return c.printJSON(resp.GetUser())
		}
		fmt.Fprintf(c.stdout, "logged in to %s as %s (%s) until %s; token kept in %s\n", c.endpoint, *user,
			trimEnum(resp.GetUser().GetRole().String(), "ROLE_"), ts(resp.GetExpireTime()), c.cfgPath)
		return nil
	}
}

// password reads the login password: the first line of stdin with --password-stdin, else a
// prompt without echo when stdin is a terminal, else JOBMESH_PASSWORD.
func (c *client) password(user string, fromStdin bool) (string, error) {
	if fromStdin {
		line, err := bufio.NewReader(c.stdin).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return "", fmt.Errorf("--password-stdin: %w", err)
		}
		if pw := strings.TrimRight(line, "\r\n"); pw != "" {
			return pw, nil
		}
		return "", usagef("--password-stdin: stdin holds no password")
	}
	if f, ok := c.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprintf(c.stderr, "Password for %s at %s: ", user, c.endpoint)
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(c.stderr)
		if err != nil {
			return "", fmt.Errorf("read the password: %w", err)
		}
		if len(b) == 0 {
			return "", usagef("no password given")
		}
		return string(b), nil
	}
	if pw := os.Getenv("JOBMESH_PASSWORD"); pw != "" {
		return pw, nil
	}
	return "", usagef("no password: stdin is not a terminal to prompt on; pipe the password with --password-stdin, or set JOBMESH_PASSWORD")
}

func logout(*flag.FlagSet) func(context.Context, *client, []string) error {
	return func(ctx context.Context, c *client, args []string) error {
		if len(args) > 0 {
			return usagef("logout takes no arguments")
		}
		if c.token != "" {
			a, err := c.auth()
			if err != nil {
				return err
			}
			ctx, cancel := deadline(ctx)
			defer cancel()
			if _, err := a.Logout(ctx, &authv1.LogoutRequest{}); err != nil {
				return err
			}
		}
		c.cfg.Token, c.cfg.User = "", ""
		if err := saveConfig(c.cfgPath, c.cfg); err != nil {
			return err
		}
		if c.output == "table" {
			fmt.Fprintln(c.stdout, "logged out")
		}
		return nil
	}
}

var jobStatuses = map[string]schedulerv1.JobStatus{
	"":        schedulerv1.JobStatus_JOB_STATUS_UNSPECIFIED,
	"running": schedulerv1.JobStatus_JOB_STATUS_RUNNING,
	"stopped": schedulerv1.JobStatus_JOB_STATUS_STOPPED,
}

func jobsList(fs *flag.FlagSet) func(context.Context, *client, []string) error {
	var req schedulerv1.ListJobsRequest
	fs.Int64Var(&req.GroupId, "group", 0, "only jobs of the executor group with this `id`")
	st := fs.String("status", "", "only jobs in this `status`: running or stopped")
	fs.StringVar(&req.Name, "name", "", "only jobs whose name contains `text`")
	fs.StringVar(&req.Handler, "handler", "", "only jobs whose handler contains `text`")
	fs.StringVar(&req.Author, "author", "", "only jobs whose author contains `text`")
	limit := fs.Int("limit", 50, "show at most `n` jobs (all pages up to it)")
	return func(ctx context.Context, c *client, args []string) error {
		if len(args) > 0 {
			return usagef("jobs list takes no arguments")
		}
		s, ok := jobStatuses[*st]
		if !ok {
			return usagef("--status %q: want running or stopped", *st)
		}
		if *limit < 1 {
			return usagef("--limit %d: at least 1", *limit)
		}
		req.Status = s
		js, err := c.jobs()
		if err != nil {
			return err
		}
		out := &schedulerv1.ListJobsResponse{}
		out.Jobs, out.NextPageToken, err = collect(ctx, *limit, func(ctx context.Context, size int32, token string) ([]*schedulerv1.Job, string, error) {
			req.PageSize, req.PageToken = size, token
			resp, err := js.ListJobs(ctx, &req)
			out.TotalSize = resp.GetTotalSize()
			return resp.GetJobs(), resp.GetNextPageToken(), err
		})
		if err != nil {
			return err
		}
		if c.output == "json" {
			return c.printJSON(out)
		}
		rows := make([][]string, 0, len(out.Jobs))
		for _, j := range out.Jobs {
			rows = append(rows, []string{strconv.FormatInt(j.GetId(), 10), strconv.FormatInt(j.GetGroupId(), 10), j.GetName(),
				trimEnum(j.GetSchedule().GetType().String(), "SCHEDULE_TYPE_") + " " + j.GetSchedule().GetExpression(),
				jobHandler(j), trimEnum(j.GetStatus().String(), "JOB_STATUS_"), ts(j.GetNextFireTime())})
		}
		if err := c.table([]string{"ID", "GROUP", "NAME", "SCHEDULE", "HANDLER", "STATUS", "NEXT FIRE"}, rows); err != nil {
			return err
		}
		if int64(len(out.Jobs)) < out.TotalSize {
			fmt.Fprintf(c.stdout, "(%d of %d; --limit shows more)\n", len(out.Jobs), out.TotalSize)
		}
		return nil
	}
}

// collect reads pages (at most 500 items each, one call deadline each) until limit items or the
// last page; it returns the items and the token of the page after them ("" at the end).
func collect[T any](ctx context.Context, limit int, page func(ctx context.Context, size int32, token string) ([]T, string, error)) ([]T, string, error) {
	var (
		out   []T
		token string
	)
	for len(out) < limit {
		cctx, cancel := deadline(ctx)
		items, next, err := page(cctx, int32(min(limit-len(out), 500)), token)
		cancel()
		if err != nil {
			return nil, "", err
		}
		out, token = append(out, items...), next
		if next == "" {
			break
		}
	}
	return out, token, nil
}

func jobHandler(j *schedulerv1.Job) string {
	if j.GetGlueType() == schedulerv1.GlueType_GLUE_TYPE_BEAN {
		return j.GetHandler()
	}
	return trimEnum(j.GetGlueType().String(), "GLUE_TYPE_")
}

// jobByID is get, start, stop and delete: one job id in, the job (or nothing) out.
func jobByID(verb string) command {
	return func(*flag.FlagSet) func(context.Context, *client, []string) error {
		return func(ctx context.Context, c *client, args []string) error {
			id, err := oneID(args, "job")
			if err != nil {
				return err
			}
			js, err := c.jobs()
			if err != nil {
				return err
			}
			ctx, cancel := deadline(ctx)
			defer cancel()
			var j *schedulerv1.Job
			switch verb {
			case "get":
				resp, err := js.GetJob(ctx, &schedulerv1.GetJobRequest{Id: id})
				if err != nil {
					return err
				}
				j = resp.GetJob()
			case "start":
				resp, err := js.StartJob(ctx, &schedulerv1.StartJobRequest{Id: id})
				if err != nil {
					return err
				}
				j = resp.GetJob()
			case "stop":
				resp, err := js.StopJob(ctx, &schedulerv1.StopJobRequest{Id: id})
				if err != nil {
					return err
				}
				j = resp.GetJob()
			case "delete":
				if _, err := js.DeleteJob(ctx, &schedulerv1.DeleteJobRequest{Id: id}); err != nil {
					return err
				}
				if c.output == "table" {
					fmt.Fprintf(c.stdout, "job %d deleted\n", id)
				} else {
					fmt.Fprintf(c.stdout, "{\"id\": \"%d\", \"deleted\": true}\n", id)
				}
				return nil
			}
			return c.printJob(j)
		}
	}
}

func (c *client) printJob(j *schedulerv1.Job) error {
	if c.output == "json" {
		return c.printJSON(j)
	}
	rows := [][]string{
		{"id", strconv.FormatInt(j.GetId(), 10)}, {"name", j.GetName()}, {"group", strconv.FormatInt(j.GetGroupId(), 10)},
		{"schedule", trimEnum(j.GetSchedule().GetType().String(), "SCHEDULE_TYPE_") + " " + j.GetSchedule().GetExpression() + " " + j.GetSchedule().GetTimeZone()},
		{"handler", jobHandler(j)}, {"params", j.GetParams()}, {"route", trimEnum(j.GetRouteStrategy().String(), "ROUTE_STRATEGY_")},
		{"status", trimEnum(j.GetStatus().String(), "JOB_STATUS_")}, {"last fire", ts(j.GetLastFireTime())},
		{"next fire", ts(j.GetNextFireTime())}, {"version", strconv.FormatInt(j.GetVersion(), 10)},
	}
	return c.table([]string{"FIELD", "VALUE"}, rows)
}

// readJob reads a job from a JSON file (or stdin for "-"); unknown fields are refused.
func (c *client) readJob(path string) (*schedulerv1.Job, error) {
	var (
		b   []byte
		err error
	)
	if path == "-" {
		b, err = io.ReadAll(c.stdin)
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, usagef("-f %s: %v", path, err)
	}
	var j schedulerv1.Job
	if err := protojson.Unmarshal(b, &j); err != nil {
		return nil, usagef("-f %s: not a job: %v", path, err)
	}
	return &j, nil
}

func jobsWrite(update bool) command {
	return func(fs *flag.FlagSet) func(context.Context, *client, []string) error {
		file := fs.String("f", "", "`file` holding the job as JSON (- for stdin); required")
		return func(ctx context.Context, c *client, args []string) error {
			var id int64
			var err error
			if update {
				if id, err = oneID(args, "job"); err != nil {
					return err
				}
			} else if len(args) > 0 {
				return usagef("jobs create takes no arguments (the job comes from -f)")
			}
			if *file == "" {
				return usagef("-f: required")
			}
			j, err := c.readJob(*file)
			if err != nil {
				return err
			}
			js, err := c.jobs()
			if err != nil {
				return err
			}
			ctx, cancel := deadline(ctx)
			defer cancel()
			if !update {
				resp, err := js.CreateJob(ctx, &schedulerv1.CreateJobRequest{Job: j})
				if err != nil {
					return err
				}
				return c.printJob(resp.GetJob())
			}
			j.Id = id
			if j.GetVersion() == 0 { // not pinned by the file: update what is there now
				cur, err := js.GetJob(ctx, &schedulerv1.GetJobRequest{Id: id})
				if err != nil {
					return err
				}
				j.Version = cur.GetJob().GetVersion()
			}
			resp, err := js.UpdateJob(ctx, &schedulerv1.UpdateJobRequest{Job: j})
			if err != nil {
				return err
			}
			return c.printJob(resp.GetJob())
		}
	}
}

func jobsTrigger(fs *flag.FlagSet) func(context.Context, *client, []string) error {
	params := fs.String("params", "", "`params` of this fire (default: the job's)")
	addrs := fs.String("address", "", "comma-separated executor `addresses` to run on (default: the job's routing)")
	return func(ctx context.Context, c *client, args []string) error {
		id, err := oneID(args, "job")
		if err != nil {
			return err
		}
		req := &schedulerv1.TriggerJobRequest{Id: id, Params: *params}
		for _, a := range strings.Split(*addrs, ",") {
			if a = strings.TrimSpace(a); a != "" {
				req.Addresses = append(req.Addresses, a)
			}
		}
		js, err := c.jobs()
		if err != nil {
			return err
		}
		ctx, cancel := deadline(ctx)
		defer cancel()
		resp, err := js.TriggerJob(ctx, req)
		if err != nil {
			return err
		}
		if c.output == "json" {
			return c.printJSON(resp)
		}
		for _, t := range resp.GetTriggerIds() {
			fmt.Fprintln(c.stdout, t)
		}
		return nil
	}
}

var runStatuses = map[string]logsv1.RunStatus{
	"":        logsv1.RunStatus_RUN_STATUS_UNSPECIFIED,
	"running": logsv1.RunStatus_RUN_STATUS_RUNNING,
	"success": logsv1.RunStatus_RUN_STATUS_SUCCESS,
	"fail":    logsv1.RunStatus_RUN_STATUS_FAIL,
	"timeout": logsv1.RunStatus_RUN_STATUS_TIMEOUT,
	"killed":  logsv1.RunStatus_RUN_STATUS_KILLED,
	"skipped": logsv1.RunStatus_RUN_STATUS_SKIPPED,
}

func runsList(fs *flag.FlagSet) func(context.Context, *client, []string) error {
	var req logsv1.ListRunsRequest
	fs.Int64Var(&req.JobId, "job", 0, "only runs of the job with this `id`")
	fs.Int64Var(&req.GroupId, "group", 0, "only runs of the executor group with this `id`")
	st := fs.String("status", "", "only runs in this `status`: running, success, fail, timeout, killed or skipped")
	fs.StringVar(&req.ExecutorAddress, "executor", "", "only runs on the executor at this `address`")
	limit := fs.Int("limit", 50, "show at most `n` runs, newest first")
	return func(ctx context.Context, c *client, args []string) error {
		if len(args) > 0 {
			return usagef("runs list takes no arguments")
		}
		s, ok := runStatuses[*st]
		if !ok {
			return usagef("--status %q: want running, success, fail, timeout, killed or skipped", *st)
		}
		if *limit < 1 {
			return usagef("--limit %d: at least 1", *limit)
		}
		req.Status = s
		ls, err := c.logs()
		if err != nil {
			return err
		}
		out := &logsv1.ListRunsResponse{}
		out.Runs, out.NextPageToken, err = collect(ctx, *limit, func(ctx context.Context, size int32, token string) ([]*logsv1.Run, string, error) {
			req.PageSize, req.PageToken = size, token
			resp, err := ls.ListRuns(ctx, &req)
			return resp.GetRuns(), resp.GetNextPageToken(), err
		})
		if err != nil {
			return err
		}
		if c.output == "json" {
			return c.printJSON(out)
		}
		rows := make([][]string, 0, len(out.Runs))
		for _, r := range out.Runs {
			rows = append(rows, []string{r.GetId(), strconv.FormatInt(r.GetJobId(), 10), trimEnum(r.GetTriggerType().String(), "TRIGGER_TYPE_"),
				ts(r.GetScheduledTime()), r.GetExecutorAddress(), runStatus(r), oneLine(r.GetHandleMessage())})
		}
		return c.table([]string{"RUN", "JOB", "TYPE", "SCHEDULED", "EXECUTOR", "STATUS", "MESSAGE"}, rows)
	}
}

// runStatus is a run's status as runs list shows it: UNKNOWN for a running run whose dispatch
// was never answered, until the executor's report or logsvc's lost-run sweep decides it.
func runStatus(r *logsv1.Run) string {
	if r.GetStatus() == logsv1.RunStatus_RUN_STATUS_RUNNING && r.GetTriggerOutcome() == logsv1.TriggerOutcome_TRIGGER_OUTCOME_UNKNOWN {
		return "UNKNOWN"
	}
	return trimEnum(r.GetStatus().String(), "RUN_STATUS_")
}

func oneLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

func runsTail(fs *flag.FlagSet) func(context.Context, *client, []string) error {
	from := fs.Int64("from", 0, "first line `number` to show")
	return func(ctx context.Context, c *client, args []string) error {
		id, err := oneArg(args, "run id")
		if err != nil {
			return err
		}
		ls, err := c.logs()
		if err != nil {
			return err
		}
		st, err := ls.TailRun(ctx, &logsv1.TailRunRequest{Id: id, FromLine: *from})
		if err != nil {
			return err
		}
		final := logsv1.RunStatus_RUN_STATUS_UNSPECIFIED
		for {
			resp, err := st.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			for _, l := range resp.GetLines() {
				if c.output == "json" {
					if err := c.printJSONLine(l); err != nil {
						return err
					}
				} else {
					fmt.Fprintln(c.stdout, l.GetText())
				}
			}
			if resp.GetStatus() != logsv1.RunStatus_RUN_STATUS_UNSPECIFIED {
				final = resp.GetStatus()
			}
		}
		switch final {
		case logsv1.RunStatus_RUN_STATUS_SUCCESS, logsv1.RunStatus_RUN_STATUS_UNSPECIFIED, logsv1.RunStatus_RUN_STATUS_RUNNING:
			return nil
		}
		return runEnded{trimEnum(final.String(), "RUN_STATUS_")}
	}
}

func (c *client) printJSONLine(l *logsv1.LogLine) error {
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(l)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.stdout, "%s\n", b)
	return err
}

func runsKill(*flag.FlagSet) func(context.Context, *client, []string) error {
	return func(ctx context.Context, c *client, args []string) error {
		id, err := oneArg(args, "run id")
		if err != nil {
			return err
		}
		ls, err := c.logs()
		if err != nil {
			return err
		}
		ctx, cancel := deadline(ctx)
		defer cancel()
		resp, err := ls.KillRun(ctx, &logsv1.KillRunRequest{Id: id})
		if err != nil {
			return err
		}
		if c.output == "json" {
			return c.printJSON(resp)
		}
		if !resp.GetKilled() {
			return fmt.Errorf("run %s not killed: %s", id, resp.GetMessage())
		}
		fmt.Fprintf(c.stdout, "killed %s\n", id)
		return nil
	}
}

func executorsList(fs *flag.FlagSet) func(context.Context, *client, []string) error {
	app := fs.String("app", "", "only executors of this `app` (an executor group's app name)")
	return func(ctx context.Context, c *client, args []string) error {
		if len(args) > 0 {
			return usagef("executors list takes no arguments")
		}
		rs, err := c.registry()
		if err != nil {
			return err
		}
		ctx, cancel := deadline(ctx)
		defer cancel()
		resp, err := rs.ListExecutors(ctx, &registryv1.ListExecutorsRequest{AppName: *app})
		if err != nil {
			return err
		}
		if c.output == "json" {
			return c.printJSON(resp)
		}
		// RUNNING: the runs logsvc holds as running there; "?" when logsvc cannot say.
		running := map[string]string{}
		if ls, err := c.logs(); err == nil {
			if counts, err := ls.CountRunningRuns(ctx, &logsv1.CountRunningRunsRequest{}); err == nil {
				for _, x := range counts.GetExecutors() {
					running[x.GetExecutorAddress()] = strconv.FormatInt(x.GetRunning(), 10)
				}
			} else {
				running = nil
			}
		}
		rows := make([][]string, 0, len(resp.GetExecutors()))
		for _, e := range resp.GetExecutors() {
			n := "?"
			if running != nil {
				n = cmp.Or(running[e.GetAddress()], "0")
			}
			rows = append(rows, []string{e.GetAppName(), e.GetInstanceId(), e.GetAddress(), n, e.GetVersion(),
				ts(e.GetStartTime()), ts(e.GetLastSeenTime())})
		}
		return c.table([]string{"APP", "INSTANCE", "ADDRESS", "RUNNING", "VERSION", "STARTED", "LAST SEEN"}, rows)
	}
}

func importXXLJob(fs *flag.FlagSet) func(context.Context, *client, []string) error {
	dsn := fs.String("mysql", os.Getenv("JOBMESH_XXL_MYSQL"), "the XXL-JOB admin database as a Go MySQL `dsn`: user:password@tcp(host:3306)/xxl_job (JOBMESH_XXL_MYSQL)")
	dryRun := fs.Bool("dry-run", false, "print the plan (create, update or skip per object) and write nothing")
	zone := fs.String("time-zone", "", "IANA `zone` the XXL-JOB admin ran in, which its CRON jobs keep (e.g. Asia/Shanghai); required when there are CRON jobs")
	token := fs.String("access-token", os.Getenv("JOBMESH_XXL_ACCESS_TOKEN"), "the XXL-JOB admin's xxl.job.accessToken `token`, given to the imported groups that have none (JOBMESH_XXL_ACCESS_TOKEN)")
	return func(ctx context.Context, c *client, args []string) error {
		if len(args) > 0 {
			return usagef("import xxl-job takes no arguments")
		}
		if *dsn == "" {
			return usagef("--mysql: required: the XXL-JOB database, e.g. --mysql 'root:secret@tcp(127.0.0.1:3306)/xxl_job'")
		}
		cfg, err := mysql.ParseDSN(*dsn)
		if err != nil {
			return usagef("--mysql: %v", err)
		}
		if cfg.DBName == "" {
			return usagef("--mysql: name the database after the address: ...@tcp(host:3306)/xxl_job")
		}
		if cfg.Timeout == 0 {
			cfg.Timeout = 10 * time.Second
		}
		if *zone != "" {
			if _, err := time.LoadLocation(*zone); err != nil {
				return usagef("--time-zone %q: not an IANA time zone: %v", *zone, err)
			}
		}
		conn, err := mysql.NewConnector(cfg)
		if err != nil {
			return usagef("--mysql: %v", err)
		}
		db := sql.OpenDB(conn)
		defer db.Close()
		src, err := xxlimport.Read(ctx, db)
		if err != nil {
			return fmt.Errorf("--mysql %s@%s/%s: %w", cfg.User, cfg.Addr, cfg.DBName, err)
		}
		if src.HasCron() && *zone == "" {
			return usagef("--time-zone: required: XXL-JOB ran its CRON jobs in its admin's time zone, which the database does not record (e.g. --time-zone Asia/Shanghai, or UTC)")
		}
		rc, err := c.rest()
		if err != nil {
			return err
		}
		api := xxlimport.API{Jobs: schedulerv1.NewJobServiceClient(rc), Registry: registryv1.NewRegistryServiceClient(rc), Auth: authv1.NewAuthServiceClient(rc)}
		rep, err := xxlimport.Run(ctx, api, src, xxlimport.Options{DryRun: *dryRun, TimeZone: *zone, AccessToken: *token})
		if err != nil {
			return err
		}
		if c.output == "json" {
			b, err := json.MarshalIndent(rep, "", "  ")
			if err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "%s\n", b)
		} else if err := rep.WriteText(c.stdout); err != nil {
			return err
		}
		if n := rep.Failed(); n > 0 {
			return fmt.Errorf("%d of %d objects not imported as XXL-JOB has them (their errors are in the report)", n, len(rep.Items))
		}
		return nil
	}
}
