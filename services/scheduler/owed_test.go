package scheduler

import (
	"maps"
	"testing"
)

func TestOwedTracksTheEarliestUndispatchedFire(t *testing.T) {
	t.Parallel()
	o := newOwed()
	o.arm(1, 300) // committed with its mark: not dirty
	o.arm(1, 100)
	o.add(2, 50) // taken over: dirty
	if got := o.takeDirty(); !maps.Equal(got, map[int64]int64{2: 50}) {
		t.Errorf("dirty after arm/add = %v, want only job 2 at 50", got)
	}
	if m, ok := o.min(1); !ok || m != 100 {
		t.Errorf("min(1) = %d, %v; want 100", m, ok)
	}
	o.done(1, 100)
	o.done(1, 999) // unknown: ignored
	o.done(2, 50)
	if got := o.takeDirty(); !maps.Equal(got, map[int64]int64{1: 300, 2: 0}) {
		t.Errorf("dirty after dispatches = %v, want job 1 at 300 and job 2 cleared", got)
	}
	o.restore(map[int64]int64{7: 1})
	if got := o.takeDirty(); !maps.Equal(got, map[int64]int64{7: 0}) {
		t.Errorf("dirty after restore = %v, want job 7 (nothing owed)", got)
	}
	if got := o.takeDirty(); len(got) != 0 {
		t.Errorf("second takeDirty = %v, want nothing", got)
	}
}
