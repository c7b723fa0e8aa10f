package scheduler

import (
	"testing"

	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/schedule"
)

// TestFireKinds: every kind is kept in exactly one place until it settles (owed, pending_fires,
// or, for a manual trigger, nowhere), and a pending row read back is the kind that stored it.
func TestFireKinds(t *testing.T) {
	t.Parallel()
	for k := kindScheduled; k <= kindSkipped; k++ {
		owed, stored := k.owed(), k.stored()
		if owed && stored || (k == kindManual) != (!owed && !stored) {
			t.Errorf("%v: owed %v, stored %v; want one of them, or neither for a manual trigger only", k, owed, stored)
		}
	}
	for _, c := range []struct {
		tt            triggerType
		node, skipped bool
		want          fireKind
	}{
		{triggerRetry, false, false, kindRetry},
		{triggerParent, false, false, kindChild},
		{triggerMisfire, false, false, kindOnceNow},
		{triggerCron, false, true, kindSkipped},
		{triggerCron, true, false, kindNode},
		{triggerManual, true, false, kindNode},
		{triggerRetry, true, false, kindNode}, // a node's retry
	} {
		if got := storedKind(c.tt, c.node, c.skipped); got != c.want {
			t.Errorf("storedKind(%v, node %v, skipped %v) = %v, want %v", c.tt, c.node, c.skipped, got, c.want)
		}
	}
}

// TestStoredFiresKeepTheirKind: each kind the scheduler stores in pending_fires, written the
// way its decision writes it (one row, or a batch), is that kind when read back by a leader.
func TestStoredFiresKeepTheirKind(t *testing.T) {
	t.Parallel()
	r := newCompletionRig(t)
	job := r.job(t, schedule.None, "")
	j := &jobRow{ID: job}
	params := "p"
	fires := []*fire{
		{job: j, fireMs: 1, kind: kindRetry, trigType: triggerRetry, attempt: 1, params: &params},
		{job: j, fireMs: 2, kind: kindChild, trigType: triggerParent, parent: 9},
		{job: j, fireMs: 3, kind: kindNode, trigType: triggerCron, wf: &wfFire{ID: 3, Node: 1, NodeID: "B"}},
		{job: j, fireMs: 4, kind: kindNode, trigType: triggerRetry, attempt: 1, wf: &wfFire{ID: 3, Node: 1, NodeID: "B"}},
		{job: j, fireMs: 5, kind: kindOnceNow, trigType: triggerMisfire},
		{job: j, fireMs: 6, kind: kindSkipped, trigType: triggerCron, skip: "late"},
		{job: j, fireMs: 7, kind: kindSkipped, trigType: triggerCron}, // no reason given: still skipped
	}
	want := map[int64]*fire{}
	for _, batched := range []bool{false, true} {
		tx, err := r.s.jobs.begin(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		var batch []dueFire
		for _, f := range fires {
			f := *f
			if batched {
				f.fireMs += 100
				batch = append(batch, dueFire{f: &f, due: 1})
			} else if err := r.s.jobs.addPending(t.Context(), tx.Tx, &f, 1); err != nil {
				t.Fatal(err)
			}
			want[f.fireMs] = &f
		}
		var b db.Batch
		if err := r.s.jobs.addPendings(&b, batch); err != nil {
			t.Fatal(err)
		}
		if err := tx.Send(t.Context(), &b); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := r.s.jobs.begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	got, _, err := r.s.jobs.duePending(t.Context(), tx, 0, 10, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("read %d pending fires, want %d", len(got), len(want))
	}
	for _, f := range got {
		w := want[f.fireMs]
		if w == nil {
			t.Errorf("fire at %d read back, never stored", f.fireMs)
			continue
		}
		wantSkip := ""
		if w.kind == kindSkipped {
			wantSkip = w.skipReason()
		}
		if f.kind != w.kind || f.trigType != w.trigType || f.skip != wantSkip {
			t.Errorf("fire at %d read back as a %v (%v, skip %q), want a %v (%v, skip %q)", f.fireMs, f.kind, f.trigType, f.skip, w.kind, w.trigType, wantSkip)
		}
	}
}
