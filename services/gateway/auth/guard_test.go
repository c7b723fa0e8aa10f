package auth_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	authv1 "github.com/jobmesh/jobmesh/gen/jobmesh/auth/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
	"github.com/jobmesh/jobmesh/internal/clock"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/internal/grpcserver"
	"github.com/jobmesh/jobmesh/services/gateway/auth"
)

const (
	internalToken = "internal-token-for-tests-0123456789abcdef"
	// groupSevenToken is the access token of executor group 7 ("app-seven"; execCreds).
	groupSevenToken = "group-seven-token-0123456789"
)

// execCreds is an auth.ExecutorCredentials over fixed groups: app-seven (7) with a token,
// app-three (3) without one.
type execCreds struct{}

func (execCreds) ExecutorGroups(_ context.Context, app string) ([]auth.ExecutorGroupCredential, error) {
	switch app {
	case "app-seven":
		return []auth.ExecutorGroupCredential{{App: "app-seven", GroupID: 7, Token: groupSevenToken}}, nil
	case "app-three":
		return []auth.ExecutorGroupCredential{{App: "app-three", GroupID: 3}}, nil
	}
	return nil, nil
}

// asExecutor calls with an executor's credential: its app and a token.
func (e *env) asExecutor(app, tok string) context.Context {
	return metadata.AppendToOutgoingContext(e.as(tok), auth.ExecutorAppHeader, app)
}

// env is an auth service behind its guard on a loopback gRPC server, on one store, with a fake
// clock.
type env struct {
	t     *testing.T
	clk   *clock.Fake
	c     authv1.AuthServiceClient
	admin context.Context // calls as the first admin
}

func (e *env) as(tok string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)
}

func (e *env) login(user, password string) string {
	e.t.Helper()
	resp, err := e.c.Login(context.Background(), &authv1.LoginRequest{Username: user, Password: password})
	if err != nil {
		e.t.Fatalf("Login(%s): %v", user, err)
	}
	return resp.GetToken()
}

func (e *env) createUser(name string, role authv1.Role, groups ...int64) context.Context {
	e.t.Helper()
	if _, err := e.c.CreateUser(e.admin, &authv1.CreateUserRequest{Password: name + "-pass-phrase",
		User: &authv1.User{Username: name, Role: role, GroupIds: groups}}); err != nil {
		e.t.Fatalf("CreateUser(%s): %v", name, err)
	}
	return e.as(e.login(name, name+"-pass-phrase"))
}

func newEnv(t *testing.T, st dbtest.Store) *env { return newEnvWith(t, st, nil) }

// newEnvWith is newEnv with the service's config changed by tune (nil for none).
func newEnvWith(t *testing.T, st dbtest.Store, tune func(*auth.Config)) *env {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC))
	cfg := auth.Config{Now: clk.Now, SessionTTL: time.Hour, HashMemoryKiB: 1024, Groups: knownGroups, InternalToken: internalToken}
	if tune != nil {
		tune(&cfg)
	}
	svc, err := auth.New(cfg, dbtest.Open(t, st.Config, "auth", auth.MigrationsFS()))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	pw, err := svc.Bootstrap(context.Background(), "admin", "")
	if err != nil {
		t.Fatalf("Bootstrap: %v", err)
	}
	guard, err := auth.NewGuard(auth.GuardConfig{Users: svc, InternalToken: internalToken, Executors: execCreds{}, Audit: svc})
	if err != nil {
		t.Fatalf("NewGuard: %v", err)
	}
	g := grpcserver.New(slog.New(slog.DiscardHandler), append(guard.ServerOptions(), auth.ServerOptions()...)...)
	svc.Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	e := &env{t: t, clk: clk, c: authv1.NewAuthServiceClient(conn)}
	e.admin = e.as(e.login("admin", pw))
	return e
}

// groupList is an auth.GroupLister over a fixed set of executor groups.
type groupList map[int64]string

func (g groupList) GroupApps(context.Context) (map[int64]string, error) { return g, nil }

// knownGroups are the executor groups the tests' users may be given.
var knownGroups = groupList{1: "app-one", 3: "app-three", 7: "app-seven"}

func wantCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Errorf("%s: code %v (%v), want %v", what, got, err, want)
	}
}

// wantReason checks the reason of err's ErrorInfo.
func wantReason(t *testing.T, what string, err error, want string) {
	t.Helper()
	if info := apierr.Info(err); info.GetReason() != want || info.GetDomain() != apierr.Domain {
		t.Errorf("%s: ErrorInfo %v, want reason %s in %s", what, info, want, apierr.Domain)
	}
}

func TestGuardedAuthService(t *testing.T) {
	t.Parallel()
	for _, st := range dbtest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, st)
			ctx := context.Background()

			t.Run("no token, a bad token", func(t *testing.T) {
				_, err := e.c.GetCurrentUser(ctx, &authv1.GetCurrentUserRequest{})
				wantCode(t, "GetCurrentUser without a token", err, codes.Unauthenticated)
				wantReason(t, "GetCurrentUser without a token", err, apierr.ReasonTokenMissing)
				_, err = e.c.ListUsers(e.as("jms_made-up"), &authv1.ListUsersRequest{})
				wantCode(t, "ListUsers with a made-up token", err, codes.Unauthenticated)
				wantReason(t, "ListUsers with a made-up token", err, apierr.ReasonTokenInvalid)
			})

			t.Run("users are the admin's", func(t *testing.T) {
				viewer := e.createUser("vera", authv1.Role_ROLE_VIEWER, 7)
				me, err := e.c.GetCurrentUser(viewer, &authv1.GetCurrentUserRequest{})
				if err != nil || me.GetUser().GetRole() != authv1.Role_ROLE_VIEWER || len(me.GetUser().GetGroupIds()) != 1 {
					t.Fatalf("GetCurrentUser as vera = %v, %v; want a viewer of group 7", me, err)
				}
				_, err = e.c.CreateUser(viewer, &authv1.CreateUserRequest{Password: "whatever-pw", User: &authv1.User{Username: "x", Role: authv1.Role_ROLE_ADMIN}})
				wantCode(t, "CreateUser as a viewer", err, codes.PermissionDenied)
				wantReason(t, "CreateUser as a viewer", err, apierr.ReasonRoleRequired)
				_, err = e.c.ListAuditEvents(viewer, &authv1.ListAuditEventsRequest{})
				wantCode(t, "ListAuditEvents as a viewer", err, codes.PermissionDenied)
				// An executor's credential is checked (identified: refused for want of the
				// right, not of a credential) and allows nothing a person's does.
				_, err = e.c.ListUsers(e.asExecutor("app-seven", groupSevenToken), &authv1.ListUsersRequest{})
				wantCode(t, "ListUsers as group 7's executor", err, codes.PermissionDenied)
				invalid := apierr.ReasonExecutorTokenInvalid
				for _, bad := range []struct{ what, app, tok, reason string }{
					{"wrong token", "app-seven", groupSevenToken + "x", invalid},
					{"another group's token", "app-three", groupSevenToken, invalid},
					{"a group without a token", "app-three", "", apierr.ReasonTokenMissing},
					{"unknown app", "app-none", groupSevenToken, invalid},
					{"the internal token as an executor", "app-seven", internalToken, invalid},
				} {
					_, err = e.c.ListUsers(e.asExecutor(bad.app, bad.tok), &authv1.ListUsersRequest{})
					wantCode(t, "ListUsers as an executor with a "+bad.what, err, codes.Unauthenticated)
					wantReason(t, "ListUsers as an executor with a "+bad.what, err, bad.reason)
				}
				if _, err := e.c.ListUsers(e.as(internalToken), &authv1.ListUsersRequest{}); err != nil {
					t.Errorf("ListUsers with the internal token: %v", err)
				}

				for _, tt := range []struct {
					name  string
					req   *authv1.CreateUserRequest
					field string
				}{
					{"bad name", &authv1.CreateUserRequest{Password: "long-enough", User: &authv1.User{Username: "a b", Role: authv1.Role_ROLE_VIEWER}}, "user.username"},
					{"no role", &authv1.CreateUserRequest{Password: "long-enough", User: &authv1.User{Username: "ab"}}, "user.role"},
					{"short password", &authv1.CreateUserRequest{Password: "short", User: &authv1.User{Username: "ab", Role: authv1.Role_ROLE_VIEWER}}, "password"},
					{"bad group", &authv1.CreateUserRequest{Password: "long-enough", User: &authv1.User{Username: "ab", Role: authv1.Role_ROLE_VIEWER, GroupIds: []int64{-1}}}, "user.group_ids[0]"},
					{"unknown group", &authv1.CreateUserRequest{Password: "long-enough", User: &authv1.User{Username: "ab", Role: authv1.Role_ROLE_VIEWER, GroupIds: []int64{1, 99}}}, "user.group_ids[1]"},
					{"taken name", &authv1.CreateUserRequest{Password: "long-enough", User: &authv1.User{Username: "vera", Role: authv1.Role_ROLE_VIEWER}}, "user.username"},
				} {
					_, err := e.c.CreateUser(e.admin, tt.req)
					if s := status.Convert(err); s.Code() != codes.InvalidArgument || !strings.Contains(s.Message(), tt.field) {
						t.Errorf("CreateUser with %s: %v, want InvalidArgument naming %s", tt.name, err, tt.field)
					}
				}

				list, err := e.c.ListUsers(e.admin, &authv1.ListUsersRequest{Username: "VER"})
				if err != nil || len(list.GetUsers()) != 1 || list.GetUsers()[0].GetUsername() != "vera" {
					t.Fatalf("ListUsers(VER) = %v, %v; want vera", list, err)
				}
				id := list.GetUsers()[0].GetId()
				_, err = e.c.UpdateUser(e.admin, &authv1.UpdateUserRequest{User: &authv1.User{Id: id, Role: authv1.Role_ROLE_VIEWER, GroupIds: []int64{42}}})
				if s := status.Convert(err); s.Code() != codes.InvalidArgument || !strings.Contains(s.Message(), "user.group_ids[0]") {
					t.Errorf("UpdateUser to an unknown group: %v, want InvalidArgument naming user.group_ids[0]", err)
				}
				up, err := e.c.UpdateUser(e.admin, &authv1.UpdateUserRequest{Password: "a-new-password",
					User: &authv1.User{Id: id, Role: authv1.Role_ROLE_OPERATOR, GroupIds: []int64{3, 1, 3}}})
				if err != nil || up.GetUser().GetRole() != authv1.Role_ROLE_OPERATOR || len(up.GetUser().GetGroupIds()) != 2 {
					t.Fatalf("UpdateUser = %v, %v; want an operator of groups 1 and 3", up, err)
				}
				_, err = e.c.GetCurrentUser(viewer, &authv1.GetCurrentUserRequest{})
				wantCode(t, "vera's old session after an admin set her password", err, codes.Unauthenticated)
				if _, err := e.c.DeleteUser(e.admin, &authv1.DeleteUserRequest{Id: id}); err != nil {
					t.Fatalf("DeleteUser: %v", err)
				}
				_, err = e.c.Login(ctx, &authv1.LoginRequest{Username: "vera", Password: "a-new-password"})
				wantCode(t, "login of a deleted user", err, codes.Unauthenticated)

				me, err = e.c.GetCurrentUser(e.admin, &authv1.GetCurrentUserRequest{})
				if err != nil {
					t.Fatal(err)
				}
				_, err = e.c.DeleteUser(e.admin, &authv1.DeleteUserRequest{Id: me.GetUser().GetId()})
				wantCode(t, "deleting the last admin", err, codes.FailedPrecondition)
				wantReason(t, "deleting the last admin", err, apierr.ReasonLastAdmin)
				_, err = e.c.UpdateUser(e.admin, &authv1.UpdateUserRequest{User: &authv1.User{Id: me.GetUser().GetId(), Role: authv1.Role_ROLE_VIEWER}})
				wantCode(t, "demoting the last admin", err, codes.FailedPrecondition)
			})

			t.Run("changing one's password ends one's other sessions", func(t *testing.T) {
				here := e.createUser("cora", authv1.Role_ROLE_VIEWER, 1)
				there := e.as(e.login("cora", "cora-pass-phrase"))
				ct, err := e.c.CreateApiToken(here, &authv1.CreateApiTokenRequest{Token: &authv1.ApiToken{Name: "cron"}})
				if err != nil {
					t.Fatalf("CreateApiToken: %v", err)
				}
				if _, err := e.c.ChangePassword(here, &authv1.ChangePasswordRequest{OldPassword: "cora-pass-phrase", NewPassword: "cora-new-password"}); err != nil {
					t.Fatalf("ChangePassword: %v", err)
				}
				if _, err := e.c.GetCurrentUser(here, &authv1.GetCurrentUserRequest{}); err != nil {
					t.Errorf("the session that changed the password: %v, want it kept", err)
				}
				_, err = e.c.GetCurrentUser(there, &authv1.GetCurrentUserRequest{})
				wantCode(t, "cora's other session after she changed her password", err, codes.Unauthenticated)
				// API tokens are separate credentials: they stay until revoked (docs/auth.md).
				if _, err := e.c.GetCurrentUser(e.as(ct.GetSecret()), &authv1.GetCurrentUserRequest{}); err != nil {
					t.Errorf("cora's API token after a password change: %v, want it kept", err)
				}
				_, err = e.c.Login(ctx, &authv1.LoginRequest{Username: "cora", Password: "cora-pass-phrase"})
				wantCode(t, "login with the old password", err, codes.Unauthenticated)
				wantReason(t, "login with the old password", err, apierr.ReasonLoginFailed)
			})

			t.Run("api tokens", func(t *testing.T) {
				op := e.createUser("otto", authv1.Role_ROLE_OPERATOR, 1)
				ct, err := e.c.CreateApiToken(op, &authv1.CreateApiTokenRequest{Token: &authv1.ApiToken{Name: "ci"}})
				if err != nil || ct.GetSecret() == "" {
					t.Fatalf("CreateApiToken = %v, %v; want a secret", ct, err)
				}
				bot := e.as(ct.GetSecret())
				me, err := e.c.GetCurrentUser(bot, &authv1.GetCurrentUserRequest{})
				if err != nil || me.GetUser().GetUsername() != "otto" {
					t.Fatalf("GetCurrentUser with otto's API token = %v, %v; want otto", me, err)
				}
				list, err := e.c.ListApiTokens(op, &authv1.ListApiTokensRequest{})
				if err != nil || len(list.GetTokens()) != 1 || list.GetTokens()[0].GetLastUsedTime() == nil {
					t.Fatalf("ListApiTokens = %v, %v; want the used token", list, err)
				}
				if strings.Contains(list.String(), ct.GetSecret()) {
					t.Error("ListApiTokens shows a secret")
				}
				// Someone else may not revoke it; its owner may.
				other := e.createUser("olga", authv1.Role_ROLE_OPERATOR, 1)
				_, err = e.c.RevokeApiToken(other, &authv1.RevokeApiTokenRequest{Id: ct.GetToken().GetId()})
				wantCode(t, "revoking another user's token", err, codes.PermissionDenied)
				wantReason(t, "revoking another user's token", err, apierr.ReasonNotTokenOwner)
				if _, err := e.c.RevokeApiToken(op, &authv1.RevokeApiTokenRequest{Id: ct.GetToken().GetId()}); err != nil {
					t.Fatalf("RevokeApiToken: %v", err)
				}
				_, err = e.c.GetCurrentUser(bot, &authv1.GetCurrentUserRequest{})
				wantCode(t, "a revoked API token", err, codes.Unauthenticated)

				// One with an expiry stops at it.
				exp, err := e.c.CreateApiToken(op, &authv1.CreateApiTokenRequest{Token: &authv1.ApiToken{Name: "short",
					ExpireTime: timestamppb.New(e.clk.Now().Add(2 * time.Hour))}})
				if err != nil {
					t.Fatalf("CreateApiToken with an expiry: %v", err)
				}
				_, err = e.c.CreateApiToken(op, &authv1.CreateApiTokenRequest{Token: &authv1.ApiToken{Name: "past",
					ExpireTime: timestamppb.New(e.clk.Now().Add(-time.Second))}})
				if s := status.Convert(err); s.Code() != codes.InvalidArgument || !strings.Contains(s.Message(), "token.expire_time") {
					t.Errorf("CreateApiToken expiring in the past: %v, want InvalidArgument naming token.expire_time", err)
				}
				if _, err := e.c.GetCurrentUser(e.as(exp.GetSecret()), &authv1.GetCurrentUserRequest{}); err != nil {
					t.Errorf("an API token before its expiry: %v", err)
				}
			})

			t.Run("audit trail", func(t *testing.T) {
				page, err := e.c.ListAuditEvents(e.admin, &authv1.ListAuditEventsRequest{PageSize: 1000})
				if err != nil {
					t.Fatalf("ListAuditEvents: %v", err)
				}
				var got []string
				for _, ev := range page.GetEvents() {
					got = append(got, ev.GetUsername()+" "+strings.TrimPrefix(ev.GetAction(), "/jobmesh.auth.v1.AuthService/")+" "+ev.GetResource())
					if strings.Contains(ev.GetDetail(), "password") && strings.Contains(ev.GetDetail(), "a-new-password") {
						t.Errorf("audit detail %q holds a password", ev.GetDetail())
					}
				}
				all := strings.Join(got, "\n")
				for _, want := range []string{"admin CreateUser users/", "admin UpdateUser users/", "admin DeleteUser users/", "otto CreateApiToken api-tokens/", "otto RevokeApiToken api-tokens/", "vera Login users/vera"} {
					if !strings.Contains(all, want) {
						t.Errorf("audit events:\n%s\nwant one like %q", all, want)
					}
				}
				// Newest first, paged.
				p1, err := e.c.ListAuditEvents(e.admin, &authv1.ListAuditEventsRequest{PageSize: 2})
				if err != nil || len(p1.GetEvents()) != 2 || p1.GetNextPageToken() == "" {
					t.Fatalf("first page = %v, %v; want 2 events and a next page", p1, err)
				}
				p2, err := e.c.ListAuditEvents(e.admin, &authv1.ListAuditEventsRequest{PageSize: 2, PageToken: p1.GetNextPageToken()})
				if err != nil || len(p2.GetEvents()) != 2 || p2.GetEvents()[0].GetId() >= p1.GetEvents()[1].GetId() {
					t.Errorf("second page = %v, %v; want 2 older events", p2, err)
				}
				_, err = e.c.ListAuditEvents(e.admin, &authv1.ListAuditEventsRequest{PageSize: 2000})
				if s := status.Convert(err); s.Code() != codes.InvalidArgument || !strings.Contains(s.Message(), "page_size") {
					t.Errorf("page size 2000: %v, want InvalidArgument naming page_size", err)
				}
			})

			// Last: it moves the shared clock past every session.
			t.Run("sessions expire, logout ends them", func(t *testing.T) {
				sam := e.createUser("sam", authv1.Role_ROLE_VIEWER)
				if _, err := e.c.Logout(sam, &authv1.LogoutRequest{}); err != nil {
					t.Fatalf("Logout: %v", err)
				}
				_, err := e.c.GetCurrentUser(sam, &authv1.GetCurrentUserRequest{})
				wantCode(t, "a session after logout", err, codes.Unauthenticated)

				sam = e.as(e.login("sam", "sam-pass-phrase"))
				e.clk.Advance(59 * time.Minute)
				if _, err := e.c.GetCurrentUser(sam, &authv1.GetCurrentUserRequest{}); err != nil {
					t.Fatalf("a session before its expiry: %v", err)
				}
				e.clk.Advance(time.Minute)
				_, err = e.c.GetCurrentUser(sam, &authv1.GetCurrentUserRequest{})
				wantCode(t, "an expired session", err, codes.Unauthenticated)
			})
		})
	}
}

func TestLoginThrottling(t *testing.T) {
	t.Parallel()
	for _, st := range dbtest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, st)
			e.createUser("tom", authv1.Role_ROLE_VIEWER)
			ctx := context.Background()
			try := func(ctx context.Context, pw string) error {
				_, err := e.c.Login(ctx, &authv1.LoginRequest{Username: "tom", Password: pw})
				return err
			}
			for i := range 5 {
				wantCode(t, "wrong password "+string(rune('1'+i)), try(ctx, "wrong-guess"), codes.Unauthenticated)
			}
			err := try(ctx, "tom-pass-phrase")
			wantCode(t, "the right password while locked out", err, codes.ResourceExhausted)
			wantReason(t, "the right password while locked out", err, apierr.ReasonLoginThrottled)
			// Another client address is not locked out (the gateway reports its HTTP client's
			// address, proving itself with the internal token).
			if err := try(metadata.AppendToOutgoingContext(ctx, auth.GatewayTokenKey, internalToken, auth.ClientAddrKey, "10.1.2.3"), "tom-pass-phrase"); err != nil {
				t.Errorf("login from another address: %v", err)
			}
			e.clk.Advance(29 * time.Second)
			wantCode(t, "29s into a 30s lockout", try(ctx, "tom-pass-phrase"), codes.ResourceExhausted)
			e.clk.Advance(2 * time.Second)
			wantCode(t, "a wrong password after the lockout", try(ctx, "wrong-guess"), codes.Unauthenticated)
			// The sixth failure doubles the lockout to 60 s.
			e.clk.Advance(59 * time.Second)
			wantCode(t, "59s into a 60s lockout", try(ctx, "tom-pass-phrase"), codes.ResourceExhausted)
			e.clk.Advance(2 * time.Second)
			if err := try(ctx, "tom-pass-phrase"); err != nil {
				t.Fatalf("login after the lockout: %v", err)
			}
			// Success clears the count: one failure does not lock out again.
			wantCode(t, "a wrong password after a success", try(ctx, "wrong-guess"), codes.Unauthenticated)
			if err := try(ctx, "tom-pass-phrase"); err != nil {
				t.Errorf("login after one failure: %v", err)
			}
		})
	}
}
