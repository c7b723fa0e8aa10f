// Package firecheck says whether a scheduler kept its promise: given what the executors ran and
// what each job's schedule says should have run, it counts the fires lost, the fires run more than
// once, the runs off the schedule, the lateness of each run and, around replica kills, how long
// each partition the killed replica led went without a new fire. The failover test and the load tool (`jobmesh bench`) share it.
package firecheck

import (
	"fmt"
	"slices"
	"time"

	"github.com/jobmesh/jobmesh/internal/triggerid"
)

// Execution is one run of a fire as an executor saw it.
type Execution struct {
	// JobID and TriggerID name the fire.
	JobID     int64
	TriggerID string
	// ScheduledMs is when the fire was due, Unix ms.
	ScheduledMs int64
	// ArrivedNs is when the executor's handler got it, Unix ns (wall clock: it is compared with
	// scheduled times and kill times taken in other processes of the same machine).
	ArrivedNs int64
	// TriggerType says why it fired (CRON, MANUAL, RETRY, …).
	TriggerType string
}

// Arrived is ArrivedNs as a time.
func (e Execution) Arrived() time.Time { return time.Unix(0, e.ArrivedNs) }

// Lateness is how long after its scheduled time the fire reached the executor.
func (e Execution) Lateness() time.Duration {
	return time.Duration(e.ArrivedNs - e.ScheduledMs*int64(time.Millisecond))
}

// Grid is one job's schedule: fires at First + k·Period (Unix ms, k ≥ 0). Every fire of the grid
// from From to Until (inclusive) must run exactly once; fires outside that range are not counted
// as lost (the run had not settled, or the job was being stopped), but are still checked for
// doubles and for being on the grid.
type Grid struct {
	First, Period int64
	From, Until   int64
}

// onGrid says whether ms is one of the grid's fires.
func (g Grid) onGrid(ms int64) bool {
	return g.Period > 0 && ms >= g.First && (ms-g.First)%g.Period == 0
}

// checked says whether the fire at ms is one the check expects to have run.
func (g Grid) checked(ms int64) bool { return g.onGrid(ms) && ms >= g.From && ms <= g.Until }

// EachFire calls fn with every fire the grids expect to have run (scheduled within From and
// Until), by job id, then scheduled time.
func EachFire(grids map[int64]Grid, fn func(job, ms int64)) {
	ids := make([]int64, 0, len(grids))
	for id := range grids {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		g := grids[id]
		if g.Period <= 0 {
			continue
		}
		s := g.First
		if g.From > s {
			s += (g.From - s + g.Period - 1) / g.Period * g.Period
		}
		for ; s <= g.Until; s += g.Period {
			fn(id, s)
		}
	}
}

// Kill is one stop of a scheduler replica: a SIGKILL, or a graceful stop (SIGTERM, a clean exit,
// then a start again).
type Kill struct {
	// N numbers the kills from 1; Replica names the stopped replica.
	N       int
	Replica string
	// At is when the signal was sent.
	At time.Time
	// Graceful marks a SIGTERM stop, in which the replica hands its partitions over, rather than
	// a SIGKILL. Report.Gaps leaves it out.
	Graceful bool
	// Lead is the schedulers' dispatch lead: the stopped replica may have sent the fires of the
	// next Lead ahead of their time, and executors run them on time whatever became of it.
	Lead time.Duration
	// Partitions are the partitions the replica led just before At, and PartitionOf maps a job id
	// to its partition. With PartitionOf nil, the replica is the one leader of every job (a
	// scheduler without partitions) and the gap is measured over every job.
	Partitions  []int
	PartitionOf func(job int64) int
	// PartitionGaps is filled by Check when PartitionOf is set, one per Partitions: from At to
	// the first arrival of a fire of that partition scheduled more than Lead after At (the next
	// leader's first fire of it; a straggler the stopped replica had in flight, or a fire it had
	// sent ahead, does not count); 0 if none came.
	PartitionGaps []time.Duration
	// Gap is filled by Check: the worst of PartitionGaps, how long it took until every partition
	// the replica led fired again (0 if it led none or none fired again); without PartitionOf,
	// the same gap over the fires of every job.
	Gap time.Duration
	// Lost is filled by Check: lost fires scheduled at or after this kill and before the next.
	Lost int
}

// Unmeasured counts the kill's partitions with no later fire (PartitionGaps of 0).
func (k Kill) Unmeasured() int {
	n := 0
	for _, g := range k.PartitionGaps {
		if g == 0 {
			n++
		}
	}
	return n
}

// Report is what Check found.
type Report struct {
	// Executions is how many runs were given; Checked how many fires the grids expect; Executed
	// how many of those ran at least once.
	Executions, Checked, Executed int
	// Lost: expected fires that never ran. Doubled: fires (expected or not) that ran more than
	// once; DoubledSameID those that ran more than once under one trigger id (the executor's
	// de-duplication missed them). OffGrid: runs at a time the job's grid does not have, or of a
	// job without a grid.
	Lost, Doubled, DoubledSameID, OffGrid int
	// LostBeforeKills counts lost fires scheduled before the first kill.
	LostBeforeKills int
	// LostPerJob counts the lost fires by job id (nil when none was lost).
	LostPerJob map[int64]int
	// Kills are the kills given, with Gap and Lost filled.
	Kills []Kill
	// Lateness is the distribution of scheduled → arrived over the runs of expected fires.
	Lateness Dist
	// Up to ten examples of each problem, for the log.
	LostSamples, DoubledSamples, OffGridSamples []string
}

// Check compares execs with the grids (by job id) and the kills made meanwhile. A child fire
// (its trigger id names the parent job whose run fired it) is a fire of its own, not one of its
// job's scheduled fires, though it has its parent's scheduled time: it is checked for doubles
// only.
func Check(execs []Execution, grids map[int64]Grid, kills []Kill) *Report {
	type key struct {
		job    int64
		sched  int64
		parent int64
	}
	r := &Report{Executions: len(execs), Kills: slices.Clone(kills)}
	perFire := make(map[key]int, len(execs))
	perID := make(map[string]int, len(execs))
	late := make([]time.Duration, 0, len(execs))
	for _, e := range execs {
		id, _ := triggerid.Parse(e.TriggerID)
		perFire[key{e.JobID, e.ScheduledMs, id.Parent}]++
		perID[e.TriggerID]++
		if id.Parent != 0 {
			continue
		}
		g, ok := grids[e.JobID]
		if !ok || !g.onGrid(e.ScheduledMs) {
			r.OffGrid++
			if len(r.OffGridSamples) < 10 {
				r.OffGridSamples = append(r.OffGridSamples, fmt.Sprintf("job %d trigger %s (%s) scheduled %s", e.JobID, e.TriggerID, e.TriggerType, msTime(e.ScheduledMs)))
			}
			continue
		}
		if g.checked(e.ScheduledMs) {
			late = append(late, e.Lateness())
		}
	}
	for k, n := range perFire {
		if n > 1 {
			r.Doubled++
			if len(r.DoubledSamples) < 10 {
				what := ""
				if k.parent != 0 {
					what = fmt.Sprintf(" (child fire of job %d)", k.parent)
				}
				r.DoubledSamples = append(r.DoubledSamples, fmt.Sprintf("job %d scheduled %s%s ran %d times", k.job, msTime(k.sched), what, n))
			}
		}
	}
	for _, n := range perID {
		if n > 1 {
			r.DoubledSameID++
		}
	}
	EachFire(grids, func(id, s int64) {
		r.Checked++
		if perFire[key{id, s, 0}] > 0 {
			r.Executed++
			return
		}
		r.Lost++
		if r.LostPerJob == nil {
			r.LostPerJob = map[int64]int{}
		}
		r.LostPerJob[id]++
		i := lastKillBefore(kills, s)
		if i < 0 {
			r.LostBeforeKills++
		} else {
			r.Kills[i].Lost++
		}
		if len(r.LostSamples) < 10 {
			where := "before the first kill"
			if len(kills) == 0 {
				where = "no kills"
			} else if i >= 0 {
				k := kills[i]
				what := "kill"
				if k.Graceful {
					what = "graceful stop"
				}
				where = fmt.Sprintf("%v after %s %d of %s", time.UnixMilli(s).Sub(k.At).Round(time.Millisecond), what, k.N, k.Replica)
				if k.PartitionOf != nil {
					p := k.PartitionOf(id)
					led := "which it did not lead"
					if slices.Contains(k.Partitions, p) {
						led = "which it led"
					}
					where += fmt.Sprintf(", partition %d, %s", p, led)
				}
			}
			r.LostSamples = append(r.LostSamples, fmt.Sprintf("job %d scheduled %s (%s)", id, msTime(s), where))
		}
	})
	for i := range r.Kills {
		r.Kills[i].measureGaps(execs)
	}
	r.Lateness = NewDist(late)
	return r
}

// Expected counts the fires the grids expect (Check's Checked, without executions).
func Expected(grids map[int64]Grid) int {
	n := 0
	for _, g := range grids {
		if g.Period <= 0 || g.Until < g.First {
			continue
		}
		from := max(g.From, g.First)
		first := g.First + (from-g.First+g.Period-1)/g.Period*g.Period
		if first <= g.Until {
			n += int((g.Until-first)/g.Period) + 1
		}
	}
	return n
}

// measureGaps fills the kill's PartitionGaps and Gap from execs: per partition it led (or over
// every job, without PartitionOf), the first arrival after At of a fire scheduled more than Lead
// after At.
func (k *Kill) measureGaps(execs []Execution) {
	fromMs, atNs := k.At.Add(k.Lead).UnixMilli(), k.At.UnixNano()
	if k.PartitionOf == nil {
		for _, e := range execs {
			if e.ScheduledMs > fromMs && e.ArrivedNs > atNs {
				if g := time.Duration(e.ArrivedNs - atNs); k.Gap == 0 || g < k.Gap {
					k.Gap = g
				}
			}
		}
		return
	}
	first := make(map[int]time.Duration, len(k.Partitions)) // by partition: the earliest gap
	for _, p := range k.Partitions {
		first[p] = 0
	}
	for _, e := range execs {
		if e.ScheduledMs <= fromMs || e.ArrivedNs <= atNs {
			continue
		}
		p := k.PartitionOf(e.JobID)
		if cur, ok := first[p]; ok {
			if g := time.Duration(e.ArrivedNs - atNs); cur == 0 || g < cur {
				first[p] = g
			}
		}
	}
	k.PartitionGaps, k.Gap = make([]time.Duration, len(k.Partitions)), 0
	for i, p := range k.Partitions {
		k.PartitionGaps[i] = first[p]
		k.Gap = max(k.Gap, first[p])
	}
}

// Gaps returns the gaps of the SIGKILLs (not the graceful stops) that were measured (a kill with
// no later fire has none), sorted.
func (r *Report) Gaps() []time.Duration {
	var gaps []time.Duration
	for _, k := range r.Kills {
		if k.Gap > 0 && !k.Graceful {
			gaps = append(gaps, k.Gap)
		}
	}
	slices.Sort(gaps)
	return gaps
}

// lastKillBefore returns the index of the last kill at or before the Unix ms s, or -1.
func lastKillBefore(kills []Kill, s int64) int {
	i := -1
	for j, k := range kills {
		if k.At.UnixMilli() <= s {
			i = j
		}
	}
	return i
}

func msTime(ms int64) string { return time.UnixMilli(ms).UTC().Format("15:04:05.000") }

// FirstFire returns a job's first fire: the earliest point after createdMs of the grid of period
// that holds next. A job's next fire as read back after creating it may already be later than its
// first (a leader's pre-read can arm and advance it in between), so it anchors the grid but does
// not start it.
func FirstFire(next, createdMs, period int64) int64 {
	if period <= 0 || next <= createdMs {
		return next
	}
	return next - period*((next-createdMs-1)/period)
}
