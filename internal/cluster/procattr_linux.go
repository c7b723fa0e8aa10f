package cluster

import "syscall"

// childAttr makes a child die with the process that started it, even when that one is killed.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
