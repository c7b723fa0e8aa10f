package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/firecheck"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
)

// load is the bench's jobs and their schedules.
type load struct {
	mu    sync.Mutex
	grids map[int64]firecheck.Grid // by job id: First and Period
	cron  map[int64]bool           // the cron jobs (all fire at once, on the second)
	next  int                      // the next job's number, for names
}

func newLoad() *load {
	return &load{grids: map[int64]firecheck.Grid{}, cron: map[int64]bool{}}
}

// isCron says whether job id is one of the load's cron jobs.
func (l *load) isCron(id int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cron[id]
}

// jobs returns how many jobs the load has.
func (l *load) jobs() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.grids)
}

// ids returns the load's job ids.
func (l *load) ids() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]int64, 0, len(l.grids))
	for id := range l.grids {
		out = append(out, id)
	}
	return out
}

// window returns the grids with the window [fromMs, toMs] to check.
func (l *load) window(fromMs, toMs int64) map[int64]firecheck.Grid {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[int64]firecheck.Grid, len(l.grids))
	for id, g := range l.grids {
		g.From, g.Until = fromMs, toMs
		out[id] = g
	}
	return out
}

// jobsFor is how many jobs make rate fires per second at the configured interval.
func (c Config) jobsFor(rate float64) int {
	return max(1, int(rate*c.Interval.Seconds()+0.5))
}

// isCron says whether job number i (of the whole load) is a cron job: every 1/CronFraction-th.
func (c Config) isCron(i int) bool {
	f := c.CronFraction
	return f > 0 && int(float64(i+1)*f) > int(float64(i)*f)
}

// schedule is job number i's schedule.
func (c Config) schedule(i int) *schedulerv1.Schedule {
	if c.isCron(i) {
		return &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_CRON,
			Expression: fmt.Sprintf("0/%d * * * * ?", int(c.Interval/time.Second))}
	}
	return &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_FIX_RATE, Expression: c.Interval.String()}
}

// create creates n jobs through the JobService API, CreateWorkers at a time, and returns how
// long it took.
func (l *load) create(ctx context.Context, t *topology, n int) (time.Duration, error) {
	cfg := t.cfg
	r, err := t.leader(ctx, 60*time.Second)
	if err != nil {
		return 0, err
	}
	l.mu.Lock()
	first := l.next
	l.next += n
	l.mu.Unlock()
	period := cfg.Interval.Milliseconds()
	var next atomic.Int64
	next.Store(int64(first))
	start := time.Now()
	errs := make(chan error, cfg.CreateWorkers)
	var wg sync.WaitGroup
	for range cfg.CreateWorkers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= first+n || ctx.Err() != nil {
					return
				}
				job := &schedulerv1.Job{
					GroupId: t.groupID, Name: fmt.Sprintf("bench-%07d", i), Handler: benchHandler,
					GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN, Status: schedulerv1.JobStatus_JOB_STATUS_RUNNING,
					Schedule: cfg.schedule(i), MisfireStrategy: schedulerv1.MisfireStrategy_MISFIRE_STRATEGY_DO_NOTHING,
					RouteStrategy: cfg.route(),
				}
				switch cfg.Handler {
				case HandlerHTTP:
					job.Handler, job.Params = sdk.HTTPHandler, httpParams(t.sinkAddr, cfg.Hold)
				case HandlerShell:
					job.Handler, job.GlueType, job.GlueSource = "", schedulerv1.GlueType_GLUE_TYPE_GLUE_SHELL, shellScript(t.sinkAddr, cfg.Hold)
				case HandlerPython:
					job.Handler, job.GlueType, job.GlueSource = "", schedulerv1.GlueType_GLUE_TYPE_GLUE_PYTHON, pythonScript(t.sinkAddr, cfg.Hold)
				}
				resp, err := r.jobs.CreateJob(ctx, &schedulerv1.CreateJobRequest{Job: job})
				if err != nil {
					errs <- fmt.Errorf("create job %d: %w", i, err)
					return
				}
				j := resp.GetJob()
				if j.GetNextFireTime() == nil {
					errs <- fmt.Errorf("job %d created without a next fire", j.GetId())
					return
				}
				first := firecheck.FirstFire(j.GetNextFireTime().AsTime().UnixMilli(), j.GetCreateTime().AsTime().UnixMilli(), period)
				l.mu.Lock()
				l.grids[j.GetId()] = firecheck.Grid{Period: period, First: first}
				if cfg.isCron(i) {
					l.cron[j.GetId()] = true
				}
				l.mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return time.Since(start), errors.Join(all...)
}

// probe waits until the scheduler leader has routed a fire to every agent: a manual fire of a
// broadcast job, repeated until each agent has run one. Before that, scheduled fires could fail
// for want of an executor, which is not what the bench measures.
func (t *topology) probe(ctx context.Context) error {
	r, err := t.leader(ctx, 60*time.Second)
	if err != nil {
		return err
	}
	resp, err := r.jobs.CreateJob(ctx, &schedulerv1.CreateJobRequest{Job: &schedulerv1.Job{
		GroupId: t.groupID, Name: "bench-probe", Handler: probeHandler, GlueType: schedulerv1.GlueType_GLUE_TYPE_BEAN,
		Schedule:      &schedulerv1.Schedule{Type: schedulerv1.ScheduleType_SCHEDULE_TYPE_NONE},
		RouteStrategy: schedulerv1.RouteStrategy_ROUTE_STRATEGY_SHARDING_BROADCAST,
	}})
	if err != nil {
		return fmt.Errorf("create the probe job: %w", err)
	}
	id := resp.GetJob().GetId()
	t.probeID = id
	deadline := time.Now().Add(60 * time.Second)
	for {
		if time.Now().After(deadline) {
			return errors.New("the scheduler leader did not reach every bench agent within 60s")
		}
		if r, err = t.leader(ctx, 30*time.Second); err != nil {
			return err
		}
		if _, err := r.jobs.TriggerJob(ctx, &schedulerv1.TriggerJobRequest{Id: id}); err != nil {
			return fmt.Errorf("trigger the probe job: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		all := true
		for _, a := range t.agents {
			s, err := a.stats(ctx)
			if err != nil {
				return err
			}
			all = all && s.Probes > 0
		}
		if all {
			return nil
		}
	}
}
