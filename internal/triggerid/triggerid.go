// Package triggerid builds and reads the scheduler's trigger ids. An id names one fire, and the
// same fire always gets the same id, so executors and logsvc drop a fire sent twice (after a
// failover) as a duplicate:
//
//	<job>-<scheduled ms>-<shard>-<attempt>            a job's own fire (scheduled, manual, misfire) and its retries
//	<job>-<scheduled ms>-<shard>-<attempt>-p<parent>  a fire that a run of job <parent> caused (child job), and its retries
//	<job>-<scheduled ms>-<shard>-<attempt>-w<workflow>.<node>
//	                                                  node <node> (its index in the pinned graph) of the instance of
//	                                                  workflow <workflow> scheduled at <scheduled ms>, and its retries
//
// A child fire's scheduled time is its parent's, which the child's own schedule may have too;
// the parent suffix keeps the two fires apart.
package triggerid

import (
	"math"
	"strconv"
	"strings"
)

// ID is a trigger id's parts.
type ID struct {
	// Job is the job fired; ScheduledMs the fire's scheduled time, Unix ms.
	Job, ScheduledMs int64
	// Shard is the shard index, Attempt the attempt (0 for the first, n for the nth retry).
	Shard, Attempt int32
	// Parent is the job whose successful run fired Job as its child; 0 for a job's own fire.
	Parent int64
	// Workflow is the workflow of a workflow node's fire (0 for none), Node the node's index in
	// the instance's graph.
	Workflow int64
	Node     int32
}

// String returns the trigger id.
func (id ID) String() string {
	b := make([]byte, 0, 48)
	b = strconv.AppendInt(b, id.Job, 10)
	b = append(b, '-')
	b = strconv.AppendInt(b, id.ScheduledMs, 10)
	b = append(b, '-')
	b = strconv.AppendInt(b, int64(id.Shard), 10)
	b = append(b, '-')
	b = strconv.AppendInt(b, int64(id.Attempt), 10)
	if id.Parent != 0 {
		b = append(b, "-p"...)
		b = strconv.AppendInt(b, id.Parent, 10)
	}
	if id.Workflow != 0 {
		b = append(b, "-w"...)
		b = strconv.AppendInt(b, id.Workflow, 10)
		b = append(b, '.')
		b = strconv.AppendInt(b, int64(id.Node), 10)
	}
	return string(b)
}

// Parse reads a scheduler's trigger id; ok is false for any other string (a trigger id of
// another client, or a malformed one).
func Parse(s string) (id ID, ok bool) {
	s, wf, isWf := strings.Cut(s, "-w")
	if isWf {
		w, n, found := strings.Cut(wf, ".")
		if !found {
			return ID{}, false
		}
		node, okN := number(n)
		if id.Workflow, ok = number(w); !ok || !okN || id.Workflow <= 0 || node > math.MaxInt32 {
			return ID{}, false
		}
		id.Node = int32(node)
	}
	head, parent, child := strings.Cut(s, "-p")
	if child {
		if id.Parent, ok = number(parent); !ok || id.Parent <= 0 {
			return ID{}, false
		}
	}
	var parts [4]int64
	for i := range parts {
		field, rest, found := strings.Cut(head, "-")
		if found == (i == 3) {
			return ID{}, false
		}
		if parts[i], ok = number(field); !ok {
			return ID{}, false
		}
		head = rest
	}
	if parts[0] <= 0 || parts[2] > math.MaxInt32 || parts[3] > math.MaxInt32 {
		return ID{}, false
	}
	id.Job, id.ScheduledMs, id.Shard, id.Attempt = parts[0], parts[1], int32(parts[2]), int32(parts[3])
	return id, true
}

// number reads a decimal number of digits only (no sign).
func number(field string) (int64, bool) {
	if field == "" || field[0] < '0' || field[0] > '9' {
		return 0, false
	}
	n, err := strconv.ParseInt(field, 10, 64)
	return n, err == nil
}
