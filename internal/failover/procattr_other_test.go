//go:build !linux

package failover_test

import "syscall"

// childAttr is empty where Pdeathsig does not exist: t.Cleanup still kills every replica.
func childAttr() *syscall.SysProcAttr { return nil }
