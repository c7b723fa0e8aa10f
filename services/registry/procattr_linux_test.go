package registry_test

import "syscall"

// childAttr makes an agent process die with the test binary, even when the test is killed on
// timeout, so no agent outlives its test.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
