package triggerid

import "testing"

func TestParse(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		id   string
		want ID
		ok   bool
	}{
		{"7-1700000000000-0-0", ID{Job: 7, ScheduledMs: 1700000000000}, true},
		{"123-5-3-2", ID{Job: 123, ScheduledMs: 5, Shard: 3, Attempt: 2}, true},
		{"7-1700000000000-0-0-p42", ID{Job: 7, ScheduledMs: 1700000000000, Parent: 42}, true},
		{"7-5-1-2-p9", ID{Job: 7, ScheduledMs: 5, Shard: 1, Attempt: 2, Parent: 9}, true},
		{"7-5-0-1-w3.12", ID{Job: 7, ScheduledMs: 5, Attempt: 1, Workflow: 3, Node: 12}, true},
		{"7-5-0-1-w3", ID{}, false},
		{"7-5-0-1-w0.1", ID{}, false},
		{"7-5-0-1-w3.x", ID{}, false},
		{"7-1700000000000-0", ID{}, false},
		{"7-1-0-0-0", ID{}, false},
		{"7-1-0-0-p", ID{}, false},
		{"7-1-0-0-p0", ID{}, false},
		{"7-1-0-0-p-3", ID{}, false},
		{"7-1-0-0-p3-p4", ID{}, false},
		{"7-1-0-0-q3", ID{}, false},
		{"7-1-0-p3", ID{}, false},
		{"0-1-0-0", ID{}, false},
		{"7--1-0-0", ID{}, false},
		{"7-1-+1-0", ID{}, false},
		{"7-1-0-2147483648", ID{}, false},
		{"150-a", ID{}, false},
		{"", ID{}, false},
	} {
		got, ok := Parse(c.id)
		if got != c.want || ok != c.ok {
			t.Errorf("Parse(%q) = %+v, %v; want %+v, %v", c.id, got, ok, c.want, c.ok)
		}
	}
}

// TestStringParsesBack: an id's parts come back from its string, and a child fire's id differs
// from its job's own fire at the same time, shard and attempt.
func TestStringParsesBack(t *testing.T) {
	t.Parallel()
	own := ID{Job: 42, ScheduledMs: 1763884800000, Shard: 1, Attempt: 2}
	child := own
	child.Parent = 7
	if own.String() != "42-1763884800000-1-2" || child.String() != "42-1763884800000-1-2-p7" {
		t.Errorf("ids %q and %q", own.String(), child.String())
	}
	node := own
	node.Workflow, node.Node = 9, 4
	if node.String() != "42-1763884800000-1-2-w9.4" {
		t.Errorf("node id %q", node.String())
	}
	for _, id := range []ID{own, child, node} {
		if got, ok := Parse(id.String()); !ok || got != id {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", id.String(), got, ok, id)
		}
	}
}
