// Package workflow is the pure logic of workflows: a graph of job nodes joined by conditional
// edges, its validation, and the decisions of a running instance (which nodes start, which are
// skipped, when the instance ends). It reads and writes nothing; the scheduler stores the
// graph and the node states and calls Advance inside its fenced transactions.
package workflow

import (
	"fmt"
	"regexp"
	"sort"
)

// MaxNodes is the most nodes a graph may have.
const MaxNodes = 500

// Condition says when an edge lets its downstream node start.
type Condition int

// Edge conditions; the zero value is OnSuccess.
const (
	OnSuccess Condition = iota
	OnFailure
	Always
)

// Node is one job of a graph.
type Node struct {
	ID             string  `json:"id"`
	JobID          int64   `json:"job_id"`
	Params         *string `json:"params,omitempty"`
	RetryCount     int32   `json:"retry_count,omitempty"`
	TimeoutSeconds int32   `json:"timeout_seconds,omitempty"`
	// Disabled nodes are not run: they are skipped as a success.
	Disabled bool    `json:"disabled,omitempty"`
	X        float64 `json:"x,omitempty"`
	Y        float64 `json:"y,omitempty"`
}

// Edge runs To after From when Cond holds.
type Edge struct {
	From string    `json:"from"`
	To   string    `json:"to"`
	Cond Condition `json:"cond,omitempty"`
}

// Graph is a workflow's versioned definition: its nodes, edges and params.
type Graph struct {
	Nodes  []Node            `json:"nodes"`
	Edges  []Edge            `json:"edges"`
	Params map[string]string `json:"params,omitempty"`

	// Built by Index: node index by id, upstream edges by node, topological order.
	index map[string]int
	ins   [][]int // edge indexes into Edges, per node
	outs  [][]int
	order []int
}

// Violation is one reason a graph is invalid: the field (nodes[3].id, edges[2].to) and what is
// wrong, naming the node.
type Violation struct {
	Field, Description string
}

var nodeID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Validate checks the graph's structure: node ids, duplicates, dangling edges, self-loops,
// cycles and size. Jobs are the caller's to check (they need the store). It returns every
// violation found, none for a valid graph, and indexes a valid graph.
func (g *Graph) Validate() []Violation {
	var vs []Violation
	add := func(field, format string, args ...any) {
		vs = append(vs, Violation{Field: field, Description: fmt.Sprintf(format, args...)})
	}
	switch {
	case len(g.Nodes) == 0:
		add("nodes", "a workflow needs at least one node")
	case len(g.Nodes) > MaxNodes:
		add("nodes", "%d nodes: at most %d", len(g.Nodes), MaxNodes)
		return vs
	}
	seen := make(map[string]int, len(g.Nodes))
	for i, n := range g.Nodes {
		f := fmt.Sprintf("nodes[%d]", i)
		switch {
		case !nodeID.MatchString(n.ID):
			add(f+".id", "node id %q: 1-64 characters of A-Z a-z 0-9 _ -", n.ID)
		case seen[n.ID] > 0:
			add(f+".id", "node %q: the id of nodes[%d] too; node ids are unique", n.ID, seen[n.ID]-1)
		default:
			seen[n.ID] = i + 1
		}
		if n.JobID <= 0 {
			add(f+".job_id", "node %q: a job id is required", n.ID)
		}
		if n.RetryCount < 0 || n.RetryCount > 100 {
			add(f+".retry_count", "node %q: retry count %d: 0-100", n.ID, n.RetryCount)
		}
		if n.TimeoutSeconds < 0 || n.TimeoutSeconds > 86400 {
			add(f+".timeout_seconds", "node %q: timeout %d s: 0-86400", n.ID, n.TimeoutSeconds)
		}
		if n.Params != nil && len(*n.Params) > 2048 {
			add(f+".params", "node %q: params of %d characters: at most 2048", n.ID, len(*n.Params))
		}
	}
	pairs := map[[2]string]int{}
	for i, e := range g.Edges {
		f := fmt.Sprintf("edges[%d]", i)
		if seen[e.From] == 0 {
			add(f+".from", "edge %q → %q: no node %q", e.From, e.To, e.From)
		}
		if seen[e.To] == 0 {
			add(f+".to", "edge %q → %q: no node %q", e.From, e.To, e.To)
		}
		if e.Cond < OnSuccess || e.Cond > Always {
			add(f+".condition", "edge %q → %q: unknown condition %d", e.From, e.To, e.Cond)
		}
		if e.From == e.To && seen[e.From] > 0 {
			add(f+".to", "edge %q → %q: a node cannot follow itself (cycle at node %q)", e.From, e.To, e.From)
		}
		if j, dup := pairs[[2]string{e.From, e.To}]; dup {
			add(f, "edge %q → %q: the same as edges[%d]", e.From, e.To, j)
		}
		pairs[[2]string{e.From, e.To}] = i
	}
	if len(vs) > 0 {
		return vs
	}
	g.Index()
	if len(g.order) < len(g.Nodes) {
		// Every node not in the order is on or after a cycle; name one on it.
		on := g.cycleNode()
		add(fmt.Sprintf("nodes[%d]", g.index[on]), "node %q is on a cycle", on)
	}
	return vs
}

// Index builds the graph's lookups and its topological order (Kahn's algorithm, ties broken by
// node order). The graph's edges must name its nodes (Validate checks).
func (g *Graph) Index() {
	g.index = make(map[string]int, len(g.Nodes))
	for i, n := range g.Nodes {
		g.index[n.ID] = i
	}
	g.ins, g.outs = make([][]int, len(g.Nodes)), make([][]int, len(g.Nodes))
	for i, e := range g.Edges {
		f, t := g.index[e.From], g.index[e.To]
		g.outs[f] = append(g.outs[f], i)
		g.ins[t] = append(g.ins[t], i)
	}
	deg := make([]int, len(g.Nodes))
	var ready []int
	for i := range g.Nodes {
		if deg[i] = len(g.ins[i]); deg[i] == 0 {
			ready = append(ready, i)
		}
	}
	g.order = g.order[:0]
	for len(ready) > 0 {
		sort.Ints(ready)
		n := ready[0]
		ready = ready[1:]
		g.order = append(g.order, n)
		for _, e := range g.outs[n] {
			t := g.index[g.Edges[e].To]
			if deg[t]--; deg[t] == 0 {
				ready = append(ready, t)
			}
		}
	}
}

// cycleNode returns a node on a cycle: from any node left out of the order, follow an incoming
// edge from a node also left out until a node repeats.
func (g *Graph) cycleNode() string {
	in := make([]bool, len(g.Nodes))
	for _, n := range g.order {
		in[n] = true
	}
	cur := -1
	for i := range g.Nodes {
		if !in[i] {
			cur = i
			break
		}
	}
	visited := map[int]bool{}
	for !visited[cur] {
		visited[cur] = true
		for _, e := range g.ins[cur] {
			if f := g.index[g.Edges[e].From]; !in[f] {
				cur = f
				break
			}
		}
	}
	return g.Nodes[cur].ID
}

// NodeIndex returns the index of node id, false when there is none.
func (g *Graph) NodeIndex(id string) (int, bool) {
	i, ok := g.index[id]
	return i, ok
}

// Order returns the node indexes in topological order.
func (g *Graph) Order() []int { return g.order }

// Upstream returns the indexes of node n's upstream nodes, in topological order.
func (g *Graph) Upstream(n int) []int {
	pos := make(map[int]int, len(g.order))
	for i, o := range g.order {
		pos[o] = i
	}
	var up []int
	for _, e := range g.ins[n] {
		up = append(up, g.index[g.Edges[e].From])
	}
	sort.Slice(up, func(a, b int) bool { return pos[up[a]] < pos[up[b]] })
	return up
}

// Next returns the indexes of node n's direct downstream nodes, in edge order.
func (g *Graph) Next(n int) []int {
	out := make([]int, 0, len(g.outs[n]))
	for _, e := range g.outs[n] {
		out = append(out, g.index[g.Edges[e].To])
	}
	return out
}

// Roots returns the indexes of the nodes without upstream nodes, in topological order.
func (g *Graph) Roots() []int {
	var out []int
	for _, n := range g.order {
		if len(g.ins[n]) == 0 {
			out = append(out, n)
		}
	}
	return out
}

// Downstream returns the indexes of the nodes reachable from node n along edges (not n itself),
// in topological order.
func (g *Graph) Downstream(n int) []int {
	seen := make([]bool, len(g.Nodes))
	stack := []int{n}
	for len(stack) > 0 {
		m := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, e := range g.outs[m] {
			if to := g.index[g.Edges[e].To]; !seen[to] {
				seen[to] = true
				stack = append(stack, to)
			}
		}
	}
	var out []int
	for _, o := range g.order {
		if seen[o] && o != n {
			out = append(out, o)
		}
	}
	return out
}

// Status is where a node of an instance is.
type Status int

// Node statuses. Passed is a disabled node skipped as a success; Skipped a node none of whose
// incoming conditions held.
const (
	Waiting Status = iota
	Running
	Success
	Failed
	Killed
	Skipped
	Passed
)

// Decided reports whether the node has ended one way or another.
func (s Status) Decided() bool { return s >= Success }

// holds reports whether an edge of condition c holds for an upstream node that ended st.
func holds(c Condition, st Status) bool {
	switch c {
	case OnFailure:
		return st == Failed || st == Killed
	case Always:
		return st.Decided()
	default:
		return st == Success || st == Passed
	}
}

// Outcome is how an instance ends.
type Outcome int

// Instance outcomes: Open while a node waits or runs.
const (
	Open Outcome = iota
	Succeeded
	FailedOutcome
)

// Advance decides, for node statuses st (one per node, changed in place), which waiting nodes
// start now (returned in topological order) and which are skipped or passed (set in st), and
// whether the instance has ended. The rule: a waiting node is decided once every upstream node
// is decided; it starts when at least one incoming edge's condition holds (a root starts at
// once), else it is Skipped. A disabled node whose turn comes is Passed instead of started:
// its ON_SUCCESS and ALWAYS edges hold, its ON_FAILURE edges do not. The instance ends when no
// node waits or runs: FailedOutcome when a node Failed or was Killed with no ON_FAILURE edge
// out of it, else Succeeded.
func (g *Graph) Advance(st []Status) (start []int, outcome Outcome) {
	for _, n := range g.order {
		if st[n] != Waiting {
			continue
		}
		ready, any := true, len(g.ins[n]) == 0
		for _, e := range g.ins[n] {
			up := st[g.index[g.Edges[e].From]]
			if !up.Decided() {
				ready = false
				break
			}
			if holds(g.Edges[e].Cond, up) {
				any = true
			}
		}
		switch {
		case !ready:
		case !any:
			st[n] = Skipped
		case g.Nodes[n].Disabled:
			st[n] = Passed
		default:
			start = append(start, n)
		}
	}
	if len(start) > 0 {
		return start, Open
	}
	failed := false
	for n, s := range st {
		switch s {
		case Waiting, Running:
			return nil, Open
		case Failed, Killed:
			if !g.hasFailurePath(n) {
				failed = true
			}
		}
	}
	if failed {
		return nil, FailedOutcome
	}
	return nil, Succeeded
}

// hasFailurePath reports whether node n has an ON_FAILURE edge out of it.
func (g *Graph) hasFailurePath(n int) bool {
	for _, e := range g.outs[n] {
		if g.Edges[e].Cond == OnFailure {
			return true
		}
	}
	return false
}

// Context builds node n's context from the instance's params and its upstream nodes' outputs
// (outputs[i] for node i): the params first, then each upstream node's outputs in topological
// order, each key both as "<node id>.<key>" and bare, so a later upstream's bare key wins over
// an earlier one's, and any bare output key over a param of that name.
func (g *Graph) Context(n int, params map[string]string, outputs []map[string]string) map[string]string {
	ctx := make(map[string]string, len(params))
	for k, v := range params {
		ctx[k] = v
	}
	for _, u := range g.Upstream(n) {
		for k, v := range outputs[u] {
			ctx[g.Nodes[u].ID+"."+k] = v
			ctx[k] = v
		}
	}
	if len(ctx) == 0 {
		return nil
	}
	return ctx
}
