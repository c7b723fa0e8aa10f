//go:build linux

package sdk

import (
	"os/exec"
	"sync"
	"syscall"
	"testing"
)

// BenchmarkFireScanConcurrent is the /proc reading of 8 fires ending at once, each with a window
// of a hundred pids (a busy machine forks that many while a fire runs): cpu-µs/scan is the CPU
// of one fire's fireProcesses.
func BenchmarkFireScanConcurrent(b *testing.B) {
	leader := exec.Command("sleep", "1000")
	leader.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := leader.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = leader.Process.Kill()
		_ = leader.Wait()
	})
	win := newPidWindow(leader.Process.Pid)
	for range 100 {
		if err := exec.Command("true").Run(); err != nil {
			b.Fatal(err)
		}
	}
	var ru0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	const fires = 8
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := range fires {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < b.N; i += fires {
				if got := fireProcesses(win, win.leader, "scan-bench"); len(got) != 1 || got[0] != win.leader {
					b.Errorf("fireProcesses: got %v, want [%d]", got, win.leader)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := ru.Utime.Nano() + ru.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
	b.ReportMetric(float64(cpu)/1e3/float64(b.N), "cpu-µs/scan")
}
