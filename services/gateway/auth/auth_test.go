package auth_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	authv1 "github.com/jobmesh/jobmesh/gen/jobmesh/auth/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/services/gateway/auth"
)

func TestLoginFlow(t *testing.T) {
	t.Parallel()
	for _, st := range dbtest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			svc, err := auth.New(auth.Config{}, dbtest.Open(t, st.Config, "auth", auth.MigrationsFS()))
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			ctx := context.Background()
			pw, err := svc.Bootstrap(ctx, "admin", "")
			if err != nil || len(pw) < 8 {
				t.Fatalf("Bootstrap = %q, %v; want a random password", pw, err)
			}
			if again, err := svc.Bootstrap(ctx, "admin", ""); again != "" || err != nil {
				t.Errorf("second Bootstrap = %q, %v; want nothing (users exist)", again, err)
			}
			if _, err := svc.Login(ctx, &authv1.LoginRequest{Username: "admin", Password: "123456"}); status.Code(err) != codes.Unauthenticated {
				t.Errorf("login with XXL-JOB's default password: err = %v, want Unauthenticated", err)
			}
			if _, err := svc.Login(ctx, &authv1.LoginRequest{Username: "nobody", Password: pw}); status.Code(err) != codes.Unauthenticated {
				t.Errorf("login of unknown user: err = %v, want Unauthenticated", err)
			}
			resp, err := svc.Login(ctx, &authv1.LoginRequest{Username: "admin", Password: pw})
			if err != nil {
				t.Fatalf("Login: %v", err)
			}
			if resp.User.Role != authv1.Role_ROLE_ADMIN || resp.Token == "" {
				t.Errorf("Login = %v, want an admin and a token", resp)
			}
			authed := metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer "+resp.Token))
			me, err := svc.GetCurrentUser(authed, &authv1.GetCurrentUserRequest{})
			if err != nil || me.User.Username != "admin" {
				t.Fatalf("GetCurrentUser = %v, %v; want admin", me, err)
			}
			_, err = svc.ChangePassword(authed, &authv1.ChangePasswordRequest{OldPassword: "wrong-one", NewPassword: "a-new-password"})
			if st, _ := status.FromError(apierr.ToStatus(err)); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "old_password") {
				t.Errorf("ChangePassword with a wrong old password: err = %v, want InvalidArgument naming old_password", err)
			}
			if _, err := svc.ChangePassword(authed, &authv1.ChangePasswordRequest{OldPassword: pw, NewPassword: "a-new-password"}); err != nil {
				t.Fatalf("ChangePassword: %v", err)
			}
			if _, err := svc.Logout(authed, &authv1.LogoutRequest{}); err != nil {
				t.Fatalf("Logout: %v", err)
			}
			if _, err := svc.GetCurrentUser(authed, &authv1.GetCurrentUserRequest{}); status.Code(err) != codes.Unauthenticated {
				t.Errorf("GetCurrentUser after logout: err = %v, want Unauthenticated", err)
			}
			if _, err := svc.Login(ctx, &authv1.LoginRequest{Username: "admin", Password: "a-new-password"}); err != nil {
				t.Errorf("login with the new password: %v", err)
			}
		})
	}
}
