// Package routetest provides a fake route.Prober, so tests of FAILOVER, BUSYOVER and of code
// that wires a Router can script which executors are dead or busy without running any.
package routetest

import (
	"context"
	"sync"

	"github.com/jobmesh/jobmesh/services/scheduler/internal/route"
)

var _ route.Prober = (*Prober)(nil)

// Call is one probe the fake received, so tests can check who was asked, in what order.
type Call struct {
	Method string // "Beat" or "IdleBeat"
	Addr   string
	JobID  int64 // IdleBeat only
}

// Prober is a scripted route.Prober: every executor is alive and idle unless told otherwise.
// It is safe for concurrent use. The zero value is ready to use.
type Prober struct {
	mu    sync.Mutex
	dead  map[string]error
	busy  map[string]string
	calls []Call
}

// SetDead makes Beat and IdleBeat on addr fail with err; a nil err revives it.
func (p *Prober) SetDead(addr string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil {
		delete(p.dead, addr)
		return
	}
	if p.dead == nil {
		p.dead = make(map[string]error)
	}
	p.dead[addr] = err
}

// SetBusy makes IdleBeat on addr report busy with reason; an empty reason makes it idle again.
func (p *Prober) SetBusy(addr, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if reason == "" {
		delete(p.busy, addr)
		return
	}
	if p.busy == nil {
		p.busy = make(map[string]string)
	}
	p.busy[addr] = reason
}

// Beat records the call and fails if addr is dead.
func (p *Prober) Beat(_ context.Context, addr string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, Call{Method: "Beat", Addr: addr})
	return p.dead[addr]
}

// IdleBeat records the call, fails if addr is dead, and reports busy if it was set busy.
func (p *Prober) IdleBeat(_ context.Context, addr string, jobID int64) (bool, string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, Call{Method: "IdleBeat", Addr: addr, JobID: jobID})
	if err := p.dead[addr]; err != nil {
		return false, "", err
	}
	if reason, ok := p.busy[addr]; ok {
		return false, reason, nil
	}
	return true, "", nil
}

// Calls returns a copy of the probes received so far, oldest first.
func (p *Prober) Calls() []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Call(nil), p.calls...)
}
