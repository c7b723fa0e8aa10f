package failover_test

import "syscall"

// childAttr makes a replica die with the test binary, even when the test is killed on timeout.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
