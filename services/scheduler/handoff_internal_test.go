package scheduler

import (
	"reflect"
	"slices"
	"testing"

	"github.com/jobmesh/jobmesh/services/scheduler/internal/schedule"
)

func TestParseHandoff(t *testing.T) {
	for _, c := range []struct {
		payload string
		part    int
		fires   []fireRef
		ok      bool
	}{
		{"3:12.1700000000000,14.1700000001000", 3, []fireRef{{12, 1700000000000}, {14, 1700000001000}}, true},
		{"0:", 0, nil, true}, // the whole partition
		{"15:7.0", 15, []fireRef{{7, 0}}, true},
		{"3", 0, nil, false},
		{"x:1.2", 0, nil, false},
		{"-1:1.2", 0, nil, false},
		{"3:12", 0, nil, false},
		{"3:12.x", 0, nil, false},
		{"3:12.5,", 0, nil, false},
	} {
		part, fires, ok := parseHandoff(c.payload)
		if ok != c.ok || part != c.part || !reflect.DeepEqual(fires, c.fires) {
			t.Errorf("parseHandoff(%q) = %d, %v, %v; want %d, %v, %v", c.payload, part, fires, ok, c.part, c.fires, c.ok)
		}
	}
}

// TestDeletePendingsDeletesExactlyItsKeys: the batch delete of settled pending fires removes
// the rows it names, whichever key column tells them apart, and no other.
func TestDeletePendingsDeletesExactlyItsKeys(t *testing.T) {
	t.Parallel()
	r := newCompletionRig(t)
	job := r.job(t, schedule.None, "")
	st := r.s.wfStore()
	base := pendingKey{job: job, fireMs: 1_700_000_000_000, shard: -1}
	variants := []pendingKey{base}
	for _, change := range []func(*pendingKey){
		func(k *pendingKey) { k.fireMs++ }, func(k *pendingKey) { k.shard = 2 }, func(k *pendingKey) { k.attempt = 1 },
		func(k *pendingKey) { k.parent = 9 }, func(k *pendingKey) { k.wf, k.node = 3, 1 }, func(k *pendingKey) { k.wf, k.node = 3, 2 },
	} {
		k := base
		change(&k)
		variants = append(variants, k)
	}
	j := &jobRow{ID: job}
	tx, err := st.begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range variants {
		f := &fire{job: j, fireMs: k.fireMs, shard: k.shard, attempt: k.attempt, parent: k.parent}
		if k.shard >= 0 {
			f.shardTotal = 4
		}
		if k.wf != 0 {
			f.wf = &wfFire{ID: k.wf, Node: k.node}
		}
		if err := st.addPending(t.Context(), tx.Tx, f, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	// Delete every other variant.
	var gone, kept []pendingKey
	for i, k := range variants {
		if i%2 == 0 {
			gone = append(gone, k)
		} else {
			kept = append(kept, k)
		}
	}
	if err := st.deletePendings(t.Context(), gone); err != nil {
		t.Fatal(err)
	}
	for _, k := range variants {
		var n int
		if err := st.db.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM pending_fires`+pendingWhere, pendingArgs(k)...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		want := 0
		if slices.Contains(kept, k) {
			want = 1
		}
		if n != want {
			t.Errorf("pending fire %+v: %d rows, want %d", k, n, want)
		}
	}
}
