package auth

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// ThrottleConfig limits password guessing. After MaxFailures failed logins for one user name from
// one client address, that pair is locked out for Lockout; every further failure doubles it, up
// to MaxLockout. Failures of one user name from all addresses together lock it out after
// 10×MaxFailures, so rotating addresses does not buy unlimited guesses. A successful login
// clears the pair's count.
type ThrottleConfig struct {
	// MaxFailures is how many failures are free; default 5.
	MaxFailures int
	// Lockout is the first lockout; default 30 s.
	Lockout time.Duration
	// MaxLockout caps the doubling; default 15 min.
	MaxLockout time.Duration
}

// throttle counts failed logins in memory. Past 1024 entries, counts with no failure for
// MaxLockout and no lockout running are forgotten, which bounds the map.
type throttle struct {
	cfg ThrottleConfig

	mu    sync.Mutex
	state map[string]*failures
}

type failures struct {
	n     int
	last  time.Time
	until time.Time // locked out before this
}

func newThrottle(cfg ThrottleConfig) (*throttle, error) {
	if cfg.MaxFailures == 0 {
		cfg.MaxFailures = 5
	}
	if cfg.Lockout == 0 {
		cfg.Lockout = 30 * time.Second
	}
	if cfg.MaxLockout == 0 {
		cfg.MaxLockout = 15 * time.Minute
	}
	if cfg.MaxFailures < 1 || cfg.Lockout <= 0 || cfg.MaxLockout < cfg.Lockout {
		return nil, errors.New("auth: throttle: want max failures ≥ 1 and 0 < lockout ≤ max lockout")
	}
	return &throttle{cfg: cfg, state: map[string]*failures{}}, nil
}

func pairKey(user, client string) string { return user + "\x00" + client }
func userKey(user string) string         { return user + "\x00*" }

// locked returns how long the user name is still locked out from client.
func (t *throttle) locked(user, client string, now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	var wait time.Duration
	for _, k := range []string{pairKey(user, client), userKey(user)} {
		if f := t.state[k]; f != nil && f.until.After(now) {
			wait = max(wait, f.until.Sub(now))
		}
	}
	return wait
}

// fail records a failure and returns the pair's count and the lockout it started (0 for none).
func (t *throttle) fail(user, client string, now time.Time) (int, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.state) > 1024 {
		t.prune(now)
	}
	var n int
	var lock time.Duration
	for _, k := range []struct {
		key   string
		limit int
	}{{pairKey(user, client), t.cfg.MaxFailures}, {userKey(user), 10 * t.cfg.MaxFailures}} {
		f := t.state[k.key]
		if f == nil {
			f = &failures{}
			t.state[k.key] = f
		}
		f.n++
		f.last = now
		if f.n >= k.limit {
			d := t.cfg.Lockout
			for i := k.limit; i < f.n && d < t.cfg.MaxLockout; i++ {
				d *= 2
			}
			d = min(d, t.cfg.MaxLockout)
			f.until = now.Add(d)
			lock = max(lock, d)
		}
		if n == 0 {
			n = f.n
		}
	}
	return n, lock
}

// succeed clears the pair's failures. The per-user count stays: it only ages out.
func (t *throttle) succeed(user, client string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.state, pairKey(user, client))
}

// prune forgets counts with no failure for MaxLockout and no lockout running. t.mu is held.
func (t *throttle) prune(now time.Time) {
	for k, f := range t.state {
		if now.Sub(f.last) > t.cfg.MaxLockout && !f.until.After(now) {
			delete(t.state, k)
		}
	}
}

// clientAddr is the address a call came from: the last x-forwarded-for entry when present
// (grpc-gateway appends the HTTP client's address there), else the gRPC peer's host.
func clientAddr(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-forwarded-for"); len(v) > 0 {
		parts := strings.Split(v[len(v)-1], ",")
		if a := strings.TrimSpace(parts[len(parts)-1]); a != "" {
			return a
		}
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		if host, _, err := net.SplitHostPort(p.Addr.String()); err == nil {
			return host
		}
		return p.Addr.String()
	}
	return "unknown"
}
