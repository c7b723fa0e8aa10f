package sdk

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// fireProcesses returns the processes of a fire still running: its leader (pid), its process
// group (pgid), and, followed from them, children, and sessions and groups they started; that
// is, also a child that left the group with setsid. A process reparented to init (or to this
// agent) once its parent died is the fire's when its environment carries the fire's
// JOBMESH_TRIGGER_ID. It reads /proc, so what it finds is a snapshot: kill what it returns at once.
func fireProcesses(pid, pgid int, triggerID string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	type proc struct{ ppid, pgrp, sid int }
	procs := make(map[int]proc, len(ents))
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp session ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 4 || f[0] == "Z" {
			continue // a zombie is dead already
		}
		ppid, _ := strconv.Atoi(f[1])
		pgrp, _ := strconv.Atoi(f[2])
		sid, _ := strconv.Atoi(f[3])
		procs[p] = proc{ppid, pgrp, sid}
	}
	self := os.Getpid()
	marker := []byte("JOBMESH_TRIGGER_ID=" + triggerID + "\x00")
	in := map[int]bool{}
	for p, pr := range procs {
		switch {
		case p == self:
		case p == pid || pr.pgrp == pgid:
			in[p] = true
		case pr.ppid == 1 || pr.ppid == self:
			if env, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/environ"); err == nil && bytes.Contains(append([]byte{0}, env...), append([]byte{0}, marker...)) {
				in[p] = true
			}
		}
	}
	for grown := true; grown; {
		grown = false
		for p, pr := range procs {
			if !in[p] && p != self && (in[pr.ppid] || in[pr.sid] || in[pr.pgrp]) {
				in[p], grown = true, true
			}
		}
	}
	out := make([]int, 0, len(in))
	for p := range in {
		out = append(out, p)
	}
	return out
}
