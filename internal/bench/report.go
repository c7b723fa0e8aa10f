package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jobmesh/jobmesh/internal/firecheck"
)

// Report is what a run measured. Counts that could not be measured (logsvc's tables when the
// bench does not know the database) are -1.
type Report struct {
	Scenario string    `json:"scenario"`
	Preset   string    `json:"preset,omitempty"`
	Started  time.Time `json:"started"`
	Machine  Machine   `json:"machine"`
	Setup    Setup     `json:"setup"`
	// Steps are the measurement windows: one, or one per rate for ramp.
	Steps []Step `json:"steps"`
	// HighestHeld is ramp's highest rate whose step held the limits (0 if none did).
	HighestHeld float64   `json:"highest_held_fires_per_s,omitempty"`
	Failover    *Failover `json:"failover,omitempty"`
	Scale       *Scale    `json:"scale,omitempty"`
	// Problems are processes that crashed or did not stop cleanly.
	Problems []string `json:"problems,omitempty"`
	// Notes say what was not measured, or how.
	Notes []string `json:"notes,omitempty"`
}

// Machine is where the run ran.
type Machine struct {
	NProc     int    `json:"nproc"`
	CPU       string `json:"cpu"`
	MemoryMB  int64  `json:"memory_mb"`
	GoVersion string `json:"go_version"`
}

// Setup is the cluster and the load's shape.
type Setup struct {
	Target       bool    `json:"target"`
	Schedulers   int     `json:"schedulers"`
	Agents       int     `json:"agents"`
	Interval     string  `json:"interval"`
	CronFraction float64 `json:"cron_fraction"`
	Route        string  `json:"route"`
	SessionTTL   string  `json:"session_ttl,omitempty"`
	DispatchLead string  `json:"dispatch_lead,omitempty"`
	// Hold is how long each fire holds its agent.
	Hold string `json:"hold,omitempty"`
	// Handler is what each fire runs (noop, http, shell, python), and so where lateness and loss
	// are measured: noop in the bench agent's handler, the others at the sink.
	Handler string `json:"handler,omitempty"`
	// CreatedPerSecond is the rate at which the API created the jobs.
	CreatedPerSecond float64 `json:"api_jobs_created_per_s,omitempty"`
}

// Step is one measurement window.
type Step struct {
	TargetRate float64   `json:"target_fires_per_s"`
	Jobs       int       `json:"jobs"`
	From       time.Time `json:"from"`
	To         time.Time `json:"to"`
	Seconds    float64   `json:"seconds"`
	Fires      Fires     `json:"fires"`
	// LatenessMs is scheduled time → the agent's handler got the fire (handler noop), or the
	// fire's request arrived at the sink (the others), over the fires expected in the window.
	LatenessMs Percentiles `json:"lateness_ms"`
	// LatenessBySchedule splits LatenessMs: the FIX_RATE jobs' fires, spread over each second,
	// and the cron jobs' fires, which all fall on the same millisecond of each second.
	LatenessBySchedule []ScheduleLateness `json:"lateness_by_schedule,omitempty"`
	// EndToEndMs is scheduled time → logsvc published the run's completion (result and trigger
	// record stored), p50 and p99, over the completed runs.
	EndToEndMs Percentiles `json:"end_to_end_ms"`
	// StoredAfterSeconds is when, after the window's end, the stored counts were read: once every
	// executed fire's run was complete, or --store-wait passed.
	StoredAfterSeconds float64 `json:"stored_after_s,omitempty"`
	// Store sets the agents' executions against logsvc's runs, fire by fire (read with the
	// stored counts); nil when the bench does not know logsvc's database.
	Store *StoreCheck `json:"store,omitempty"`
	// CPUMicrosPerFire is every measured process's CPU time in the window per fire executed,
	// the sink's apart.
	CPUMicrosPerFire float64 `json:"cpu_us_per_fire"`
	// SinkCPUMicrosPerFire is the sink's CPU time per fire: the target's share, not jobmesh's
	// (0 with the noop handler, which has no sink).
	SinkCPUMicrosPerFire float64 `json:"sink_cpu_us_per_fire,omitempty"`
	// ScriptCPUMicrosPerFire is the CPU time per fire of the scripts the agents ran (the
	// interpreters' own, apart from the agents'; 0 without scripts).
	ScriptCPUMicrosPerFire float64     `json:"script_cpu_us_per_fire,omitempty"`
	Processes              []ProcUsage `json:"processes"`
	// LoadAvg is /proc/loadavg (1, 5, 15 min) at the window's end: the machine is shared.
	LoadAvg [3]float64 `json:"load_avg"`
	// Held and Why: ramp's verdict on the step.
	Held *bool  `json:"held,omitempty"`
	Why  string `json:"why,omitempty"`
	// Samples of what went wrong.
	LostSamples    []string `json:"lost_samples,omitempty"`
	DoubledSamples []string `json:"doubled_samples,omitempty"`
	OffGridSamples []string `json:"off_schedule_samples,omitempty"`
}

// Fires counts the fires of a window.
type Fires struct {
	// Expected: fires the jobs' schedules have in the window.
	Expected int `json:"expected"`
	// Dispatched and DispatchFailed: trigger records in logsvc with outcome OK and FAILED.
	Dispatched     int `json:"dispatched"`
	DispatchFailed int `json:"dispatch_failed"`
	// Executed: expected fires that reached an agent at least once.
	Executed int `json:"executed"`
	// Stored: successful results in logsvc's tables; Completed: runs with their trigger record
	// too, which logsvc published as completions (both read Step.StoredAfterSeconds after the
	// window).
	Stored    int `json:"stored"`
	Completed int `json:"completed"`
	// Lost: expected fires never executed. Doubled: fires executed more than once
	// (DoubledSameID under one trigger id). OffSchedule: runs the schedules do not have.
	Lost          int `json:"lost"`
	Doubled       int `json:"doubled"`
	DoubledSameID int `json:"doubled_same_trigger_id"`
	OffSchedule   int `json:"off_schedule"`
	// PerSecond is Executed per second of window.
	PerSecond float64 `json:"executed_per_s"`
}

// Percentiles of a duration, in ms; zero when not measured.
type Percentiles struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90,omitempty"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99_9,omitempty"`
	Max  float64 `json:"max,omitempty"`
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func percentilesOf(d firecheck.Dist) Percentiles {
	return Percentiles{P50: msOf(d.P50), P90: msOf(d.P90), P99: msOf(d.P99), P999: msOf(d.P999), Max: msOf(d.Max)}
}

// ScheduleLateness is the lateness of the fires of one kind of schedule.
type ScheduleLateness struct {
	// Schedule is "FIX_RATE" or "cron".
	Schedule string `json:"schedule"`
	// Fires counts the runs measured (the scheduled first runs of the window).
	Fires      int         `json:"fires"`
	LatenessMs Percentiles `json:"lateness_ms"`
}

// Failover is what the kills did.
type Failover struct {
	Kills int    `json:"kills"`
	Seed  uint64 `json:"seed"`
	// GapsMs: per kill, SIGKILL → the first arrival of a fire scheduled after it, for each
	// partition the killed replica led, the worst of them (0: none measured).
	GapsMs      []float64 `json:"gaps_ms"`
	GapMedianMs float64   `json:"gap_median_ms"`
	GapMaxMs    float64   `json:"gap_max_ms"`
	// LostPerKill: lost fires scheduled between each kill and the next.
	LostPerKill []int `json:"lost_per_kill"`
	// PartitionsPerKill: how many partitions each killed replica led (0 for every kill of a
	// scheduler without partitions, whose leader was killed).
	PartitionsPerKill []int `json:"partitions_per_kill,omitempty"`
}

// Scale is what the scale scenario measured beyond the fires.
type Scale struct {
	Jobs    int `json:"jobs"`
	APIJobs int `json:"api_jobs"`
	// InsertSeconds is how long the SQL insert of the other jobs took.
	InsertSeconds float64 `json:"insert_seconds"`
	// PreRead is the scheduler's pre-read scan duration over the window, from its metric;
	// nil when the scheduler exposes none.
	PreRead *Histogram `json:"preread_scan,omitempty"`
	// SchedulerRSSMaxMB is the leader's largest VmRSS sampled each second in the window;
	// SchedulerPeakRSSMB its VmHWM at the end.
	SchedulerRSSMaxMB  float64 `json:"scheduler_rss_max_mb"`
	SchedulerPeakRSSMB float64 `json:"scheduler_peak_rss_mb"`
}

// Histogram summarizes a Prometheus histogram's observations within a window. Percentiles are
// bucket upper bounds: "at most".
type Histogram struct {
	Metric string  `json:"metric"`
	Count  float64 `json:"count"`
	MeanMs float64 `json:"mean_ms"`
	P50Ms  float64 `json:"p50_at_most_ms"`
	P99Ms  float64 `json:"p99_at_most_ms"`
}

// machine reads what the machine is.
func machine() Machine {
	m := Machine{NProc: runtime.NumCPU(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				m.MemoryMB = kb / 1024
			}
		}
	}
	return m
}

// loadAvg reads /proc/loadavg.
func loadAvg() [3]float64 {
	var l [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return l
	}
	f := strings.Fields(string(b))
	for i := 0; i < 3 && i < len(f); i++ {
		l[i], _ = strconv.ParseFloat(f[i], 64)
	}
	return l
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteMarkdown writes the report as Markdown tables.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	title := "jobmesh bench " + r.Scenario
	if r.Preset != "" {
		title += " --preset " + r.Preset
	}
	fmt.Fprintf(&b, "### %s, %s\n\n", title, r.Started.UTC().Format("2006-01-02 15:04 UTC"))
	m, s := r.Machine, r.Setup
	where := "its own cluster"
	if s.Target {
		where = "a running cluster (--target)"
	}
	fmt.Fprintf(&b, "Machine: %d CPUs (%s), %.1f GiB, %s. Setup: %s; %d scheduler(s), %d agent(s); jobs every %s, %.0f%% cron, route %s",
		m.NProc, m.CPU, float64(m.MemoryMB)/1024, m.GoVersion, where, s.Schedulers, s.Agents, s.Interval, s.CronFraction*100, s.Route)
	if s.SessionTTL != "" {
		fmt.Fprintf(&b, ", session TTL %s", s.SessionTTL)
	}
	if s.DispatchLead != "" {
		fmt.Fprintf(&b, ", dispatch lead %s", s.DispatchLead)
	}
	switch s.Handler {
	case HandlerHTTP:
		b.WriteString(`; handler http (the agent's built-in "http" handler GETs the bench's sink): lateness and loss measured at the sink`)
	case HandlerShell:
		b.WriteString("; handler shell (a bash GLUE_SHELL script GETs the sink over /dev/tcp, then echoes a line): lateness and loss measured at the sink")
	case HandlerPython:
		b.WriteString("; handler python (a python3 GLUE_PYTHON script GETs the sink over a socket, then prints a line): lateness and loss measured at the sink")
	default:
		b.WriteString("; handler noop (the bench agent's own handler records each fire as it enters)")
	}
	if s.Hold != "" {
		fmt.Fprintf(&b, ", each fire holds %s", s.Hold)
	}
	if s.CreatedPerSecond > 0 {
		fmt.Fprintf(&b, "; the API created %.0f jobs/s", s.CreatedPerSecond)
	}
	b.WriteString(".\n\n")

	late := "lateness"
	if s.Handler != "" && s.Handler != HandlerNoop {
		late = "lateness at the sink"
	}
	fmt.Fprintf(&b, "| target fires/s | jobs | window s | expected | dispatched | executed | stored | complete | lost | doubled | executed/s | %s p50 / p90 / p99 / p99.9 / max ms | end-to-end p50 / p99 ms | CPU µs/fire | load 1m |", late)
	if r.Scenario == "ramp" {
		b.WriteString(" held |")
	}
	b.WriteString("\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|")
	if r.Scenario == "ramp" {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, st := range r.Steps {
		f, l, e := st.Fires, st.LatenessMs, st.EndToEndMs
		fmt.Fprintf(&b, "| %.0f | %d | %.1f | %d | %s | %d | %s | %s | %d | %d | %.0f | %s / %s / %s / %s / %s | %s / %s | %.0f | %.2f |",
			st.TargetRate, st.Jobs, st.Seconds, f.Expected, count(f.Dispatched), f.Executed, storedCell(st, f.Stored), storedCell(st, f.Completed), f.Lost, f.Doubled, f.PerSecond,
			ms(l.P50), ms(l.P90), ms(l.P99), ms(l.P999), ms(l.Max), ms(e.P50), ms(e.P99), st.CPUMicrosPerFire, st.LoadAvg[0])
		if r.Scenario == "ramp" {
			verdict := "yes"
			if st.Held != nil && !*st.Held {
				verdict = "no: " + st.Why
			}
			fmt.Fprintf(&b, " %s |", verdict)
		}
		b.WriteString("\n")
	}
	if r.Scenario == "ramp" {
		fmt.Fprintf(&b, "\nHighest rate held: **%.0f fires/s**.\n", r.HighestHeld)
	}
	for i, st := range r.Steps {
		c := st.Store
		if c == nil {
			continue
		}
		b.WriteString("\nStored against executed")
		if len(r.Steps) > 1 {
			fmt.Fprintf(&b, " (%.0f fires/s)", st.TargetRate)
		}
		fmt.Fprintf(&b, ": of %d fires executed, %d stored OK (%d without a trigger record), **%d stored failed**, %d undecided, %d not stored; "+
			"of %d not executed, %d stored with a reason (%d overloaded), **%d without one** (%d undecided)",
			c.Executed, c.OK, c.NoRecord, c.Failed, c.Undecided, c.NotStored, c.Lost, c.LostWithReason, c.LostOverloaded, c.LostNoReason, c.LostUndecided)
		if c.LostStoredOK > 0 {
			fmt.Fprintf(&b, ", %d stored OK", c.LostStoredOK)
		}
		if c.LinesPerRun > 0 {
			fmt.Fprintf(&b, "; output lines: every fire prints %d, **%d stored OK with fewer**", c.LinesPerRun, c.LinesShort)
		}
		b.WriteString(".\n")
		reasons := make([]string, 0, len(c.Reasons))
		for k := range c.Reasons {
			reasons = append(reasons, k)
		}
		slices.Sort(reasons)
		for _, k := range reasons {
			fmt.Fprintf(&b, "\n- lost with reason %q: %d", k, c.Reasons[k])
		}
		if i == len(r.Steps)-1 {
			for _, s := range c.LinesShortSamples {
				fmt.Fprintf(&b, "\n- stored OK with output lines missing: %s", s)
			}
			for _, s := range c.NoRecordSamples {
				fmt.Fprintf(&b, "\n- stored OK without a trigger record: %s", s)
			}
			for _, s := range c.FailedSamples {
				fmt.Fprintf(&b, "\n- executed but stored failed: %s", s)
			}
			for _, s := range c.NoReasonSamples {
				fmt.Fprintf(&b, "\n- lost without a reason: %s", s)
			}
		}
		if len(reasons)+len(c.NoRecordSamples)+len(c.FailedSamples)+len(c.NoReasonSamples) > 0 {
			b.WriteString("\n")
		}
	}
	if n := len(r.Steps); n > 0 && len(r.Steps[n-1].LatenessBySchedule) > 0 {
		b.WriteString("\nLateness by schedule")
		if n > 1 {
			b.WriteString(" (last step)")
		}
		b.WriteString(":\n\n| schedule | fires | lateness p50 / p90 / p99 / p99.9 / max ms |\n|---|---:|---|\n")
		for _, sl := range r.Steps[n-1].LatenessBySchedule {
			l := sl.LatenessMs
			fmt.Fprintf(&b, "| %s | %d | %s / %s / %s / %s / %s |\n", sl.Schedule, sl.Fires, ms(l.P50), ms(l.P90), ms(l.P99), ms(l.P999), ms(l.Max))
		}
	}
	if n := len(r.Steps); n > 0 {
		last := r.Steps[n-1]
		if n > 1 {
			fmt.Fprintf(&b, "\nProcesses in the last step (%.0f fires/s):\n", last.TargetRate)
		} else {
			b.WriteString("\nProcesses in the window:\n")
		}
		b.WriteString("\n| process | CPU s | CPU µs/fire | peak RSS MB |\n|---|---:|---:|---:|\n")
		var total float64
		var apart []ProcUsage
		row := func(name string, p ProcUsage) {
			rss := "–"
			if p.PeakRSSMB > 0 {
				rss = fmt.Sprintf("%.0f", p.PeakRSSMB)
			}
			fmt.Fprintf(&b, "| %s | %.2f | %.1f | %s |\n", name, p.CPUSeconds, p.CPUMicrosPerFire, rss)
		}
		for _, p := range last.Processes {
			if p.Apart {
				apart = append(apart, p)
				continue
			}
			row(p.Name, p)
			total += p.CPUSeconds
		}
		fmt.Fprintf(&b, "| **all** | %.2f | %.1f | |\n", total, last.CPUMicrosPerFire)
		for _, p := range apart {
			what := "the fires' scripts"
			if p.Name == sinkName {
				what = "the fires' target"
			}
			row(fmt.Sprintf("%s (%s, not in all)", p.Name, what), p)
		}
		for _, s := range last.LostSamples {
			fmt.Fprintf(&b, "\n- lost: %s", s)
		}
		for _, s := range last.DoubledSamples {
			fmt.Fprintf(&b, "\n- doubled: %s", s)
		}
		for _, s := range last.OffGridSamples {
			fmt.Fprintf(&b, "\n- off schedule: %s", s)
		}
		if len(last.LostSamples)+len(last.DoubledSamples)+len(last.OffGridSamples) > 0 {
			b.WriteString("\n")
		}
	}
	if f := r.Failover; f != nil {
		gaps := make([]string, len(f.GapsMs))
		for i, g := range f.GapsMs {
			gaps[i] = fmt.Sprintf("%.0f", g)
		}
		fmt.Fprintf(&b, "\nFailover: %d kills of random replicas (seed %d); gap SIGKILL → next fire of each partition the killed replica led, worst per kill: median %.0f ms, worst %.0f ms; gaps ms: %s; partitions led per kill: %v; lost per kill: %v.\n",
			f.Kills, f.Seed, f.GapMedianMs, f.GapMaxMs, strings.Join(gaps, ", "), f.PartitionsPerKill, f.LostPerKill)
	}
	if sc := r.Scale; sc != nil {
		fmt.Fprintf(&b, "\nScale: %d jobs stored (%d through the API, the rest by SQL INSERT … SELECT in %.1f s). Scheduler leader memory: largest VmRSS in the window %.0f MB, VmHWM %.0f MB.",
			sc.Jobs, sc.APIJobs, sc.InsertSeconds, sc.SchedulerRSSMaxMB, sc.SchedulerPeakRSSMB)
		if h := sc.PreRead; h != nil {
			fmt.Fprintf(&b, " Pre-read scans in the window (%s): %.0f, mean %.1f ms, p50 ≤ %s ms, p99 ≤ %s ms.", h.Metric, h.Count, h.MeanMs, ms(h.P50Ms), ms(h.P99Ms))
		}
		b.WriteString("\n")
	}
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "\n- **problem**: %s", p)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "\n- note: %s", n)
	}
	if len(r.Problems)+len(r.Notes) > 0 {
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// storedCell renders a stored count, with when it was read if some runs were missing.
func storedCell(st Step, n int) string {
	if n >= 0 && n < st.Fires.Executed {
		return fmt.Sprintf("%d (at +%.0f s)", n, st.StoredAfterSeconds)
	}
	return count(n)
}

// count renders a count, "n/a" when not measured.
func count(n int) string {
	if n < 0 {
		return "n/a"
	}
	return strconv.Itoa(n)
}

// ms renders milliseconds with a precision that suits their size.
func ms(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case v < 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}
