package sdk

import (
	"bytes"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// A fire's processes all descend from its leader, so each was forked after it: its pid was
// handed out after the leader's, in the cyclic order pids are given in, unless the pid space
// went round once more since (as many forks as pid_max). Scanning only that window of pids
// instead of every process of the machine is what keeps a fire's end cheap: reading the stat of
// each of a hundred processes cost a script fire ~2.5 ms of CPU, more than its interpreter.

// pidWindow is what a fire remembers of the moment its leader started.
type pidWindow struct {
	leader  int
	forks   uint64    // the machine's fork counter at or before the leader's start; 0: unknown
	started time.Time // when the leader started
}

// maxForkRate bounds how many pids a machine hands out per second: a fire that ended sooner
// than pid_max at this rate cannot have seen the pid space go round, and its end skips reading
// the fork counter (/proc/stat, ~30 µs).
const maxForkRate = 1_000_000

// forkCounter caches /proc/stat's "processes" (forks since boot, threads included): a reading
// up to forkCacheAge old is at or before a fire's start, which is all a window needs.
var forkCounter struct {
	mu sync.Mutex
	n  uint64
	at time.Time
}

const forkCacheAge = time.Second

// newPidWindow is the window of a leader just started.
func newPidWindow(leader int) pidWindow {
	forkCounter.mu.Lock()
	defer forkCounter.mu.Unlock()
	if now := time.Now(); forkCounter.n == 0 || now.Sub(forkCounter.at) > forkCacheAge {
		forkCounter.n, forkCounter.at = readForks(), now
	}
	return pidWindow{leader: leader, forks: forkCounter.n, started: time.Now()}
}

// pidMax is /proc/sys/kernel/pid_max, read once (0 if unreadable).
var pidMax = sync.OnceValue(func() int { return readProcInt("/proc/sys/kernel/pid_max") })

// candidates returns the pids that may belong to the fire (the leader's and every pid handed
// out since), or all=true when they cannot be bounded: the counters are unreadable, or the pid
// space may have gone round since the leader started.
func (w pidWindow) candidates() (lo, hi int, wrapped, all bool) {
	pmax := pidMax()
	if w.forks == 0 || pmax <= 0 {
		return 0, 0, false, true
	}
	last := readProcInt("/proc/sys/kernel/ns_last_pid")
	if last <= 0 {
		return 0, 0, false, true
	}
	if time.Since(w.started) >= time.Duration(pmax)*time.Second/maxForkRate {
		// The global fork counter counts every namespace's forks: at least this one's.
		if forks := readForks(); forks < w.forks || forks-w.forks >= uint64(pmax)-1000 {
			return 0, 0, false, true
		}
	}
	return w.leader, last, last < w.leader, false
}

// readForks reads /proc/stat's "processes" line; 0 when it cannot.
func readForks() uint64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	i := bytes.Index(b, []byte("\nprocesses "))
	if i < 0 {
		return 0
	}
	rest := b[i+len("\nprocesses "):]
	if j := bytes.IndexByte(rest, '\n'); j >= 0 {
		rest = rest[:j]
	}
	n, err := strconv.ParseUint(string(rest), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// readProcInt reads a /proc file holding one number; 0 when it cannot.
func readProcInt(path string) int {
	var buf [32]byte
	n, err := readSmall(path, buf[:])
	if err != nil {
		return 0
	}
	v, err := strconv.Atoi(string(bytes.TrimSpace(buf[:n])))
	if err != nil {
		return 0
	}
	return v
}

// readSmall reads up to len(buf) bytes of a /proc file with three system calls (os.ReadFile
// also stats it, and allocates).
func readSmall(path string, buf []byte) (int, error) {
	return readAt(atFDCWD, path, buf)
}

// atFDCWD is Linux's AT_FDCWD: openat with it opens a path as open does.
const atFDCWD = -0x64

// maxProbe is the widest pid window probed pid by pid; a wider one lists /proc instead.
const maxProbe = 256

// fireProcesses returns the processes of a fire still running: its leader (pid), its process
// group (pgid), and, followed from them, children, and sessions and groups they started; that
// is, also a child that left the group with setsid. A process reparented to init (or to this
// agent) once its parent died is the fire's when its environment carries the fire's
// JOBMESH_TRIGGER_ID. Only pids in the fire's window (see pidWindow) are read. It reads /proc,
// so what it finds is a snapshot: kill what it returns at once.
//
// Fires that ask at about the same time share one reading of /proc (see scanner): their windows
// end at the same newest pid, so the oldest fire's window holds the others', and reading it once
// serves them all.
func fireProcesses(win pidWindow, pgid int, triggerID string) []int {
	req := scanRequest{win: win, pgid: pgid, triggerID: triggerID, out: make(chan []int, 1)}
	scans.once.Do(func() {
		scans.queue = make(chan scanRequest, 1024)
		go scanLoop()
	})
	scans.queue <- req
	return <-req.out
}

// scans is the scanner of /proc every fire's end asks: one goroutine, so that one scan serves
// every request queued while the previous one ran, and the CPU /proc costs is per scan, not per
// fire.
var scans struct {
	once  sync.Once
	queue chan scanRequest
}

// scanRequest is one fire's question to the scanner.
type scanRequest struct {
	win       pidWindow
	pgid      int
	triggerID string
	out       chan []int
}

// maxScanBatch bounds the requests one scan serves.
const maxScanBatch = 256

// scanLoop serves the queued requests in batches, one /proc reading per batch.
func scanLoop() {
	batch := make([]scanRequest, 0, maxScanBatch)
	var sc scanner
	for req := range scans.queue {
		batch = append(batch[:0], req)
	more:
		for len(batch) < maxScanBatch {
			select {
			case r := <-scans.queue:
				batch = append(batch, r)
			default:
				break more
			}
		}
		sc.serve(batch)
	}
}

// scanner reads /proc for a batch of requests; its buffers are reused from one batch to the next.
type scanner struct {
	procfd int // /proc, opened once; -1 when it cannot be
	opened bool
	buf    [512]byte
	procs  map[int]proc
	pids   []int
}

// proc is what a fire's scan needs of a process: its parent, process group and session.
type proc struct{ ppid, pgrp, sid int }

// window is the pids one request may find: lo to hi (going round past pid_max when wrapped), or
// every pid when all.
type window struct {
	lo, hi       int
	wrapped, all bool
}

func (w window) holds(p int) bool {
	switch {
	case w.all:
		return true
	case w.wrapped:
		return p >= w.lo || p <= w.hi
	default:
		return p >= w.lo && p <= w.hi
	}
}

// serve answers every request of the batch from one reading of the union of their windows.
func (sc *scanner) serve(batch []scanRequest) {
	if !sc.opened {
		sc.opened = true
		fd, err := syscall.Open("/proc", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if err != nil {
			fd = -1
		}
		sc.procfd = fd
	}
	wins := make([]window, len(batch))
	probe, lo, hi := true, 0, 0
	for i, r := range batch {
		w := &wins[i]
		w.lo, w.hi, w.wrapped, w.all = r.win.candidates()
		switch {
		case w.all || w.wrapped:
			probe = false
		case i == 0:
			lo, hi = w.lo, w.hi
		default:
			lo, hi = min(lo, w.lo), max(hi, w.hi)
		}
	}
	sc.pids = sc.pids[:0]
	if probe && hi-lo+1 <= maxProbe {
		for p := lo; p <= hi; p++ {
			sc.pids = append(sc.pids, p)
		}
	} else {
		ents, err := os.ReadDir("/proc")
		if err != nil {
			for _, r := range batch {
				r.out <- nil
			}
			return
		}
		for _, e := range ents {
			p, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			for _, w := range wins {
				if w.holds(p) {
					sc.pids = append(sc.pids, p)
					break
				}
			}
		}
	}
	if sc.procs == nil {
		sc.procs = make(map[int]proc, len(sc.pids))
	}
	clear(sc.procs)
	for _, p := range sc.pids {
		if pr, ok := sc.readStat(p); ok {
			sc.procs[p] = pr
		}
	}
	for i, r := range batch {
		r.out <- members(sc.procs, wins[i], r.win.leader, r.pgid, r.triggerID)
	}
}

// readStat reads a live process's parent, group and session from /proc/<p>/stat; false when it
// is gone, never was, or is a zombie (dead already).
func (sc *scanner) readStat(p int) (proc, bool) {
	var n int
	var err error
	if sc.procfd >= 0 {
		n, err = readAt(sc.procfd, strconv.Itoa(p)+"/stat", sc.buf[:])
	} else {
		n, err = readSmall("/proc/"+strconv.Itoa(p)+"/stat", sc.buf[:])
	}
	if err != nil {
		return proc{}, false
	}
	stat := sc.buf[:n]
	// pid (comm) state ppid pgrp session ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return proc{}, false
	}
	var f [4][]byte
	rest := stat[i+1:]
	for k := range f {
		rest = bytes.TrimLeft(rest, " ")
		j := bytes.IndexByte(rest, ' ')
		if j < 0 {
			j = len(rest)
		}
		f[k], rest = rest[:j], rest[j:]
	}
	if len(f[3]) == 0 || f[0][0] == 'Z' {
		return proc{}, false
	}
	return proc{atoi(f[1]), atoi(f[2]), atoi(f[3])}, true
}

// atoi reads a decimal number (0 when b holds none) without allocating.
func atoi(b []byte) int {
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// readAt reads up to len(buf) bytes of the file at path under the directory dirfd.
func readAt(dirfd int, path string, buf []byte) (int, error) {
	fd, err := syscall.Openat(dirfd, path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer syscall.Close(fd)
	n := 0
	for n < len(buf) {
		m, err := syscall.Read(fd, buf[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			break
		}
		n += m
	}
	return n, nil
}

// members is the fire's processes among procs (see fireProcesses), reading only its own window.
func members(procs map[int]proc, w window, pid, pgid int, triggerID string) []int {
	self := os.Getpid()
	marker := []byte("JOBMESH_TRIGGER_ID=" + triggerID + "\x00")
	in := map[int]bool{}
	for p, pr := range procs {
		if !w.holds(p) {
			continue
		}
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
			if w.holds(p) && !in[p] && p != self && (in[pr.ppid] || in[pr.sid] || in[pr.pgrp]) {
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
