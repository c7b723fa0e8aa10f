package xxlimport_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"google.golang.org/protobuf/proto"

	authv1 "github.com/jobmesh/jobmesh/gen/jobmesh/auth/v1"
	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/cli"
	"github.com/jobmesh/jobmesh/internal/devstack"
	"github.com/jobmesh/jobmesh/internal/restconn"
	"github.com/jobmesh/jobmesh/internal/xxlimport"
)

const adminPassword = "correct horse battery staple"

// xxlDatabase creates a database of its own on the test MariaDB (JOBMESH_TEST_MYSQL_DSN, which
// scripts/mariadb.sh sets; default root at 127.0.0.1:3306), loads XXL-JOB 2.4's schema and seed
// rows into it, and returns a connection to it and its DSN. No MariaDB fails the test.
func xxlDatabase(t *testing.T) (*sql.DB, string) {
	t.Helper()
	base := os.Getenv("JOBMESH_TEST_MYSQL_DSN")
	if base == "" {
		base = "root@tcp(127.0.0.1:3306)/"
	}
	cfg, err := mysql.ParseDSN(base)
	if err != nil {
		t.Fatalf("JOBMESH_TEST_MYSQL_DSN %q: %v", base, err)
	}
	cfg.Timeout = 10 * time.Second
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "xxl_import_" + hex.EncodeToString(b)
	if _, err := admin.ExecContext(t.Context(), "CREATE DATABASE "+name+" CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"); err != nil {
		t.Fatalf("no MariaDB to test against at %s (source scripts/mariadb.sh; mariadb_ensure): %v", cfg.Addr, err)
	}
	t.Cleanup(func() {
		if db, err := sql.Open("mysql", cfg.FormatDSN()); err == nil {
			_, _ = db.Exec("DROP DATABASE " + name)
			db.Close()
		}
	})
	cfg.DBName = name
	dsn := cfg.FormatDSN()
	cfg.MultiStatements = true
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	schema, err := os.ReadFile("testdata/tables_xxl_job_2.4.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(t.Context(), string(schema)); err != nil {
		t.Fatalf("load XXL-JOB's schema: %v", err)
	}
	return db, dsn
}

// sampleRows are an XXL-JOB installation's groups, jobs, GLUE history and users, beside the
// schema's own seed rows (group 1, job 1, user 1 admin).
const sampleRows = `
INSERT INTO xxl_job_group (id, app_name, title, address_type, address_list, update_time) VALUES
 (2, 'billing', 'Billing', 0, 'http://10.0.0.7:9999/', NOW()),
 (3, 'legacy-manual', 'Legacy', 1, 'http://10.0.0.5:9999/,http://10.0.0.6:9998/', NOW()),
 (4, 'billing', 'Billing 2', 0, NULL, NOW());
INSERT INTO xxl_job_info (id, job_group, job_desc, add_time, update_time, author, alarm_email, schedule_type, schedule_conf,
  misfire_strategy, executor_route_strategy, executor_handler, executor_param, executor_block_strategy, executor_timeout,
  executor_fail_retry_count, glue_type, glue_source, glue_remark, glue_updatetime, child_jobid, trigger_status) VALUES
 (2, 2, 'nightly report', NOW(), NOW(), 'alice', 'ops@example.com, bad-address ,dev@example.com', 'CRON', '0 30 2 * * ?',
  'FIRE_ONCE_NOW', 'ROUND', 'reportHandler', 'p=1', 'DISCARD_LATER', 600, 3, 'BEAN', '', 'GLUE代码初始化', NOW(), '3,4,99', 1),
 (3, 2, 'heartbeat', NOW(), NOW(), 'bob', '', 'FIX_RATE', '30',
  'DO_NOTHING', 'SHARDING_BROADCAST', '', 'x', 'COVER_EARLY', 0, 0, 'GLUE_SHELL', 'echo three', 'third', NOW(), '', 1),
 (4, 3, 'manual only', NOW(), NOW(), 'carol', NULL, 'NONE', NULL,
  'DO_NOTHING', 'FAILOVER', '', '', 'SERIAL_EXECUTION', 0, 1, 'GLUE_PYTHON', 'print(1)', 'init', NOW(), NULL, 0),
 (5, 2, 'bad cron', NOW(), NOW(), 'dan', '', 'CRON', '0 0 25 * * ?',
  'DO_NOTHING', 'FIRST', 'h', '', 'SERIAL_EXECUTION', 0, 0, 'BEAN', '', '', NOW(), '', 1),
 (6, 4, 'second billing job', NOW(), NOW(), 'erin', '', 'NONE', '',
  'DO_NOTHING', 'LAST', 'h2', '', 'SERIAL_EXECUTION', 0, 0, 'BEAN', '', '', NOW(), '5', 0),
 (7, 1, 'groovy job', NOW(), NOW(), 'fay', '', 'NONE', '',
  'DO_NOTHING', 'FIRST', '', '', 'SERIAL_EXECUTION', 0, 0, 'GLUE_GROOVY', 'class A {}', 'g', NOW(), '', 0);
INSERT INTO xxl_job_logglue (id, job_id, glue_type, glue_source, glue_remark, add_time, update_time) VALUES
 (1, 3, 'GLUE_SHELL', 'echo one', 'first', NOW(), NOW()),
 (2, 3, 'GLUE_SHELL', 'echo two', 'second', NOW(), NOW()),
 (3, 4, 'GLUE_PYTHON', 'print(1)', 'init', NOW(), NOW());
INSERT INTO xxl_job_user (id, username, password, role, permission) VALUES
 (2, 'alice', 'e10adc3949ba59abbe56e057f20f883e', 0, '2,3'),
 (3, 'bob', 'e10adc3949ba59abbe56e057f20f883e', 1, NULL),
 (4, 'carol', 'e10adc3949ba59abbe56e057f20f883e', 0, '4,77');
`

// world is what jobmesh holds, for comparing before and after an import.
type world struct {
	groups map[string]*registryv1.ExecutorGroup
	jobs   map[string]*schedulerv1.Job
	glue   map[string][]*schedulerv1.GlueVersion
	users  map[string]*authv1.User
}

func snapshot(t *testing.T, api xxlimport.API) world {
	t.Helper()
	ctx := t.Context()
	w := world{groups: map[string]*registryv1.ExecutorGroup{}, jobs: map[string]*schedulerv1.Job{},
		glue: map[string][]*schedulerv1.GlueVersion{}, users: map[string]*authv1.User{}}
	gs, err := api.Registry.ListExecutorGroups(ctx, &registryv1.ListExecutorGroupsRequest{WithoutExecutors: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gs.GetGroups() {
		w.groups[g.GetAppName()] = g
	}
	js, err := api.Jobs.ListJobs(ctx, &schedulerv1.ListJobsRequest{PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range js.GetJobs() {
		if w.jobs[j.GetName()] != nil {
			t.Fatalf("two jobs named %q", j.GetName())
		}
		w.jobs[j.GetName()] = j
		vs, err := api.Jobs.ListGlueVersions(ctx, &schedulerv1.ListGlueVersionsRequest{JobId: j.GetId()})
		if err != nil {
			t.Fatal(err)
		}
		w.glue[j.GetName()] = vs.GetVersions()
	}
	us, err := api.Auth.ListUsers(ctx, &authv1.ListUsersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range us.GetUsers() {
		w.users[u.GetUsername()] = u
	}
	return w
}

// sameWorld fails unless nothing changed between a and b: every group, job (by version), GLUE
// version and user as it was.
func sameWorld(t *testing.T, what string, a, b world) {
	t.Helper()
	if len(a.groups) != len(b.groups) || len(a.jobs) != len(b.jobs) || len(a.users) != len(b.users) {
		t.Errorf("%s: groups %d -> %d, jobs %d -> %d, users %d -> %d", what, len(a.groups), len(b.groups), len(a.jobs), len(b.jobs), len(a.users), len(b.users))
	}
	for k, g := range a.groups {
		if h := b.groups[k]; h == nil || !h.GetUpdateTime().AsTime().Equal(g.GetUpdateTime().AsTime()) {
			t.Errorf("%s: group %s changed: %v -> %v", what, k, g, h)
		}
	}
	for k, j := range a.jobs {
		if h := b.jobs[k]; h == nil || h.GetVersion() != j.GetVersion() {
			t.Errorf("%s: job %q changed: version %d -> %d", what, k, j.GetVersion(), h.GetVersion())
		}
		if len(a.glue[k]) != len(b.glue[k]) {
			t.Errorf("%s: job %q GLUE versions %d -> %d", what, k, len(a.glue[k]), len(b.glue[k]))
		}
	}
	for k, u := range a.users {
		if v := b.users[k]; v == nil || v.GetRole() != u.GetRole() || !slices.Equal(v.GetGroupIds(), u.GetGroupIds()) {
			t.Errorf("%s: user %s changed: %v -> %v", what, k, u, v)
		}
	}
}

// TestImportXXLJob loads XXL-JOB's schema and an installation's rows into MariaDB, imports it
// into a jobmesh dev stack with the CLI command, checks every mapped field, imports again and
// checks nothing changed, and checks that a dry run plans the changes of the XXL-JOB database
// and writes nothing.
func TestImportXXLJob(t *testing.T) {
	db, dsn := xxlDatabase(t)
	if _, err := db.ExecContext(t.Context(), sampleRows); err != nil {
		t.Fatalf("sample rows: %v", err)
	}
	t.Setenv("JOBMESH_CONFIG", filepath.Join(t.TempDir(), "config.json"))
	for _, v := range []string{"JOBMESH_TOKEN", "JOBMESH_ENDPOINT", "JOBMESH_TLS_CA", "JOBMESH_PASSWORD", "JOBMESH_XXL_MYSQL", "JOBMESH_XXL_ACCESS_TOKEN"} {
		t.Setenv(v, "")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	any0 := "127.0.0.1:0"
	st, err := devstack.Start(ctx, devstack.Config{
		DataDir: t.TempDir(), UnsafeEtcd: true, AdminPassword: adminPassword,
		HTTPAddr: any0, SchedulerAddr: any0, RegistryAddr: any0, LogsAddr: any0, AuthAddr: any0, AgentAddr: any0, EtcdAddr: any0,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	endpoint := "http://" + st.HTTPAddr
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := cli.Run(ctx, append(args, "--endpoint", endpoint), strings.NewReader(adminPassword+"\n"), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	if code, out, errOut := run("login", "--user", "admin", "--password-stdin"); code != 0 {
		t.Fatalf("login: %d %s%s", code, out, errOut)
	}
	anon, err := restconn.New(endpoint, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	login, err := authv1.NewAuthServiceClient(anon).Login(ctx, &authv1.LoginRequest{Username: "admin", Password: adminPassword})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := restconn.New(endpoint, nil, login.GetToken())
	if err != nil {
		t.Fatal(err)
	}
	api := xxlimport.API{Jobs: schedulerv1.NewJobServiceClient(rc), Registry: registryv1.NewRegistryServiceClient(rc), Auth: authv1.NewAuthServiceClient(rc)}
	before := snapshot(t, api)

	// CRON jobs need the admin's time zone; a bad DSN names --mysql.
	if code, _, errOut := run("import", "xxl-job", "--mysql", dsn); code != cli.ExitUsage || !strings.Contains(errOut, "--time-zone") {
		t.Errorf("import without --time-zone = exit %d (%q), want %d naming --time-zone", code, errOut, cli.ExitUsage)
	}
	if code, _, errOut := run("import", "xxl-job", "--mysql", "not a dsn", "--time-zone", "UTC"); code != cli.ExitUsage || !strings.Contains(errOut, "--mysql") {
		t.Errorf("import with a bad DSN = exit %d (%q), want %d naming --mysql", code, errOut, cli.ExitUsage)
	}
	sameWorld(t, "refused command lines", before, snapshot(t, api))

	importArgs := []string{"import", "xxl-job", "--mysql", dsn, "--time-zone", "Asia/Shanghai", "--access-token", "xxl-secret-token"}
	report := func(extra ...string) (int, xxlimport.Report, string) {
		t.Helper()
		code, out, errOut := run(append(append(slices.Clone(importArgs), extra...), "-o", "json")...)
		var rep xxlimport.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("import -o json printed %q (%s): %v", out, errOut, err)
		}
		return code, rep, errOut
	}
	item := func(rep xxlimport.Report, kind string, id int64) *xxlimport.Item {
		t.Helper()
		for _, it := range rep.Items {
			if it.Kind == kind && it.XXLID == id {
				return it
			}
		}
		t.Fatalf("the report has no %s %d: %+v", kind, id, rep.Items)
		return nil
	}

	// A dry run of the whole import writes nothing and plans every object.
	code, plan, _ := report("--dry-run")
	if !plan.DryRun || code != 1 {
		t.Errorf("dry run: exit %d, dry_run %v; want exit 1 (the bad cron) in a dry run", code, plan.DryRun)
	}
	for _, c := range []struct {
		kind string
		id   int64
		want xxlimport.Action
	}{{"group", 1, xxlimport.Create}, {"group", 4, xxlimport.Skip}, {"job", 2, xxlimport.Create}, {"job", 5, xxlimport.Fail},
		{"user", 1, xxlimport.Skip}, {"user", 2, xxlimport.Create}} {
		if got := item(plan, c.kind, c.id).Action; got != c.want {
			t.Errorf("dry run: %s %d: %s, want %s", c.kind, c.id, got, c.want)
		}
	}
	if e := item(plan, "job", 5).Error; !strings.Contains(e, "schedule.expression") {
		t.Errorf("dry run: the bad cron's error %q does not name schedule.expression", e)
	}
	sameWorld(t, "dry run", before, snapshot(t, api))

	// The import.
	code, rep, errOut := report()
	if code != 1 || !strings.Contains(errOut, "not imported") {
		t.Errorf("import = exit %d (%q), want 1: the bad cron is not imported", code, errOut)
	}
	var first bytes.Buffer
	if err := rep.WriteText(&first); err != nil {
		t.Fatal(err)
	}
	t.Logf("the import's report:\n%s", first.String())
	after := snapshot(t, api)
	checkGroups(t, after, rep, item)
	checkJobs(t, after, rep, item)
	checkUsers(t, after, rep, item, anon)

	// Again: nothing changes, and the report says so.
	code, again, _ := report()
	if code != 1 {
		t.Errorf("second import = exit %d, want 1 (the bad cron again)", code)
	}
	for _, it := range again.Items {
		if it.Action == xxlimport.Create || it.Action == xxlimport.Update {
			t.Errorf("second import: %s %d %q: %s %v", it.Kind, it.XXLID, it.Name, it.Action, it.Changes)
		}
	}
	sameWorld(t, "second import", after, snapshot(t, api))
	var text bytes.Buffer
	if err := again.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "jobs 0 create, 0 update, ") {
		t.Errorf("second import's text report:\n%s", text.String())
	}

	// XXL-JOB changes: a job's params emptied and its retries changed, a new job, a new user.
	if _, err := db.ExecContext(ctx, `UPDATE xxl_job_info SET executor_param = '', executor_fail_retry_count = 0 WHERE id = 2;
		INSERT INTO xxl_job_info (id, job_group, job_desc, schedule_type, schedule_conf, executor_route_strategy, executor_handler,
		  executor_block_strategy, glue_type, glue_source, glue_remark, child_jobid, trigger_status)
		  VALUES (8, 1, 'new job', 'FIX_RATE', '60', 'RANDOM', 'newHandler', 'SERIAL_EXECUTION', 'BEAN', '', '', '', 0);
		INSERT INTO xxl_job_user (id, username, password, role, permission) VALUES (5, 'dave', 'x', 0, '1')`); err != nil {
		t.Fatal(err)
	}
	_, plan, _ = report("--dry-run")
	if it := item(plan, "job", 2); it.Action != xxlimport.Update || !slices.Equal(it.Changes, []string{"params", "retry_count"}) {
		t.Errorf("dry run after the change: job 2 %s %v, want update of params, retry_count", it.Action, it.Changes)
	}
	if item(plan, "job", 8).Action != xxlimport.Create || item(plan, "user", 5).Action != xxlimport.Create || item(plan, "job", 3).Action != xxlimport.Skip {
		t.Errorf("dry run after the change: job 8 %s, user 5 %s, job 3 %s; want create, create, skip",
			item(plan, "job", 8).Action, item(plan, "user", 5).Action, item(plan, "job", 3).Action)
	}
	sameWorld(t, "dry run after the change", after, snapshot(t, api))
	report()
	final := snapshot(t, api)
	if j := final.jobs["nightly report"]; j.GetParams() != "" || j.GetRetryCount() != 0 || j.GetRetryBackoff() != schedulerv1.RetryBackoff_RETRY_BACKOFF_NONE {
		t.Errorf("after the change: nightly report params %q retries %d, want none", j.GetParams(), j.GetRetryCount())
	}
	if j := final.jobs["new job"]; j == nil || j.GetHandler() != "newHandler" || j.GetGroupId() != final.groups["xxl-job-executor-sample"].GetId() {
		t.Errorf("after the change: new job %v", j)
	}
	if u := final.users["dave"]; u == nil || !slices.Equal(u.GetGroupIds(), []int64{final.groups["xxl-job-executor-sample"].GetId()}) {
		t.Errorf("after the change: dave %v", u)
	}
}

type itemOf func(rep xxlimport.Report, kind string, id int64) *xxlimport.Item

func checkGroups(t *testing.T, w world, rep xxlimport.Report, item itemOf) {
	t.Helper()
	for _, c := range []struct {
		app, title string
		typ        registryv1.AddressType
		addrs      []string
	}{
		{"xxl-job-executor-sample", "示例执行器", registryv1.AddressType_ADDRESS_TYPE_AUTO, nil},
		{"billing", "Billing", registryv1.AddressType_ADDRESS_TYPE_AUTO, nil},
		{"legacy-manual", "Legacy", registryv1.AddressType_ADDRESS_TYPE_MANUAL, []string{"http://10.0.0.5:9999/", "http://10.0.0.6:9998/"}},
	} {
		g := w.groups[c.app]
		if g == nil {
			t.Errorf("group %s not imported", c.app)
			continue
		}
		if g.GetTitle() != c.title || g.GetAddressType() != c.typ || !slices.Equal(g.GetManualAddresses(), c.addrs) || g.GetAccessToken() != "****" {
			t.Errorf("group %s = title %q, %s, addresses %v, token %q; want %q, %s, %v and a token", c.app, g.GetTitle(), g.GetAddressType(),
				g.GetManualAddresses(), g.GetAccessToken(), c.title, c.typ, c.addrs)
		}
	}
	if it := item(rep, "group", 4); it.Action != xxlimport.Skip || it.ID != w.groups["billing"].GetId() || len(it.Notes) == 0 {
		t.Errorf("group 4 (billing again): %+v, want skipped into billing with a note", it)
	}
	if it := item(rep, "group", 2); len(it.Notes) == 0 {
		t.Errorf("group 2: no note that the registered addresses are not imported")
	}
}

func checkJobs(t *testing.T, w world, rep xxlimport.Report, item itemOf) {
	t.Helper()
	sample, billing, manual := w.groups["xxl-job-executor-sample"].GetId(), w.groups["billing"].GetId(), w.groups["legacy-manual"].GetId()
	const (
		running = schedulerv1.JobStatus_JOB_STATUS_RUNNING
		stopped = schedulerv1.JobStatus_JOB_STATUS_STOPPED
	)
	for _, c := range []struct {
		name   string
		want   *schedulerv1.Job
		glue   []string // sources, newest first
		remark []string
	}{
		{"测试任务1", &schedulerv1.Job{GroupId: sample, Author: "XXL",
			Schedule:        &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_CRON, Expression: "0 0 0 * * ? *", TimeZone: "Asia/Shanghai"},
			MisfireStrategy: schedulerv1.MisfireStrategy_MISFIRE_STRATEGY_DO_NOTHING, RouteStrategy: schedulerv1.RouteStrategy_ROUTE_STRATEGY_FIRST,
			Handler: "demoJobHandler", BlockStrategy: schedulerv1.BlockStrategy_BLOCK_STRATEGY_SERIAL_EXECUTION,
			GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN, GlueRemark: "GLUE代码初始化", Status: stopped}, nil, nil},
		{"nightly report", &schedulerv1.Job{GroupId: billing, Author: "alice", AlarmEmails: []string{"ops@example.com", "dev@example.com"},
			Schedule:        &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_CRON, Expression: "0 30 2 * * ?", TimeZone: "Asia/Shanghai"},
			MisfireStrategy: schedulerv1.MisfireStrategy_MISFIRE_STRATEGY_FIRE_ONCE_NOW, RouteStrategy: schedulerv1.RouteStrategy_ROUTE_STRATEGY_ROUND,
			Handler: "reportHandler", Params: "p=1", BlockStrategy: schedulerv1.BlockStrategy_BLOCK_STRATEGY_DISCARD_LATER,
			TimeoutSeconds: 600, RetryCount: 3, GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN, GlueRemark: "GLUE代码初始化",
			ChildJobIds: []int64{w.jobs["heartbeat"].GetId()}, Status: running}, nil, nil},
		{"heartbeat", &schedulerv1.Job{GroupId: billing, Author: "bob",
			Schedule:        &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_FIX_RATE, Expression: "30"},
			MisfireStrategy: schedulerv1.MisfireStrategy_MISFIRE_STRATEGY_DO_NOTHING, RouteStrategy: schedulerv1.RouteStrategy_ROUTE_STRATEGY_SHARDING_BROADCAST,
			Params: "x", BlockStrategy: schedulerv1.BlockStrategy_BLOCK_STRATEGY_COVER_EARLY,
			GlueType: schedulerv1.GlueType_GLUE_TYPE_GLUE_SHELL, GlueSource: "echo three", GlueRemark: "third", Status: running},
			[]string{"echo three", "echo two", "echo one"}, []string{"third", "second", "first"}},
		{"manual only", &schedulerv1.Job{GroupId: manual, Author: "carol",
			Schedule:        &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_NONE},
			MisfireStrategy: schedulerv1.MisfireStrategy_MISFIRE_STRATEGY_DO_NOTHING, RouteStrategy: schedulerv1.RouteStrategy_ROUTE_STRATEGY_FAILOVER,
			BlockStrategy: schedulerv1.BlockStrategy_BLOCK_STRATEGY_SERIAL_EXECUTION, RetryCount: 1,
			GlueType: schedulerv1.GlueType_GLUE_TYPE_GLUE_PYTHON, GlueSource: "print(1)", GlueRemark: "init", Status: stopped},
			[]string{"print(1)"}, []string{"init"}},
		{"second billing job", &schedulerv1.Job{GroupId: billing, Author: "erin",
			Schedule:        &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_NONE},
			MisfireStrategy: schedulerv1.MisfireStrategy_MISFIRE_STRATEGY_DO_NOTHING, RouteStrategy: schedulerv1.RouteStrategy_ROUTE_STRATEGY_LAST,
			Handler: "h2", BlockStrategy: schedulerv1.BlockStrategy_BLOCK_STRATEGY_SERIAL_EXECUTION,
			GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN, Status: stopped}, nil, nil},
	} {
		j := w.jobs[c.name]
		if j == nil {
			t.Errorf("job %q not imported", c.name)
			continue
		}
		got := &schedulerv1.Job{GroupId: j.GetGroupId(), Author: j.GetAuthor(), AlarmEmails: j.GetAlarmEmails(), Schedule: j.GetSchedule(),
			MisfireStrategy: j.GetMisfireStrategy(), RouteStrategy: j.GetRouteStrategy(), Handler: j.GetHandler(), Params: j.GetParams(),
			BlockStrategy: j.GetBlockStrategy(), TimeoutSeconds: j.GetTimeoutSeconds(), RetryCount: j.GetRetryCount(),
			GlueType: j.GetGlueType(), GlueSource: j.GetGlueSource(), GlueRemark: j.GetGlueRemark(), ChildJobIds: j.GetChildJobIds(), Status: j.GetStatus()}
		got.RetryBackoff, c.want.RetryBackoff = j.GetRetryBackoff(), schedulerv1.RetryBackoff_RETRY_BACKOFF_NONE
		if !proto.Equal(got, c.want) {
			t.Errorf("job %q:\n got %v\nwant %v", c.name, got, c.want)
		}
		var sources, remarks []string
		for _, v := range w.glue[c.name] {
			sources, remarks = append(sources, v.GetGlueSource()), append(remarks, v.GetGlueRemark())
		}
		if !slices.Equal(sources, c.glue) || !slices.Equal(remarks, c.remark) {
			t.Errorf("job %q GLUE versions %q %q, want %q %q", c.name, sources, remarks, c.glue, c.remark)
		}
	}
	// What could not come over is said: the bad email, the children left out.
	notes := strings.Join(item(rep, "job", 2).Notes, "\n")
	for _, want := range []string{"bad-address", "child job 4 is in another executor group", "child job 99: no such XXL-JOB job"} {
		if !strings.Contains(notes, want) {
			t.Errorf("job 2's notes %q do not say %q", notes, want)
		}
	}
	if notes := strings.Join(item(rep, "job", 6).Notes, "\n"); !strings.Contains(notes, "child job 5 was not imported") {
		t.Errorf("job 6's notes %q do not say its child 5 was not imported", notes)
	}
	// The cron jobmesh refuses is reported with the API's answer, and nothing of it is stored.
	if it := item(rep, "job", 5); it.Action != xxlimport.Fail || !strings.Contains(it.Error, "InvalidArgument") || !strings.Contains(it.Error, "schedule.expression") {
		t.Errorf("job 5 (bad cron): %+v, want an error with the API's InvalidArgument on schedule.expression", it)
	}
	if w.jobs["bad cron"] != nil {
		t.Errorf("the bad cron job was stored")
	}
	// GLUE_GROOVY is imported as it is (XXL-JOB executors run it).
	if g := w.jobs["groovy job"]; g == nil || g.GetGlueType() != schedulerv1.GlueType_GLUE_TYPE_GLUE_GROOVY || g.GetGlueSource() != "class A {}" {
		t.Errorf("groovy job = %v (report %+v), want it imported with its source", g, item(rep, "job", 7))
	}
}

func checkUsers(t *testing.T, w world, rep xxlimport.Report, item itemOf, anon *restconn.Conn) {
	t.Helper()
	billing, manual := w.groups["billing"].GetId(), w.groups["legacy-manual"].GetId()
	for _, c := range []struct {
		name   string
		role   authv1.Role
		groups []int64
	}{
		{"admin", authv1.Role_ROLE_ADMIN, nil},
		{"alice", authv1.Role_ROLE_OPERATOR, []int64{billing, manual}},
		{"bob", authv1.Role_ROLE_ADMIN, nil},
		{"carol", authv1.Role_ROLE_OPERATOR, []int64{billing}},
	} {
		u := w.users[c.name]
		if u == nil {
			t.Errorf("user %s not imported", c.name)
			continue
		}
		if u.GetRole() != c.role || !slices.Equal(slices.Sorted(slices.Values(u.GetGroupIds())), slices.Sorted(slices.Values(c.groups))) {
			t.Errorf("user %s = %s %v, want %s %v", c.name, u.GetRole(), u.GetGroupIds(), c.role, c.groups)
		}
	}
	if it := item(rep, "user", 1); it.Action != xxlimport.Skip {
		t.Errorf("user admin: %s, want skip (jobmesh has an admin admin)", it.Action)
	}
	if notes := strings.Join(item(rep, "user", 4).Notes, "\n"); !strings.Contains(notes, `permission "77"`) || !strings.Contains(notes, "reset-password") {
		t.Errorf("carol's notes %q: want the unknown group 77 and how to set a password", notes)
	}
	// XXL-JOB's password (its hash, or what it hashes) does not log in: they must get a new one.
	for _, pw := range []string{"123456", "e10adc3949ba59abbe56e057f20f883e"} {
		if _, err := authv1.NewAuthServiceClient(anon).Login(t.Context(), &authv1.LoginRequest{Username: "alice", Password: pw}); err == nil {
			t.Errorf("alice logs in with %q", pw)
		}
	}
}

// TestReadXXLJob35 reads a database migrated to XXL-JOB 3.5's names (title and job_desc renamed
// name, a token per group), and refuses a database without XXL-JOB's tables.
func TestReadXXLJob35(t *testing.T) {
	db, _ := xxlDatabase(t)
	ctx := t.Context()
	if _, err := db.ExecContext(ctx, `ALTER TABLE xxl_job_group CHANGE title name varchar(64) NOT NULL, ADD access_token varchar(255) DEFAULT NULL;
		ALTER TABLE xxl_job_info CHANGE job_desc name varchar(255) NOT NULL;
		UPDATE xxl_job_group SET access_token = 'group-token' WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	src, err := xxlimport.Read(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if len(src.Groups) != 1 || src.Groups[0].Title != "示例执行器" || src.Groups[0].AccessToken != "group-token" {
		t.Errorf("groups = %+v", src.Groups)
	}
	if len(src.Jobs) != 1 || src.Jobs[0].Name != "测试任务1" || src.Jobs[0].ScheduleConf != "0 0 0 * * ? *" || !src.HasCron() {
		t.Errorf("jobs = %+v", src.Jobs)
	}
	if len(src.Users) != 1 || src.Users[0].Username != "admin" || src.Users[0].Role != 1 {
		t.Errorf("users = %+v", src.Users)
	}
	if _, err := db.ExecContext(ctx, `DROP TABLE xxl_job_user`); err != nil {
		t.Fatal(err)
	}
	if _, err := xxlimport.Read(ctx, db); err == nil || !strings.Contains(err.Error(), "xxl_job_user") {
		t.Errorf("Read without xxl_job_user = %v, want an error naming it", err)
	}
}
