package workflow

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// graph builds a graph of nodes named by ids with edges "A>B" (ON_SUCCESS), "A!B" (ON_FAILURE)
// and "A*B" (ALWAYS).
func graph(t *testing.T, ids string, edges ...string) *Graph {
	t.Helper()
	g := &Graph{}
	for i, id := range strings.Fields(ids) {
		g.Nodes = append(g.Nodes, Node{ID: id, JobID: int64(i + 1)})
	}
	for _, e := range edges {
		c, sep := OnSuccess, ">"
		switch {
		case strings.Contains(e, "!"):
			c, sep = OnFailure, "!"
		case strings.Contains(e, "*"):
			c, sep = Always, "*"
		}
		from, to, _ := strings.Cut(e, sep)
		g.Edges = append(g.Edges, Edge{From: from, To: to, Cond: c})
	}
	if vs := g.Validate(); len(vs) > 0 {
		t.Fatalf("invalid graph: %v", vs)
	}
	return g
}

func TestValidate(t *testing.T) {
	t.Parallel()
	big := &Graph{}
	for i := range MaxNodes + 1 {
		big.Nodes = append(big.Nodes, Node{ID: fmt.Sprintf("n%d", i), JobID: 1})
	}
	tests := []struct {
		name string
		g    *Graph
		want []Violation
	}{
		{"empty", &Graph{}, []Violation{{"nodes", "a workflow needs at least one node"}}},
		{"too many", big, []Violation{{"nodes", "501 nodes: at most 500"}}},
		{"bad id and duplicate", &Graph{Nodes: []Node{{ID: "a b", JobID: 1}, {ID: "A", JobID: 1}, {ID: "A"}}},
			[]Violation{{"nodes[0].id", `node id "a b": 1-64 characters of A-Z a-z 0-9 _ -`},
				{"nodes[2].id", `node "A": the id of nodes[1] too; node ids are unique`},
				{"nodes[2].job_id", `node "A": a job id is required`}}},
		{"dangling", &Graph{Nodes: []Node{{ID: "A", JobID: 1}}, Edges: []Edge{{From: "A", To: "B"}}},
			[]Violation{{"edges[0].to", `edge "A" → "B": no node "B"`}}},
		{"cycle", &Graph{Nodes: []Node{{ID: "R", JobID: 1}, {ID: "A", JobID: 1}, {ID: "B", JobID: 1}, {ID: "C", JobID: 1}},
			Edges: []Edge{{From: "R", To: "A"}, {From: "A", To: "B"}, {From: "B", To: "A"}, {From: "B", To: "C"}}},
			[]Violation{{"nodes[1]", `node "A" is on a cycle`}}},
		{"self loop", &Graph{Nodes: []Node{{ID: "A", JobID: 1}}, Edges: []Edge{{From: "A", To: "A"}}},
			[]Violation{{"edges[0].to", `edge "A" → "A": a node cannot follow itself (cycle at node "A")`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.g.Validate(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Validate() = %q; want %q", got, tt.want)
			}
		})
	}
}

func TestAdvance(t *testing.T) {
	t.Parallel()
	diamond := graph(t, "A B C D", "A>B", "A>C", "B>D", "C>D")
	branch := graph(t, "A D E F", "A>D", "A!E", "D*F", "E*F")
	tests := []struct {
		name      string
		g         *Graph
		disabled  string
		st        string // one letter per node: W R S F K - (skipped) P (passed)
		wantStart []int
		wantSt    string
		want      Outcome
	}{
		{"roots start", diamond, "", "WWWW", []int{0}, "WWWW", Open},
		{"fan out", diamond, "", "SWWW", []int{1, 2}, "SWWW", Open},
		{"join waits", diamond, "", "SSRW", nil, "SSRW", Open},
		{"join starts", diamond, "", "SSSW", []int{3}, "SSSW", Open},
		{"done", diamond, "", "SSSS", nil, "SSSS", Succeeded},
		{"failure skips downstream", diamond, "", "FWWW", nil, "F---", FailedOutcome},
		{"one side failed: join runs on the other", diamond, "", "SFSW", []int{3}, "SFSW", Open},
		{"ends failed", diamond, "", "SFSS", nil, "SFSS", FailedOutcome},
		{"failure branch", branch, "", "FWWW", []int{2}, "F-WW", Open},
		{"failure branch handled", branch, "", "F-SW", []int{3}, "F-SW", Open},
		{"failure branch ends success", branch, "", "F-SS", nil, "F-SS", Succeeded},
		{"success branch: cleanup after skip", branch, "", "SSWW", []int{3}, "SS-W", Open},
		{"disabled passes", diamond, "B", "SWWW", []int{2}, "SPWW", Open},
		{"disabled join", diamond, "B", "SPSW", []int{3}, "SPSW", Open},
		{"killed", diamond, "", "KWWW", nil, "K---", FailedOutcome},
	}
	letters := "WRSFK-P"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := *tt.g
			g.Nodes = append([]Node(nil), tt.g.Nodes...)
			for i := range g.Nodes {
				g.Nodes[i].Disabled = strings.Contains(tt.disabled, g.Nodes[i].ID)
			}
			st := make([]Status, len(tt.st))
			for i, c := range tt.st {
				st[i] = Status(strings.IndexRune(letters, c))
			}
			start, out := g.Advance(st)
			var got strings.Builder
			for _, s := range st {
				got.WriteByte(letters[s])
			}
			if !reflect.DeepEqual(start, tt.wantStart) || got.String() != tt.wantSt || out != tt.want {
				t.Errorf("Advance(%s) = %v, %s, %d; want %v, %s, %d", tt.st, start, got.String(), out, tt.wantStart, tt.wantSt, tt.want)
			}
		})
	}
}

func TestContext(t *testing.T) {
	t.Parallel()
	g := graph(t, "A B C D", "A>B", "A>C", "B>D", "C>D")
	outs := []map[string]string{{"x": "a"}, {"k": "b", "p": "out"}, {"k": "c"}, nil}
	got := g.Context(3, map[string]string{"p": "param", "q": "1"}, outs)
	want := map[string]string{"p": "out", "q": "1", "B.k": "b", "B.p": "out", "C.k": "c", "k": "c"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Context(D) = %v; want %v", got, want)
	}
}

func TestDownstream(t *testing.T) {
	g := graph(t, "A B C D E", "A>B", "A>C", "B>D", "C>D")
	for _, c := range []struct {
		from string
		want []string
	}{{"A", []string{"B", "C", "D"}}, {"B", []string{"D"}}, {"D", nil}, {"E", nil}} {
		n, _ := g.NodeIndex(c.from)
		var got []string
		for _, d := range g.Downstream(n) {
			got = append(got, g.Nodes[d].ID)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("Downstream(%s) = %v, want %v", c.from, got, c.want)
		}
	}
}

func TestNextAndRoots(t *testing.T) {
	g := graph(t, "A B C D E", "A>B", "A!C", "B>D", "C*D")
	ids := func(ns []int) []string {
		var out []string
		for _, n := range ns {
			out = append(out, g.Nodes[n].ID)
		}
		return out
	}
	for _, c := range []struct {
		from string
		want []string
	}{{"A", []string{"B", "C"}}, {"B", []string{"D"}}, {"C", []string{"D"}}, {"D", nil}, {"E", nil}} {
		n, _ := g.NodeIndex(c.from)
		if got := ids(g.Next(n)); !slices.Equal(got, c.want) {
			t.Errorf("Next(%s) = %v, want %v", c.from, got, c.want)
		}
	}
	if got := ids(g.Roots()); !slices.Equal(got, []string{"A", "E"}) {
		t.Errorf("Roots() = %v, want [A E]", got)
	}
}
