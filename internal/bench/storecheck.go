package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/internal/firecheck"
	"github.com/jobmesh/jobmesh/internal/triggerid"
)

// StoreCheck sets what the agents executed against what logsvc stored, fire by fire, for the
// expected fires of a window: whether a run that executed is stored as executed, and whether a
// fire that never executed is stored with the reason why. Categories within Executed and within
// Lost do not overlap, except the subsets LostOverloaded and LostUndecided.
type StoreCheck struct {
	// Executed counts the expected fires an agent executed at least once. Of those, OK are
	// stored SUCCESS; Failed are stored as failed although they executed (a run FAIL, TIMEOUT,
	// KILLED or SKIPPED, or a FAILED trigger outcome); Undecided are stored still running or with an
	// UNKNOWN dispatch; NotStored have no run.
	Executed int `json:"executed"`
	OK       int `json:"stored_ok"`
	// NoRecord counts the OK ones whose run has no trigger record (outcome unset): logsvc holds
	// the executor's result but has published no completion for it.
	NoRecord  int `json:"stored_ok_without_record"`
	Failed    int `json:"executed_but_failed"`
	Undecided int `json:"executed_undecided"`
	NotStored int `json:"executed_not_stored"`
	// Lost counts the expected fires no agent executed. Of those, LostWithReason are stored
	// failed with a message (LostOverloaded: the message says the executors were overloaded);
	// LostNoReason are not: no run, a run without a message, or one still undecided
	// (LostUndecided). LostStoredOK are stored SUCCESS although no agent executed them.
	Lost           int `json:"lost"`
	LostWithReason int `json:"lost_with_reason"`
	LostOverloaded int `json:"lost_overloaded"`
	LostNoReason   int `json:"lost_without_reason"`
	LostUndecided  int `json:"lost_undecided"`
	LostStoredOK   int `json:"lost_stored_ok"`
	// Reasons counts the messages of LostWithReason by their first words.
	Reasons map[string]int `json:"lost_reasons,omitempty"`
	// LinesPerRun is how many output lines each fire's handler prints (0 for the noop handler);
	// LinesShort counts the OK ones stored with fewer: output that executed but was not stored.
	LinesPerRun int `json:"lines_per_run"`
	LinesShort  int `json:"stored_ok_lines_short"`
	// Up to ten examples of NoRecord, Failed, LinesShort and LostNoReason.
	NoRecordSamples   []string `json:"stored_ok_without_record_samples,omitempty"`
	LinesShortSamples []string `json:"stored_ok_lines_short_samples,omitempty"`
	FailedSamples     []string `json:"executed_but_failed_samples,omitempty"`
	NoReasonSamples   []string `json:"lost_without_reason_samples,omitempty"`
}

// storedRun is one row of logsvc's runs for a fire of the bench's jobs.
type storedRun struct {
	TriggerID  string
	Status     logsv1.RunStatus
	Outcome    logsv1.TriggerOutcome
	TriggerMsg string
	HandleMsg  string
	// Lines counts the run's stored output lines.
	Lines int
}

// fireKey names a fire: its job and scheduled time.
type fireKey struct{ job, schedMs int64 }

// verdict is what a fire's stored runs say, worst first.
type verdict int

const (
	vNone      verdict = iota // no run
	vOK                       // a run stored SUCCESS
	vUndecided                // a run still running or UNKNOWN, none failed
	vFailed                   // a run stored failed
)

// failed says whether the run is stored as failed.
func (r storedRun) failed() bool {
	switch r.Status {
	case logsv1.RunStatus_RUN_STATUS_FAIL, logsv1.RunStatus_RUN_STATUS_TIMEOUT, logsv1.RunStatus_RUN_STATUS_KILLED,
		logsv1.RunStatus_RUN_STATUS_SKIPPED: // not run, and stored with why: a misfire its strategy skipped
		return true
	}
	return r.Outcome == logsv1.TriggerOutcome_TRIGGER_OUTCOME_FAILED
}

// message is the run's recorded reason: its trigger message, else its result's.
func (r storedRun) message() string {
	if r.TriggerMsg != "" {
		return r.TriggerMsg
	}
	return r.HandleMsg
}

// linesPerRun is how many output lines a fire of the handler prints: the http handler its request
// and the answer's status (the sink answers with an empty body), a script "hi".
func linesPerRun(handler string) int {
	switch handler {
	case HandlerHTTP:
		return 2
	case HandlerShell, HandlerPython:
		return 1
	}
	return 0
}

// checkStore classifies the expected fires of grids by what execs (the agents' records) and runs
// (logsvc's rows of the bench jobs' fires) say of them; a fire stored OK must have at least
// lines output lines stored.
func checkStore(grids map[int64]firecheck.Grid, execs []firecheck.Execution, runs []storedRun, lines int) *StoreCheck {
	executed := make(map[fireKey]bool, len(execs))
	for _, e := range execs {
		executed[fireKey{e.JobID, e.ScheduledMs}] = true
	}
	byFire := make(map[fireKey][]storedRun, len(runs))
	for _, r := range runs {
		job, sched, ok := parseFireID(r.TriggerID)
		if ok {
			byFire[fireKey{job, sched}] = append(byFire[fireKey{job, sched}], r)
		}
	}
	c := &StoreCheck{LinesPerRun: lines}
	firecheck.EachFire(grids, func(id, s int64) {
		k := fireKey{id, s}
		v, worst := judge(byFire[k])
		if executed[k] {
			c.Executed++
			switch v {
			case vOK:
				c.OK++
				if worst.Outcome == logsv1.TriggerOutcome_TRIGGER_OUTCOME_UNSPECIFIED {
					c.NoRecord++
					c.NoRecordSamples = sample(c.NoRecordSamples, fmt.Sprintf("job %d scheduled %s: %s", id, msClock(s), worst.TriggerID))
				}
				if worst.Lines < lines {
					c.LinesShort++
					c.LinesShortSamples = sample(c.LinesShortSamples, fmt.Sprintf("job %d scheduled %s: %s has %d of %d lines", id, msClock(s), worst.TriggerID, worst.Lines, lines))
				}
			case vFailed:
				c.Failed++
				c.FailedSamples = sample(c.FailedSamples, fmt.Sprintf("job %d scheduled %s: %s %s %q",
					id, msClock(s), shortEnum(worst.Status.String()), shortEnum(worst.Outcome.String()), worst.message()))
			case vUndecided:
				c.Undecided++
			default:
				c.NotStored++
			}
			return
		}
		c.Lost++
		switch {
		case v == vFailed && worst.message() != "":
			c.LostWithReason++
			msg := worst.message()
			if strings.Contains(strings.ToLower(msg), "overloaded") {
				c.LostOverloaded++
			}
			if c.Reasons == nil {
				c.Reasons = map[string]int{}
			}
			c.Reasons[reasonOf(msg)]++
		case v == vOK:
			c.LostStoredOK++
		default:
			c.LostNoReason++
			if v == vUndecided {
				c.LostUndecided++
			}
			what := "no run stored"
			if v != vNone {
				what = fmt.Sprintf("%s %s %q", shortEnum(worst.Status.String()), shortEnum(worst.Outcome.String()), worst.message())
			}
			c.NoReasonSamples = sample(c.NoReasonSamples, fmt.Sprintf("job %d scheduled %s: %s", id, msClock(s), what))
		}
	})
	return c
}

// judge returns what a fire's runs say, and the run that says it: a failed run over an
// undecided one over a successful one.
func judge(runs []storedRun) (verdict, storedRun) {
	v, worst := vNone, storedRun{}
	for _, r := range runs {
		var rv verdict
		switch {
		case r.failed():
			rv = vFailed
		case r.Status == logsv1.RunStatus_RUN_STATUS_SUCCESS:
			rv = vOK
		default:
			rv = vUndecided
		}
		if rv > v {
			v, worst = rv, r
		}
	}
	return v, worst
}

// parseFireID reads the job and scheduled ms of a scheduler's trigger id of a job's own fire
// (triggerid); ok is false for any other id, a child fire's too: its scheduled time is its
// parent's, not one of its job's.
func parseFireID(id string) (job, schedMs int64, ok bool) {
	t, ok := triggerid.Parse(id)
	if !ok || t.Parent != 0 {
		return 0, 0, false
	}
	return t.Job, t.ScheduledMs, true
}

// reasonOf is a message's first words, up to a colon: what kind of reason it gives.
func reasonOf(msg string) string {
	head, _, _ := strings.Cut(msg, ":")
	if f := strings.Fields(head); len(f) > 4 {
		head = strings.Join(f[:4], " ") + " …"
	}
	return strings.TrimSpace(head)
}

func sample(s []string, line string) []string {
	if len(s) < 10 {
		s = append(s, line)
	}
	return s
}

func shortEnum(name string) string {
	name = strings.TrimPrefix(name, "RUN_STATUS_")
	return strings.TrimPrefix(name, "TRIGGER_OUTCOME_")
}

func msClock(ms int64) string { return time.UnixMilli(ms).UTC().Format("15:04:05.000") }

// readRuns reads logsvc's runs of the bench's jobs (the temporary table bench_jobs, see
// setBenchJobs, and runs without a job, which checkStore matches by trigger id) whose trigger id
// names a time within [fromMs, toMs].
func readRuns(ctx context.Context, conn *pgx.Conn, fromMs, toMs int64) ([]storedRun, error) {
	rows, err := conn.Query(ctx, `SELECT r.trigger_id, r.status, r.trigger_outcome, r.trigger_message, r.handle_message,
		(SELECT count(*) FROM logs.run_lines l WHERE l.trigger_id = r.trigger_id)
		FROM logs.runs r WHERE r.job_id = 0 OR r.job_id IN (SELECT id FROM bench_jobs)`)
	if err != nil {
		return nil, fmt.Errorf("read runs: %w", err)
	}
	defer rows.Close()
	var out []storedRun
	for rows.Next() {
		var r storedRun
		var status, outcome int32
		if err := rows.Scan(&r.TriggerID, &status, &outcome, &r.TriggerMsg, &r.HandleMsg, &r.Lines); err != nil {
			return nil, fmt.Errorf("read runs: %w", err)
		}
		if _, sched, ok := parseFireID(r.TriggerID); !ok || sched < fromMs || sched > toMs {
			continue
		}
		r.Status, r.Outcome = logsv1.RunStatus(status), logsv1.TriggerOutcome(outcome)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read runs: %w", err)
	}
	return out, nil
}
