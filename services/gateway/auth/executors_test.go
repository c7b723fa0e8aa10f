package auth_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	"github.com/jobmesh/jobmesh/internal/clock"
	"github.com/jobmesh/jobmesh/services/gateway/auth"
)

// countingCreds is an auth.ExecutorCredentials over fixed groups that records every lookup (by
// the name asked) and answers err instead when it is set. With hold set, lookups wait for it
// to close (or the lookup's context to end).
type countingCreds struct {
	groups []auth.ExecutorGroupCredential
	hold   chan struct{}

	mu    sync.Mutex
	err   error
	asked map[string]int
}

func (f *countingCreds) ExecutorGroups(ctx context.Context, app string) ([]auth.ExecutorGroupCredential, error) {
	f.mu.Lock()
	if f.asked == nil {
		f.asked = map[string]int{}
	}
	f.asked[app]++
	err := f.err
	f.mu.Unlock()
	if f.hold != nil {
		select {
		case <-f.hold:
		case <-ctx.Done(): // as a gRPC call would
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	if err != nil {
		return nil, err
	}
	var out []auth.ExecutorGroupCredential
	for _, g := range f.groups {
		if strings.EqualFold(g.App, app) {
			out = append(out, g)
		}
	}
	return out, nil
}

func (f *countingCreds) setErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

// lookups is how many lookups were made, for names in names or, with none, in all.
func (f *countingCreds) lookups(names ...string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for name, c := range f.asked {
		if len(names) == 0 || strings.Contains(" "+strings.Join(names, " ")+" ", " "+name+" ") {
			n += c
		}
	}
	return n
}

// execGuard is a guard over creds with a fake clock; call presents an executor credential
// (app, tok) on RegisterExecutor.
func execGuard(t *testing.T, creds auth.ExecutorCredentials) (clk *clock.Fake, call func(app, tok string) error) {
	t.Helper()
	clk = clock.NewFake(time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC))
	g, err := auth.NewGuard(auth.GuardConfig{InternalToken: internalToken, Executors: creds, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return clk, func(app, tok string) error {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+tok, auth.ExecutorAppHeader, app))
		_, err := g.Authorize(ctx, registryv1.RegistryService_RegisterExecutor_FullMethodName, nil)
		return err
	}
}

var sevenOnly = []auth.ExecutorGroupCredential{{App: "app-seven", GroupID: 7, Token: groupSevenToken}}

// TestConcurrentExecutorLookupsAreMerged: 100 calls naming one unknown app at once cost the
// registry one lookup, and each is refused.
func TestConcurrentExecutorLookupsAreMerged(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		creds := &countingCreds{groups: sevenOnly, hold: make(chan struct{})}
		_, call := execGuard(t, creds)
		errs := make(chan error, 100)
		for range 100 {
			go func() { errs <- call("app-none", groupSevenToken) }()
		}
		synctest.Wait() // all 100 wait, on one lookup or on their own
		if n := creds.lookups(); n != 1 {
			t.Errorf("100 concurrent calls naming one unknown app: %d lookups in flight, want 1", n)
		}
		close(creds.hold)
		for range 100 {
			wantCode(t, "a call naming an unknown app", <-errs, codes.Unauthenticated)
		}
	})
}

// TestExecutorCaseVariantsShareALookup: app names are case-sensitive, so spellings of a name
// in other cases are refused, but all of them cost the registry one lookup per TTL; two groups
// whose names differ only in case each keep their own token.
func TestExecutorCaseVariantsShareALookup(t *testing.T) {
	t.Parallel()
	creds := &countingCreds{groups: append([]auth.ExecutorGroupCredential{
		{App: "Mixed", GroupID: 8, Token: "token-of-upper-mixed-0123456789"},
		{App: "mixed", GroupID: 9, Token: "token-of-lower-mixed-0123456789"},
	}, sevenOnly...)}
	clk, call := execGuard(t, creds)
	if err := call("app-seven", groupSevenToken); err != nil {
		t.Fatalf("app-seven with its token: %v", err)
	}
	for _, variant := range []string{"App-seven", "APP-SEVEN", "aPp-SeVeN", "app-sevEN"} {
		wantCode(t, variant+" with app-seven's token", call(variant, groupSevenToken), codes.Unauthenticated)
	}
	if err := call("Mixed", "token-of-upper-mixed-0123456789"); err != nil {
		t.Errorf("Mixed with its token: %v", err)
	}
	if err := call("mixed", "token-of-lower-mixed-0123456789"); err != nil {
		t.Errorf("mixed with its token: %v", err)
	}
	wantCode(t, "mixed with Mixed's token", call("mixed", "token-of-upper-mixed-0123456789"), codes.Unauthenticated)
	wantCode(t, "MIXED with Mixed's token", call("MIXED", "token-of-upper-mixed-0123456789"), codes.Unauthenticated)
	if n := creds.lookups(); n != 2 {
		t.Errorf("app-seven and mixed in several cases: %d lookups (%v), want 2 (one per name ignoring case)", n, creds.asked)
	}
	clk.Advance(5 * time.Second)
	wantCode(t, "APP-SEVEN after the TTL", call("APP-SEVEN", groupSevenToken), codes.Unauthenticated)
	if n := creds.lookups(); n != 3 {
		t.Errorf("after the TTL: %d lookups, want 3", n)
	}
}

// TestInvalidExecutorAppNamesAreNotLookedUp: a name no group can have (the registry's rule:
// 1-64 of [A-Za-z0-9_.-]) is refused without asking the registry.
func TestInvalidExecutorAppNamesAreNotLookedUp(t *testing.T) {
	t.Parallel()
	creds := &countingCreds{groups: sevenOnly}
	_, call := execGuard(t, creds)
	for _, app := range []string{"app seven", "app/seven", "app%", "äpp", "app\x00", strings.Repeat("a", 65), "app,seven"} {
		wantCode(t, fmt.Sprintf("app %q", app), call(app, groupSevenToken), codes.Unauthenticated)
	}
	if n := creds.lookups(); n != 0 {
		t.Errorf("invalid app names: %d lookups (%v), want 0", n, creds.asked)
	}
	if err := call(strings.Repeat("a", 64), groupSevenToken); status.Code(err) != codes.Unauthenticated || creds.lookups() != 1 {
		t.Errorf("a valid unknown name of 64 characters: %v after %d lookups, want Unauthenticated after 1", err, creds.lookups())
	}
}

// TestKnownExecutorSurvivesAFloodOfMisses: a stranger naming many more unknown apps than the
// cache keeps neither evicts a group's entry nor grows the cache without bound.
func TestKnownExecutorSurvivesAFloodOfMisses(t *testing.T) {
	t.Parallel()
	creds := &countingCreds{groups: sevenOnly}
	clk, call := execGuard(t, creds)
	if err := call("app-seven", groupSevenToken); err != nil {
		t.Fatalf("app-seven with its token: %v", err)
	}
	for i := range 25000 {
		wantCode(t, "an unknown app", call(fmt.Sprintf("nope-%d", i), "x"), codes.Unauthenticated)
	}
	if err := call("app-seven", groupSevenToken); err != nil {
		t.Fatalf("app-seven after the flood: %v", err)
	}
	if n := creds.lookups("app-seven"); n != 1 {
		t.Errorf("app-seven after 25000 misses: looked up %d times, want 1 (still cached)", n)
	}
	// The first misses are remembered; past the cap new ones are not (so asked again).
	before := creds.lookups()
	_ = call("nope-0", "x")
	_ = call("nope-24999", "x")
	if got := creds.lookups() - before; got != 1 {
		t.Errorf("an early and a late miss again: %d lookups, want 1 (the late one was not kept)", got)
	}
	// Once they expire, misses make room again.
	clk.Advance(5 * time.Second)
	_ = call("nope-new", "x")
	before = creds.lookups()
	_ = call("nope-new", "x")
	if got := creds.lookups() - before; got != 0 {
		t.Errorf("a miss after the old ones expired, again: %d lookups, want 0 (kept)", got)
	}
}

// TestRegistryFailureIsCachedBriefly: while the registry fails, executors' calls are answered
// Unavailable from one lookup per second, and the first call after it recovers succeeds.
func TestRegistryFailureIsCachedBriefly(t *testing.T) {
	t.Parallel()
	creds := &countingCreds{groups: sevenOnly, err: status.Error(codes.Unavailable, "registry down")}
	clk, call := execGuard(t, creds)
	for range 50 {
		wantCode(t, "app-seven while the registry is down", call("app-seven", groupSevenToken), codes.Unavailable)
	}
	if n := creds.lookups(); n != 1 {
		t.Errorf("50 calls while the registry is down: %d lookups, want 1", n)
	}
	clk.Advance(time.Second)
	wantCode(t, "app-seven a second later", call("app-seven", groupSevenToken), codes.Unavailable)
	creds.setErr(nil)
	clk.Advance(time.Second)
	if err := call("app-seven", groupSevenToken); err != nil {
		t.Errorf("app-seven once the registry is back: %v", err)
	}
	if n := creds.lookups(); n != 3 {
		t.Errorf("lookups = %d, want 3 (one per second)", n)
	}
}

// TestCancelledCallerDoesNotFailTheLookup: a caller that gives up while the lookup it started
// is in flight leaves it running for the others, who get the registry's answer.
func TestCancelledCallerDoesNotFailTheLookup(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		creds := &countingCreds{groups: sevenOnly, hold: make(chan struct{})}
		clk := clock.NewFake(time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC))
		g, err := auth.NewGuard(auth.GuardConfig{InternalToken: internalToken, Executors: creds, Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		md := metadata.Pairs("authorization", "Bearer "+groupSevenToken, auth.ExecutorAppHeader, "app-seven")
		ctx, cancel := context.WithCancel(metadata.NewIncomingContext(context.Background(), md))
		first := make(chan error, 1)
		go func() {
			_, err := g.Authorize(ctx, registryv1.RegistryService_RegisterExecutor_FullMethodName, nil)
			first <- err
		}()
		synctest.Wait()
		cancel()
		wantCode(t, "the caller that gave up", <-first, codes.Canceled)
		second := make(chan error, 1)
		go func() {
			_, err := g.Authorize(metadata.NewIncomingContext(context.Background(), md), registryv1.RegistryService_RegisterExecutor_FullMethodName, nil)
			second <- err
		}()
		synctest.Wait()
		close(creds.hold)
		if err := <-second; err != nil {
			t.Errorf("app-seven waiting on the lookup the cancelled caller started: %v", err)
		}
		if n := creds.lookups(); n != 1 {
			t.Errorf("lookups = %d, want 1", n)
		}
	})
}

// TestExecutorTokens: an XXL-JOB executor's token must be its group's, or the fallback for a
// group without one (anything when the fallback is empty too); an unknown app (a name differing
// only in case included) is NotFound, a registry that fails is Unavailable, and answers are
// cached as the guard's are.
func TestExecutorTokens(t *testing.T) {
	t.Parallel()
	creds := &countingCreds{groups: []auth.ExecutorGroupCredential{
		{App: "with-token", GroupID: 1, Token: "group-secret"},
		{App: "open", GroupID: 2},
	}}
	tokens := auth.NewExecutorTokens(creds, nil)
	ctx := t.Context()
	for _, tc := range []struct {
		app, token, fallback string
		code                 codes.Code
		grouped              bool
	}{
		{"with-token", "group-secret", "", codes.OK, true},
		{"with-token", "group-secret", "fallback", codes.OK, true},
		{"with-token", "fallback", "fallback", codes.Unauthenticated, false},
		{"with-token", "", "", codes.Unauthenticated, false},
		{"open", "fallback", "fallback", codes.OK, false},
		{"open", "other", "fallback", codes.Unauthenticated, false},
		{"open", "", "fallback", codes.Unauthenticated, false},
		{"open", "anything", "", codes.OK, false},
		{"open", "", "", codes.OK, false},
		{"With-Token", "group-secret", "", codes.NotFound, false},
		{"nosuch", "group-secret", "", codes.NotFound, false},
		{"bad name!", "x", "", codes.NotFound, false},
	} {
		grouped, err := tokens.Check(ctx, tc.app, tc.token, tc.fallback)
		if status.Code(err) != tc.code || grouped != tc.grouped {
			t.Errorf("Check(%q, %q, fallback %q) = %v, %v; want %v, %v", tc.app, tc.token, tc.fallback, grouped, err, tc.grouped, tc.code)
		}
	}
	if n := creds.lookups("with-token"); n != 1 {
		t.Errorf("registry asked %d times for with-token (any case), want 1: the answer is cached", n)
	}
	creds.setErr(status.Error(codes.Unavailable, "registry down"))
	if _, err := tokens.Check(ctx, "unseen", "x", ""); status.Code(err) != codes.Unavailable {
		t.Errorf("Check while the registry fails = %v, want Unavailable", err)
	}
}
