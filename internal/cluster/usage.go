package cluster

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Usage is what a process has used so far.
type Usage struct {
	// CPU is user plus system time (utime + stime of /proc/<pid>/stat).
	CPU time.Duration
	// ChildCPU is the CPU time of the process's children it has waited for (cutime + cstime):
	// an executor's scripts.
	ChildCPU time.Duration
	// RSS is the resident memory now and PeakRSS the most it has had (VmRSS and VmHWM of
	// /proc/<pid>/status), in bytes.
	RSS, PeakRSS int64
}

// clockTick is Linux's USER_HZ, the unit of utime and stime: 100 on every architecture Go
// supports (sysconf(_SC_CLK_TCK) is fixed by the kernel ABI).
const clockTick = 10 * time.Millisecond

// ReadUsage reads a live process's usage from /proc (Linux only).
func ReadUsage(pid int) (Usage, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Usage{}, fmt.Errorf("usage of pid %d: %w", pid, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Usage{}, fmt.Errorf("usage of pid %d: %w", pid, err)
	}
	cpu, child, err := parseStatCPU(string(stat))
	if err != nil {
		return Usage{}, fmt.Errorf("usage of pid %d: %w", pid, err)
	}
	u := Usage{CPU: cpu, ChildCPU: child}
	u.RSS, u.PeakRSS = statusKB(string(status), "VmRSS:")*1024, statusKB(string(status), "VmHWM:")*1024
	return u, nil
}

// parseStatCPU returns utime + stime and cutime + cstime of a /proc/<pid>/stat line. The command
// name (field 2) is in parentheses and may hold spaces, so fields are counted from the last ')'.
func parseStatCPU(stat string) (self, children time.Duration, err error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, errors.New("/proc stat: no command name")
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state); utime, stime, cutime and cstime are fields 14 to 17.
	if len(f) < 15 {
		return 0, 0, fmt.Errorf("/proc stat: %d fields after the command name, want at least 15", len(f))
	}
	var t [4]int64
	var errs []error
	for k := range t {
		var err error
		t[k], err = strconv.ParseInt(f[11+k], 10, 64)
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return 0, 0, fmt.Errorf("/proc stat: utime/stime/cutime/cstime: %w", err)
	}
	return time.Duration(t[0]+t[1]) * clockTick, time.Duration(t[2]+t[3]) * clockTick, nil
}

// statusKB returns the value in kB of a /proc/<pid>/status line such as "VmHWM:  1234 kB"; 0 if
// absent.
func statusKB(status, key string) int64 {
	for line := range strings.SplitSeq(status, "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}
