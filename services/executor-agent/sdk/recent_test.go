package sdk

import "testing"

func TestRecentIDsForgetsOldestFirst(t *testing.T) {
	t.Parallel()
	r := newRecentIDs(3)
	for _, id := range []string{"a", "b", "c", "a", "d"} { // "a" again changes nothing
		r.add(id, "2026-11-23")
	}
	for id, want := range map[string]bool{"a": false, "b": true, "c": true, "d": true} {
		if _, got := r.get(id); got != want {
			t.Errorf("%s remembered: got %v, want %v", id, got, want)
		}
	}
	if len(r.days) != 3 || len(r.ring) != 3 {
		t.Fatalf("memory: got %d ids and a ring of %d, want 3 and 3", len(r.days), len(r.ring))
	}
}
