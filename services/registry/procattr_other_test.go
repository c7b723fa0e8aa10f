//go:build !linux

package registry_test

import "syscall"

// childAttr is empty where Pdeathsig does not exist: t.Cleanup still kills every agent.
func childAttr() *syscall.SysProcAttr { return nil }
