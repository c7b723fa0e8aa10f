// Package memtest measures a test process's memory the way the bounds of the gateway's and auth
// service's load tests are stated: the growth of its peak resident set (VmHWM) from a reset, read
// from /proc. Linux only; a test that needs it fails elsewhere rather than skipping.
package memtest

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// ResetPeak resets the process's peak RSS (VmHWM) to its current RSS and returns that RSS in KiB.
func ResetPeak(t testing.TB) int64 {
	t.Helper()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Fatalf("memtest: reset the peak RSS: %v", err)
	}
	return StatusKiB(t, "VmRSS")
}

// PeakKiB is the process's peak RSS (VmHWM) in KiB.
func PeakKiB(t testing.TB) int64 {
	t.Helper()
	return StatusKiB(t, "VmHWM")
}

// StatusKiB reads a "kB" field of /proc/self/status (VmRSS, VmHWM, …).
func StatusKiB(t testing.TB, key string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatalf("memtest: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("memtest: %s: %v", l, err)
			}
			return n
		}
	}
	t.Fatalf("memtest: no %s in /proc/self/status", key)
	return 0
}
