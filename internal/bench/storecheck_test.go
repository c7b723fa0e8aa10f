package bench

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/internal/firecheck"
	"github.com/jobmesh/jobmesh/services/logsvc"
)

// TestCheckStore: each expected fire is classed once by what the agents executed and what logsvc
// stored for it, whatever else is stored (other windows, other jobs, other attempts).
func TestCheckStore(t *testing.T) {
	t.Parallel()
	const (
		success = logsv1.RunStatus_RUN_STATUS_SUCCESS
		running = logsv1.RunStatus_RUN_STATUS_RUNNING
		fail    = logsv1.RunStatus_RUN_STATUS_FAIL
		timeout = logsv1.RunStatus_RUN_STATUS_TIMEOUT
		ok      = logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK
		failed  = logsv1.TriggerOutcome_TRIGGER_OUTCOME_FAILED
		unknown = logsv1.TriggerOutcome_TRIGGER_OUTCOME_UNKNOWN
	)
	// Job 1 fires at 1000, 2000, …, 10000 in the window [1000, 10000]; job 2 at 1500 only, job 3
	// at 2500 only.
	grids := map[int64]firecheck.Grid{1: {First: 1000, Period: 1000, From: 1000, Until: 10000},
		2: {First: 1500, Period: 100000, From: 1000, Until: 10000}, 3: {First: 2500, Period: 100000, From: 1000, Until: 10000}}
	ran := func(job, sched int64) firecheck.Execution {
		return firecheck.Execution{JobID: job, ScheduledMs: sched}
	}
	execs := []firecheck.Execution{ran(1, 1000), ran(1, 2000), ran(1, 3000), ran(1, 4000), ran(1, 5000), ran(1, 5000), ran(2, 1500), ran(3, 2500),
		ran(1, 11000)} // after the window: not counted
	run := func(id string, st logsv1.RunStatus, oc logsv1.TriggerOutcome, msg string) storedRun {
		return storedRun{TriggerID: id, Status: st, Outcome: oc, TriggerMsg: msg, Lines: 1}
	}
	runs := []storedRun{
		run("1-1000-0-0", success, ok, ""),
		run("1-1500-0-0", success, 0, ""),                                               // not an expected fire of job 1
		run("3-2500-0-0", success, 0, ""),                                               // executed, stored OK without its trigger record
		run("1-2000-0-0", fail, failed, "trigger failed: the fire reached no executor"), // executed, stored failed
		run("1-3000-0-0", timeout, ok, ""),                                              // executed, stored failed
		run("1-4000-0-0", running, unknown, ""),                                         // executed, undecided
		// 1-5000 executed twice, not stored.
		run("2-1500-0-0", success, failed, ""), // a FAILED trigger outcome on an executed fire
		run("1-6000-0-0", fail, failed, "overloaded: no executor accepted within 5s"),
		run("1-7000-0-0", fail, failed, "trigger failed: no executor registered"),
		run("1-8000-0-0", fail, ok, ""),         // failed without a message
		run("1-9000-0-0", running, unknown, ""), // undecided
		// 1-10000: no run.
		run("1-11000-0-0", success, ok, ""), // after the window
		run("4-2000-0-0", success, ok, ""),  // not a job of the grids
		run("manual-xyz", success, ok, ""),  // not a scheduler's trigger id
	}
	runs[2].Lines = 0 // 3-2500 executed and stored OK, its output line not stored
	c := checkStore(grids, execs, runs, 1)
	want := StoreCheck{Executed: 7, OK: 2, NoRecord: 1, Failed: 3, Undecided: 1, NotStored: 1,
		Lost: 5, LostWithReason: 2, LostOverloaded: 1, LostNoReason: 3, LostUndecided: 1, LinesPerRun: 1, LinesShort: 1}
	got := *c
	got.Reasons, got.NoRecordSamples, got.FailedSamples, got.NoReasonSamples, got.LinesShortSamples = nil, nil, nil, nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("checkStore = %+v\nwant %+v", got, want)
	}
	if len(c.Reasons) != 2 || c.Reasons["overloaded"] != 1 || c.Reasons["trigger failed"] != 1 {
		t.Errorf("reasons = %v, want overloaded 1, trigger failed 1", c.Reasons)
	}
	if len(c.NoRecordSamples) != 1 || c.NoRecordSamples[0] != "job 3 scheduled 00:00:02.500: 3-2500-0-0" {
		t.Errorf("no-record samples = %q", c.NoRecordSamples)
	}
	if len(c.LinesShortSamples) != 1 || c.LinesShortSamples[0] != "job 3 scheduled 00:00:02.500: 3-2500-0-0 has 0 of 1 lines" {
		t.Errorf("lines-short samples = %q", c.LinesShortSamples)
	}
	if len(c.FailedSamples) != 3 || !strings.Contains(c.FailedSamples[0], `job 1 scheduled 00:00:02.000: FAIL FAILED "trigger failed: the fire reached no executor"`) {
		t.Errorf("failed samples = %q", c.FailedSamples)
	}
	if len(c.NoReasonSamples) != 3 || !strings.Contains(c.NoReasonSamples[2], "job 1 scheduled 00:00:10.000: no run stored") {
		t.Errorf("no-reason samples = %q", c.NoReasonSamples)
	}
	// A fire whose first attempt failed and a later one succeeded, executed: the failed record
	// of a fire that ran is what the check is for.
	c = checkStore(map[int64]firecheck.Grid{1: {First: 1000, Period: 1000, From: 1000, Until: 1000}}, execs[:1],
		[]storedRun{run("1-1000-0-1", success, ok, ""), run("1-1000-0-0", fail, failed, "x")}, 1)
	if c.Executed != 1 || c.Failed != 1 {
		t.Errorf("a failed attempt beside a successful one: %+v, want it counted failed", c)
	}
}

// TestReadRuns reads the runs of the bench's jobs, and of no job yet, within the window by the
// time their trigger id names.
func TestReadRuns(t *testing.T) {
	t.Parallel()
	url := dbtest.NewPostgres(t)
	dbtest.Open(t, db.Config{URL: url}, "logs", logsvc.MigrationsFS())
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO logs.runs (trigger_id, job_id, scheduled_ms, status, trigger_outcome, trigger_message, handle_message) VALUES
		('1-1000-0-0', 1, 1000, 3, 2, 'overloaded: no executor accepted within 5s', ''),
		('1-3000-0-0', 1, 3000, 2, 1, '', ''),
		('2-1500-0-0', 0, 1700, 4, 0, '', 'timed out'),
		('4-1500-0-0', 4, 1500, 2, 1, '', ''),
		('probe-1', 1, 1500, 2, 1, '', '')`); err != nil {
		t.Fatal(err)
	}
	if err := setBenchJobs(ctx, conn, []int64{1, 2}); err != nil {
		t.Fatal(err)
	}
	runs, err := readRuns(ctx, conn, 1000, 2000)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(runs, func(a, b storedRun) int { return strings.Compare(a.TriggerID, b.TriggerID) })
	want := []storedRun{
		{TriggerID: "1-1000-0-0", Status: logsv1.RunStatus_RUN_STATUS_FAIL, Outcome: logsv1.TriggerOutcome_TRIGGER_OUTCOME_FAILED,
			TriggerMsg: "overloaded: no executor accepted within 5s"},
		{TriggerID: "2-1500-0-0", Status: logsv1.RunStatus_RUN_STATUS_TIMEOUT, HandleMsg: "timed out"},
	}
	if !slices.Equal(runs, want) {
		t.Errorf("readRuns = %+v\nwant %+v", runs, want)
	}
}
