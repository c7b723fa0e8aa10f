package bench

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jobmesh/jobmesh/internal/cluster"
)

// ProcUsage is what one process (all incarnations of a restarted replica together) used during
// a window.
type ProcUsage struct {
	// Name is the process's name: etcd, registry, logsvc, gateway, scheduler-r1, agent-a1, …;
	// "postgres/<client>" sums the server processes serving the run's database for one client:
	// a service (logsvc, scheduler-r1, …), "autovacuum worker" and the like, or "other".
	Name string `json:"name"`
	// CPUSeconds is user + system CPU time within the window.
	CPUSeconds float64 `json:"cpu_seconds"`
	// CPUMicrosPerFire is CPUSeconds per fire executed in the window, in µs.
	CPUMicrosPerFire float64 `json:"cpu_us_per_fire"`
	// PeakRSSMB is the most resident memory the process has had (VmHWM), over its whole life;
	// not measured for postgres, whose shared memory makes it meaningless.
	PeakRSSMB float64 `json:"peak_rss_mb,omitempty"`
	// Apart marks the work the fires do rather than jobmesh's, which the step's CPU per fire
	// leaves out: the sink, and "<agent> scripts", the CPU of the scripts an agent ran (its
	// waited-for children's).
	Apart bool `json:"apart,omitempty"`
}

// scriptsSuffix names an agent's scripts' row: "agent-a1 scripts".
const scriptsSuffix = " scripts"

// windowStart notes every live process's CPU time (and the Postgres backends') as the new
// window's base.
func (t *topology) windowStart(ctx context.Context) {
	t.mu.Lock()
	members := slices.Clone(t.members)
	t.mu.Unlock()
	for _, m := range members {
		u, _ := m.proc.Usage() // a dead member answers its last reading: it adds nothing
		t.mu.Lock()
		m.base = u
		t.mu.Unlock()
	}
	base := map[int]time.Duration{}
	for pid, u := range t.postgresUsage(ctx) {
		base[pid] = u.CPU
	}
	var from int64
	if t.pg != nil {
		if err := t.pg.QueryRow(ctx, `SELECT coalesce(max(cursor), 0) FROM logs.completions`).Scan(&from); err != nil {
			t.log.Warn("completions cursor", "error", err)
		}
	}
	t.mu.Lock()
	t.pgBase = base
	t.completionsFrom = from
	t.mu.Unlock()
}

// windowUsage returns each process's use since windowStart, fires being the fires executed in
// the window (for the per-fire figure).
func (t *topology) windowUsage(ctx context.Context, fires int) []ProcUsage {
	t.mu.Lock()
	members := slices.Clone(t.members)
	t.mu.Unlock()
	byName := map[string]*ProcUsage{}
	var names []string
	add := func(name string, cpu time.Duration, peak int64) {
		p, ok := byName[name]
		if !ok {
			p = &ProcUsage{Name: name, Apart: name == sinkName || strings.HasSuffix(name, scriptsSuffix)}
			byName[name] = p
			names = append(names, name)
		}
		p.CPUSeconds += cpu.Seconds()
		p.PeakRSSMB = max(p.PeakRSSMB, float64(peak)/(1<<20))
	}
	for _, m := range members {
		u, _ := m.proc.Usage()
		t.mu.Lock()
		base := m.base
		t.mu.Unlock()
		add(m.name, max(u.CPU-base.CPU, 0), u.PeakRSS)
		if child := u.ChildCPU - base.ChildCPU; child > 0 {
			add(m.name+scriptsSuffix, child, 0)
		}
	}
	if pg := t.postgresUsage(ctx); len(pg) > 0 {
		cpu := map[string]time.Duration{}
		t.mu.Lock()
		for pid, b := range pg {
			cpu[b.client] += max(b.CPU-t.pgBase[pid], 0)
		}
		t.mu.Unlock()
		for _, c := range slices.Sorted(maps.Keys(cpu)) {
			add("postgres/"+c, cpu[c], 0)
		}
	}
	out := make([]ProcUsage, 0, len(names))
	for _, n := range names {
		p := byName[n]
		if fires > 0 {
			p.CPUMicrosPerFire = p.CPUSeconds * 1e6 / float64(fires)
		}
		out = append(out, *p)
	}
	return out
}

// pgBackend is one Postgres server process serving the run's database: whom it serves (see
// backends) and what it has used.
type pgBackend struct {
	client string
	cluster.Usage
}

// postgresUsage reads the usage of the Postgres server processes serving the run's database, by
// pid (none when the database is unknown or the server is not on this machine).
func (t *topology) postgresUsage(ctx context.Context) map[int]pgBackend {
	if t.pg == nil || t.dbName == "" {
		return nil
	}
	bs, err := backends(ctx, t.pg, t.dbName)
	if err != nil {
		t.log.Warn("postgres backends", "error", err)
		return nil
	}
	out := map[int]pgBackend{}
	for pid, client := range bs {
		if u, err := cluster.ReadUsage(pid); err == nil {
			out[pid] = pgBackend{client, u}
		}
	}
	return out
}
