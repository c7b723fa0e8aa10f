package auth

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// ThrottleConfig limits password guessing (Login and ChangePassword). Four counts of failures
// are kept, each locking out for Lockout once past its limit, doubling with every further
// failure up to MaxLockout:
//   - per user name and client address: MaxFailures; a success clears it;
//   - per client address, whatever the user name: AddrMaxFailures; this stops one address from
//     trying a password on many names;
//   - per IPv6 /48, over all its /64s (each /64 is one address): NetMaxFailures; one site
//     holds a /48, so this stops it from rotating through 65,536 addresses;
//   - per user name, from every address: UserMaxFailures. Past it the name is under attack, but
//     it is not locked for everyone: an address that has logged in as the name before keeps its
//     own MaxFailures, and any other address gets one guess for the name until the count ages
//     out. Rotating addresses thus buys one guess per address, and never locks out the owner.
//
// A failure is counted before the password is checked and taken back on success, so concurrent
// guesses cannot all pass a check made before any of them failed.
type ThrottleConfig struct {
	// MaxFailures is how many failures one address gets for one user name; default 5.
	MaxFailures int
	// AddrMaxFailures is how many failures one address gets over all user names; default 50.
	AddrMaxFailures int
	// NetMaxFailures is how many failures one IPv6 /48 gets over all its addresses and user
	// names; default 10 × AddrMaxFailures (500).
	NetMaxFailures int
	// UserMaxFailures is how many failures one user name gets from all addresses before it is
	// under attack; default 50.
	UserMaxFailures int
	// Lockout is the first lockout; default 30 s.
	Lockout time.Duration
	// MaxLockout caps the doubling; default 15 min. A count with no failure for this long is
	// forgotten.
	MaxLockout time.Duration
	// MaxEntries caps the counts kept (each is about 200 bytes); default 100,000. Past it the
	// least recently counted one with no lockout running is forgotten to make room, and when
	// the oldest all have a lockout running, a guess that needs a new count is refused.
	MaxEntries int
}

// throttle counts failed logins in memory. Counts are kept in a list, least recently counted
// first, so forgetting quiet counts and making room past MaxEntries take a few steps from its
// front, never a scan of all of them.
type throttle struct {
	cfg ThrottleConfig

	mu     sync.Mutex
	state  map[string]*failures
	oldest *failures // the list's ends
	newest *failures
	// good remembers, per user name, the addresses that logged in as it (the last few).
	good map[string][]string
}

type failures struct {
	key   string
	n     int
	last  time.Time
	until time.Time // locked out before this

	prev, next *failures // in the list by last
}

func newThrottle(cfg ThrottleConfig) (*throttle, error) {
	if cfg.MaxFailures == 0 {
		cfg.MaxFailures = 5
	}
	if cfg.AddrMaxFailures == 0 {
		cfg.AddrMaxFailures = 10 * cfg.MaxFailures
	}
	if cfg.NetMaxFailures == 0 {
		cfg.NetMaxFailures = 10 * cfg.AddrMaxFailures
	}
	if cfg.UserMaxFailures == 0 {
		cfg.UserMaxFailures = 10 * cfg.MaxFailures
	}
	if cfg.Lockout == 0 {
		cfg.Lockout = 30 * time.Second
	}
	if cfg.MaxLockout == 0 {
		cfg.MaxLockout = 15 * time.Minute
	}
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = 100000
	}
	if cfg.MaxFailures < 1 || cfg.AddrMaxFailures < 1 || cfg.NetMaxFailures < 1 || cfg.UserMaxFailures < 1 || cfg.Lockout <= 0 || cfg.MaxLockout < cfg.Lockout {
		return nil, errors.New("auth: throttle: want failure limits ≥ 1 and 0 < lockout ≤ max lockout")
	}
	if cfg.MaxEntries < 16 {
		return nil, errors.New("auth: throttle: want max entries ≥ 16")
	}
	return &throttle{cfg: cfg, state: map[string]*failures{}, good: map[string][]string{}}, nil
}

func pairKey(user, client string) string { return "p\x00" + user + "\x00" + client }
func userKey(user string) string         { return "u\x00" + user }
func addrKey(client string) string       { return "a\x00" + client }
func netKey(net string) string           { return "n\x00" + net }

// net48 is the /48 of an IPv6 client key (a /64, addrKeyOf), or "" for any other client.
func net48(client string) string {
	p, err := netip.ParsePrefix(client)
	if err != nil || !p.Addr().Is6() {
		return ""
	}
	n, _ := p.Addr().Prefix(48)
	return n.String()
}

// maxGood is how many known-good addresses are kept per user name.
const maxGood = 8

// Steps bounding the work of one reserve: expireSteps quiet counts forgotten at most, and
// evictSteps counts looked at, from the oldest, for one without a lockout to make room.
const (
	expireSteps = 64
	evictSteps  = 64
)

// errThrottleFull refuses a guess that needs a new count while the throttle is full of counts
// with lockouts running.
var errThrottleFull = errors.New("too many clients")

// count is one of the counts a failure adds to, with its limit; past it a lockout starts, except
// for the per-user count (locks false), which only puts the name under attack.
type count struct {
	key   string
	limit int
	locks bool
}

// reserve counts a failure of user from client before the password is checked, unless a lockout
// is running; it returns the wait when locked out, and errThrottleFull when it has no room for
// the counts. When the password was right, the caller calls succeed on the reservation.
func (t *throttle) reserve(user, client string, now time.Time) (time.Duration, *reservation, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expire(now)
	if len(t.good) > 4096 {
		clear(t.good)
	}
	pair, netK := pairKey(user, client), ""
	if n := net48(client); n != "" {
		netK = netKey(n)
	}
	// This guess's counts start again when quiet, even if expire has not reached them yet.
	for _, k := range []string{pair, addrKey(client), userKey(user), netK} {
		if f := t.state[k]; f != nil && t.quiet(f, now) {
			t.remove(f)
		}
	}
	pairLimit := t.cfg.MaxFailures
	if u := t.state[userKey(user)]; u != nil && u.n >= t.cfg.UserMaxFailures && !t.isGood(user, client) {
		pairLimit = 1 // under attack: one guess per unknown address
	}
	counts := []count{{pair, pairLimit, true}, {addrKey(client), t.cfg.AddrMaxFailures, true}}
	if netK != "" {
		counts = append(counts, count{netK, t.cfg.NetMaxFailures, true})
	}
	var wait time.Duration
	for _, c := range counts {
		f := t.state[c.key]
		if f == nil {
			continue
		}
		if f.until.After(now) {
			wait = max(wait, f.until.Sub(now))
		} else if f.n >= c.limit && c.limit == 1 {
			wait = max(wait, t.cfg.Lockout) // the one guess is spent
		}
	}
	if wait > 0 {
		return wait, nil, nil
	}
	counts = append(counts, count{userKey(user), t.cfg.UserMaxFailures, false})
	need := 0
	for _, c := range counts {
		if t.state[c.key] == nil {
			need++
		}
	}
	if !t.makeRoom(counts, need, now) {
		return 0, nil, errThrottleFull
	}
	r := &reservation{t: t, user: user, client: client}
	for _, c := range counts {
		f := t.state[c.key]
		if f == nil {
			f = &failures{key: c.key}
			t.state[c.key] = f
		} else {
			t.unlink(f)
		}
		t.push(f)
		f.n++
		f.last = now
		if c.locks && f.n >= c.limit {
			d := t.cfg.Lockout
			for i := c.limit; i < f.n && d < t.cfg.MaxLockout; i++ {
				d *= 2
			}
			d = min(d, t.cfg.MaxLockout)
			f.until = now.Add(d)
			r.lock = max(r.lock, d)
		}
		if c.key == pair {
			r.n = f.n
		}
	}
	return 0, r, nil
}

// quiet reports whether f may be forgotten: no failure for MaxLockout and no lockout running.
func (t *throttle) quiet(f *failures, now time.Time) bool {
	return now.Sub(f.last) > t.cfg.MaxLockout && !f.until.After(now)
}

// expire forgets up to expireSteps quiet counts, from the oldest. t.mu is held.
func (t *throttle) expire(now time.Time) {
	for i := 0; i < expireSteps && t.oldest != nil && t.quiet(t.oldest, now); i++ {
		t.remove(t.oldest)
	}
}

// makeRoom makes room for need new counts under MaxEntries, forgetting the least recently
// counted ones with no lockout running (other than this guess's counts) among the evictSteps
// oldest; it reports whether there is room. t.mu is held.
func (t *throttle) makeRoom(counts []count, need int, now time.Time) bool {
	f := t.oldest
	for i := 0; i < evictSteps && f != nil && len(t.state)+need > t.cfg.MaxEntries; i++ {
		next := f.next
		if !f.until.After(now) && !slices.ContainsFunc(counts, func(c count) bool { return c.key == f.key }) {
			t.remove(f)
		}
		f = next
	}
	return len(t.state)+need <= t.cfg.MaxEntries
}

// push appends f to the list as the newest. t.mu is held.
func (t *throttle) push(f *failures) {
	f.prev, f.next = t.newest, nil
	if t.newest != nil {
		t.newest.next = f
	} else {
		t.oldest = f
	}
	t.newest = f
}

// unlink takes f out of the list. t.mu is held.
func (t *throttle) unlink(f *failures) {
	if f.prev != nil {
		f.prev.next = f.next
	} else {
		t.oldest = f.next
	}
	if f.next != nil {
		f.next.prev = f.prev
	} else {
		t.newest = f.prev
	}
	f.prev, f.next = nil, nil
}

// remove forgets f. t.mu is held.
func (t *throttle) remove(f *failures) {
	t.unlink(f)
	delete(t.state, f.key)
}

// isGood reports whether client has logged in as user. t.mu is held.
func (t *throttle) isGood(user, client string) bool {
	for _, a := range t.good[user] {
		if a == client {
			return true
		}
	}
	return false
}

// reservation is a failure counted ahead of a password check.
type reservation struct {
	t            *throttle
	user, client string
	// n is the pair's count with this failure, lock the lockout it started (0 for none).
	n    int
	lock time.Duration
}

// succeed takes the reserved failure back: the pair's count is cleared, the address's, its
// /48's and the user name's lose this failure, and the address is remembered as the user's.
func (r *reservation) succeed() {
	t := r.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if f := t.state[pairKey(r.user, r.client)]; f != nil {
		t.remove(f)
	}
	keys := []string{addrKey(r.client), userKey(r.user)}
	if n := net48(r.client); n != "" {
		keys = append(keys, netKey(n))
	}
	for _, k := range keys {
		if f := t.state[k]; f != nil && f.n > 0 {
			f.n--
		}
	}
	if !t.isGood(r.user, r.client) {
		g := append(t.good[r.user], r.client)
		if len(g) > maxGood {
			g = g[len(g)-maxGood:]
		}
		t.good[r.user] = g
	}
}

// Metadata keys by which the gateway tells the auth service the address of its HTTP client.
// The auth service believes ClientAddrKey only with GatewayTokenKey equal to the internal token,
// and the gateway drops both from what HTTP clients send (as Grpc-Metadata-* headers).
const (
	ClientAddrKey   = "x-jobmesh-client-addr"
	GatewayTokenKey = "x-jobmesh-gateway-token"
)

// clientAddr is the address a call came from, the key of the throttle: the address the gateway
// reports when the call proves it comes from the gateway (GatewayTokenKey), else the gRPC peer's
// address, or, when that peer is a trusted proxy, the first untrusted address of
// x-forwarded-for counted from the right. An IPv6 address counts as its /64.
func (s *Service) clientAddr(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if s.cfg.InternalToken != "" {
		toks, addrs := md.Get(GatewayTokenKey), md.Get(ClientAddrKey)
		if len(toks) == 1 && len(addrs) == 1 && subtle.ConstantTimeCompare([]byte(toks[0]), []byte(s.cfg.InternalToken)) == 1 {
			return addrKeyOf(addrs[0])
		}
	}
	remote := "unknown"
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		remote = p.Addr.String()
	}
	return addrKeyOf(ClientAddress(remote, md.Get("x-forwarded-for"), s.cfg.TrustedProxies))
}

// addrKeyOf turns an address into its throttle key: IPv4 as is, IPv6 as its /64 (one host
// holds a whole /64), anything unparsable as is.
func addrKeyOf(a string) string {
	ip, err := netip.ParseAddr(a)
	if err != nil {
		return a
	}
	ip = ip.Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// ClientAddress is the address of the client behind a connection from remote (host:port or a
// bare address): remote itself unless it is in trusted, else the first entry of x-forwarded-for
// (xff, every value of the header) not in trusted, counted from the right. Entries a client
// wrote itself lie left of the first untrusted one, so they are never believed.
func ClientAddress(remote string, xff []string, trusted []netip.Prefix) string {
	addr := remote
	if h, _, err := net.SplitHostPort(remote); err == nil {
		addr = h
	}
	var hops []string
	for _, v := range xff {
		for _, h := range strings.Split(v, ",") {
			if h = strings.TrimSpace(h); h != "" {
				hops = append(hops, h)
			}
		}
	}
	for i := len(hops) - 1; i >= 0 && isTrusted(addr, trusted); i-- {
		addr = hops[i]
	}
	return addr
}

func isTrusted(addr string, trusted []netip.Prefix) bool {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return false
	}
	ip = ip.Unmap()
	for _, p := range trusted {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// ParseCIDRs parses a comma-separated list of CIDR prefixes or bare addresses (a single host),
// as the --trusted-proxies flag takes them.
func ParseCIDRs(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		if p, err := netip.ParsePrefix(e); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(e)
		if err != nil {
			return nil, fmt.Errorf("%q: want a CIDR prefix (10.0.0.0/8) or an address", e)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}
