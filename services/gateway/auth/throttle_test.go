package auth_test

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	authv1 "github.com/jobmesh/jobmesh/gen/jobmesh/auth/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/internal/memtest"
	"github.com/jobmesh/jobmesh/services/gateway/auth"
)

// from is a call context that says it comes from the gateway on behalf of HTTP client addr,
// proven with the internal token (as the gateway does).
func from(addr string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), auth.GatewayTokenKey, internalToken, auth.ClientAddrKey, addr)
}

// TestForgedClientAddressesAreIgnored: a stranger on the auth gRPC port who rotates
// x-forwarded-for, or claims the gateway's client address header without the internal token,
// is counted by its real address, so its guesses stay throttled.
func TestForgedClientAddressesAreIgnored(t *testing.T) {
	t.Parallel()
	st := dbtest.Stores(t)[1] // the throttle is in memory; one store is enough
	e := newEnv(t, st)
	e.createUser("tom", authv1.Role_ROLE_VIEWER)
	try := func(ctx context.Context, pw string) error {
		_, err := e.c.Login(ctx, &authv1.LoginRequest{Username: "tom", Password: pw})
		return err
	}
	for i := range 5 {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-forwarded-for", fmt.Sprintf("10.9.0.%d", i))
		if i%2 == 1 {
			ctx = metadata.AppendToOutgoingContext(context.Background(), auth.GatewayTokenKey, "not-the-internal-token", auth.ClientAddrKey, fmt.Sprintf("10.8.0.%d", i))
		}
		wantCode(t, fmt.Sprintf("guess %d from a forged address", i+1), try(ctx, "wrong-guess"), codes.Unauthenticated)
	}
	fresh := metadata.AppendToOutgoingContext(context.Background(), "x-forwarded-for", "10.9.9.9")
	wantCode(t, "the right password from yet another forged address", try(fresh, "tom-pass-phrase"), codes.ResourceExhausted)
}

// TestTrustedProxyForwardsTheClient: x-forwarded-for is believed from a trusted proxy, and only
// its rightmost untrusted entry (what the proxy saw), never what the client wrote left of it.
func TestTrustedProxyForwardsTheClient(t *testing.T) {
	t.Parallel()
	trusted, err := auth.ParseCIDRs("127.0.0.0/8, 10.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		remote string
		xff    []string
		want   string
	}{
		{"127.0.0.1:5000", []string{"203.0.113.7"}, "203.0.113.7"},
		{"127.0.0.1:5000", []string{"1.2.3.4, 203.0.113.7, 10.1.1.1"}, "203.0.113.7"},
		{"127.0.0.1:5000", []string{"1.2.3.4", "203.0.113.7"}, "203.0.113.7"},
		{"198.51.100.2:5000", []string{"203.0.113.7"}, "198.51.100.2"},
		{"127.0.0.1:5000", nil, "127.0.0.1"},
	} {
		if got := auth.ClientAddress(c.remote, c.xff, trusted); got != c.want {
			t.Errorf("ClientAddress(%s, %q) = %s, want %s", c.remote, c.xff, got, c.want)
		}
	}
	if _, err := auth.ParseCIDRs("10.0.0.0/8,nonsense"); err == nil || !strings.Contains(err.Error(), "nonsense") {
		t.Errorf("ParseCIDRs with a bad entry = %v, want an error naming it", err)
	}
	if got, _ := auth.ParseCIDRs("192.0.2.1"); len(got) != 1 || got[0] != netip.MustParsePrefix("192.0.2.1/32") {
		t.Errorf("ParseCIDRs(an address) = %v, want its /32", got)
	}
}

// TestAuthReadsSmallMessagesOnly: the auth server refuses a message over MaxMessageBytes before
// it is decoded or reaches a handler.
func TestAuthReadsSmallMessagesOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, dbtest.Stores(t)[1])
	_, err := e.c.Login(context.Background(), &authv1.LoginRequest{Username: "admin", Password: strings.Repeat("p", auth.MaxMessageBytes+1)})
	wantCode(t, "a login of more than 1 MiB", err, codes.ResourceExhausted)
}

// TestConcurrentGuessesStopAtTheLimit: guesses sent all at once cannot pass a lock none of them
// has reached yet: each counts its failure before its password is checked.
func TestConcurrentGuessesStopAtTheLimit(t *testing.T) {
	t.Parallel()
	st := dbtest.Stores(t)[1]
	e := newEnvWith(t, st, func(c *auth.Config) { c.MaxConcurrentHashes = 40; c.HashMemoryKiB = 8 * 1024 })
	e.createUser("tom", authv1.Role_ROLE_VIEWER)
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		mu    sync.Mutex
		got   = map[codes.Code]int{}
	)
	for range 30 {
		wg.Go(func() {
			<-start
			_, err := e.c.Login(context.Background(), &authv1.LoginRequest{Username: "tom", Password: "wrong-guess"})
			mu.Lock()
			got[status.Code(err)]++
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	if n := got[codes.Unauthenticated]; n > 5 { // Unauthenticated: the password was checked
		t.Errorf("30 concurrent wrong guesses: %d had their password checked (%v), want at most 5", n, got)
	}
}

// TestRotatingAddressesDoNotLockOutTheOwner: an attacker who spreads guesses for one user name
// over many addresses gets one guess per address once the name is under attack, but the owner
// still logs in from an address it used before, and one address cannot try many names.
func TestRotatingAddressesDoNotLockOutTheOwner(t *testing.T) {
	t.Parallel()
	st := dbtest.Stores(t)[1]
	e := newEnvWith(t, st, func(c *auth.Config) { c.Throttle.AddrMaxFailures = 10 })
	e.createUser("tom", authv1.Role_ROLE_VIEWER) // logs in from 127.0.0.1 (its real peer)
	home := from("198.51.100.1")
	if _, err := e.c.Login(home, &authv1.LoginRequest{Username: "tom", Password: "tom-pass-phrase"}); err != nil {
		t.Fatalf("tom at home: %v", err)
	}
	for i := range 60 {
		_, err := e.c.Login(from("203.0.113."+strconv.Itoa(i)), &authv1.LoginRequest{Username: "tom", Password: "wrong-guess"})
		wantCode(t, "a guess from a rotated address", err, codes.Unauthenticated)
	}
	// Under attack: a second guess from an address that failed is refused.
	_, err := e.c.Login(from("203.0.113.59"), &authv1.LoginRequest{Username: "tom", Password: "wrong-guess"})
	wantCode(t, "a second guess from a used address while under attack", err, codes.ResourceExhausted)
	// The owner, at home, is not locked out (nor after a typo).
	_, err = e.c.Login(home, &authv1.LoginRequest{Username: "tom", Password: "a-typo-here"})
	wantCode(t, "a typo at home", err, codes.Unauthenticated)
	if _, err := e.c.Login(home, &authv1.LoginRequest{Username: "tom", Password: "tom-pass-phrase"}); err != nil {
		t.Errorf("tom at home while his name is under attack: %v", err)
	}
	// And a fresh address still gets its one guess.
	if _, err := e.c.Login(from("198.51.100.2"), &authv1.LoginRequest{Username: "tom", Password: "tom-pass-phrase"}); err != nil {
		t.Errorf("tom from a new address while his name is under attack: %v", err)
	}
	// One address trying many names is locked out after AddrMaxFailures (10) failures.
	for i := range 10 {
		_, err := e.c.Login(from("192.0.2.99"), &authv1.LoginRequest{Username: "user" + strconv.Itoa(i), Password: "wrong-guess"})
		wantCode(t, "a guess for another name", err, codes.Unauthenticated)
	}
	_, err = e.c.Login(from("192.0.2.99"), &authv1.LoginRequest{Username: "admin", Password: "wrong-guess"})
	wantCode(t, "the 11th failure from one address", err, codes.ResourceExhausted)
}

// TestChangePasswordIsThrottled: guessing the old password through ChangePassword is limited
// like logins.
func TestChangePasswordIsThrottled(t *testing.T) {
	t.Parallel()
	st := dbtest.Stores(t)[1]
	e := newEnv(t, st)
	tom := e.createUser("tom", authv1.Role_ROLE_VIEWER)
	for i := range 5 {
		_, err := e.c.ChangePassword(tom, &authv1.ChangePasswordRequest{OldPassword: "guess-" + strconv.Itoa(i), NewPassword: "brand-new-phrase"})
		wantCode(t, "a wrong old password", err, codes.InvalidArgument)
	}
	_, err := e.c.ChangePassword(tom, &authv1.ChangePasswordRequest{OldPassword: "tom-pass-phrase", NewPassword: "brand-new-phrase"})
	wantCode(t, "the right old password after 5 wrong ones", err, codes.ResourceExhausted)
}

// TestPasswordPolicy: short, common and user-name-derived passwords are refused, naming the
// field, in every place a password is set.
func TestPasswordPolicy(t *testing.T) {
	t.Parallel()
	st := dbtest.Stores(t)[1]
	e := newEnv(t, st)
	tom := e.createUser("tomas", authv1.Role_ROLE_VIEWER)
	for _, pw := range []string{"password", "Password123!", "qwerty123", "short", "tomas", "samot", "tomas2026", "Tomas!", "tomas-tomas-tomas", "iloveyou", "123456789"} {
		_, err := e.c.CreateUser(e.admin, &authv1.CreateUserRequest{Password: pw, User: &authv1.User{Username: "tomas", Role: authv1.Role_ROLE_VIEWER}})
		wantField(t, "CreateUser with password "+pw, err, "password")
		_, err = e.c.UpdateUser(e.admin, &authv1.UpdateUserRequest{Password: pw, User: &authv1.User{Id: 2, Role: authv1.Role_ROLE_VIEWER}})
		wantField(t, "UpdateUser of tomas with password "+pw, err, "password")
		_, err = e.c.ChangePassword(tom, &authv1.ChangePasswordRequest{OldPassword: "tomas-pass-phrase", NewPassword: pw})
		wantField(t, "ChangePassword of tomas to "+pw, err, "new_password")
	}
	if _, err := e.c.ChangePassword(tom, &authv1.ChangePasswordRequest{OldPassword: "tomas-pass-phrase", NewPassword: "correct horse battery"}); err != nil {
		t.Errorf("ChangePassword to a good password: %v", err)
	}
}

func wantField(t *testing.T, what string, err error, field string) {
	t.Helper()
	st, _ := status.FromError(apierr.ToStatus(err))
	if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), field) {
		t.Errorf("%s: %v, want InvalidArgument naming %s", what, err, field)
	}
}

// TestWrongLoginsUnderLoadStayBounded: 40 concurrent wrong logins with the production hash cost
// (argon2id, 64 MiB) hash at most MaxConcurrentHashes at once: the rest fail at once with
// ResourceExhausted, and the process's peak memory grows by less than 4 × 64 MiB (twice that
// under the race detector; unbounded, it grows by 40 × 64 MiB). Not parallel: it measures the whole process.
func TestWrongLoginsUnderLoadStayBounded(t *testing.T) {
	st := dbtest.Stores(t)[1]
	store := dbtest.Open(t, st.Config, "auth", auth.MigrationsFS())
	svc, err := auth.New(auth.Config{Throttle: auth.ThrottleConfig{MaxFailures: 1000, AddrMaxFailures: 1000, UserMaxFailures: 1000}}, store)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Bootstrap(context.Background(), "admin", ""); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	debug.FreeOSMemory()
	base := memtest.ResetPeak(t)
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		mu    sync.Mutex
		got   = map[codes.Code]int{}
	)
	for range 40 {
		wg.Go(func() {
			<-start
			_, err := svc.Login(context.Background(), &authv1.LoginRequest{Username: "admin", Password: "wrong-guess"})
			mu.Lock()
			got[status.Code(err)]++
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	peak := memtest.PeakKiB(t)
	growth := (peak - base) / 1024
	t.Logf("40 concurrent wrong logins: %v; peak RSS %d MiB over a base of %d MiB (+%d MiB)", got, peak/1024, base/1024, growth)
	if bound := int64(memtest.Factor * 4 * 64); growth >= bound {
		t.Errorf("peak RSS grew by %d MiB, want < %d MiB", growth, bound)
	}
	if got[codes.ResourceExhausted] == 0 {
		t.Errorf("no login was refused as busy (%v): they queued", got)
	}
	if n := got[codes.Unauthenticated] + got[codes.ResourceExhausted]; n != 40 {
		t.Errorf("answers %v, want only Unauthenticated and ResourceExhausted", got)
	}
}

// TestFullThrottleRefusesNewClients: when the throttle's counts are all taken by running
// lockouts, a login from a new address is refused as "too many clients" (not counted, not
// checked), while lockouts already running stay.
func TestFullThrottleRefusesNewClients(t *testing.T) {
	t.Parallel()
	st := dbtest.Stores(t)[1]
	e := newEnvWith(t, st, func(c *auth.Config) {
		c.Throttle = auth.ThrottleConfig{MaxFailures: 1, AddrMaxFailures: 1, UserMaxFailures: 1000, MaxEntries: 16}
	})
	var last error
	for i := range 20 { // each address's pair and address counts lock at once: 2 of 16
		_, last = e.c.Login(from("203.0.113."+strconv.Itoa(i)), &authv1.LoginRequest{Username: "tom", Password: "wrong-guess"})
		if status.Code(last) != codes.Unauthenticated {
			break
		}
	}
	if st, _ := status.FromError(last); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "too many clients") {
		t.Fatalf("logins from ever new addresses: ended with %v, want ResourceExhausted \"too many clients\"", last)
	}
	_, err := e.c.Login(from("203.0.113.0"), &authv1.LoginRequest{Username: "tom", Password: "wrong-guess"})
	if st, _ := status.FromError(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "too many failed attempts") {
		t.Errorf("the first address again: %v, want its lockout (ResourceExhausted \"too many failed attempts\")", err)
	}
}
