package main

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	authv1 "github.com/jobmesh/jobmesh/gen/jobmesh/auth/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/devstack"
	"github.com/jobmesh/jobmesh/services/gateway/auth"
)

// TestAdminResetPassword: `jobmesh admin reset-password` on jobmesh dev's SQLite store sets a
// new random password (or one from stdin, under the password policy) and ends the user's
// sessions.
func TestAdminResetPassword(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	store, err := db.Open(ctx, db.Config{DataDir: filepath.Join(dir, "db"), Schema: "auth"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if err := store.Migrate(ctx, auth.MigrationsFS()); err != nil {
		t.Fatal(err)
	}
	svc, err := auth.New(auth.Config{HashMemoryKiB: 1024}, store)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Bootstrap(ctx, "admin", "the-lost-pass-phrase"); err != nil {
		t.Fatal(err)
	}
	session, err := svc.Login(ctx, &authv1.LoginRequest{Username: "admin", Password: "the-lost-pass-phrase"})
	if err != nil {
		t.Fatal(err)
	}

	var out, errOut bytes.Buffer
	if err := runAdmin(ctx, []string{"reset-password", "--user", "admin", "--data-dir", dir}, strings.NewReader(""), &out, &errOut); err != nil {
		t.Fatalf("reset-password: %v (%s)", err, errOut.String())
	}
	m := regexp.MustCompile(`reset to (\S+) `).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("reset-password printed %q, want the new password", out.String())
	}
	if _, err := svc.AuthenticateToken(ctx, session.GetToken()); status.Code(err) != codes.Unauthenticated {
		t.Errorf("the session from before the reset: %v, want Unauthenticated", err)
	}
	if _, err := svc.Login(ctx, &authv1.LoginRequest{Username: "admin", Password: m[1]}); err != nil {
		t.Errorf("login with the printed password: %v", err)
	}

	err = runAdmin(ctx, []string{"reset-password", "--user", "admin", "--data-dir", dir, "--password-stdin"}, strings.NewReader("password\n"), &out, &errOut)
	if st, _ := status.FromError(apierr.ToStatus(err)); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "password") {
		t.Errorf("reset to \"password\": %v, want InvalidArgument naming password", err)
	}
	if err := runAdmin(ctx, []string{"reset-password", "--user", "admin", "--data-dir", dir, "--password-stdin"}, strings.NewReader("a-found-pass-phrase\n"), &out, &errOut); err != nil {
		t.Fatalf("reset from stdin: %v", err)
	}
	if _, err := svc.Login(ctx, &authv1.LoginRequest{Username: "admin", Password: "a-found-pass-phrase"}); err != nil {
		t.Errorf("login with the password from stdin: %v", err)
	}
	if err := runAdmin(ctx, []string{"reset-password", "--user", "nobody", "--data-dir", dir}, strings.NewReader(""), &out, &errOut); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("reset of an unknown user: %v, want not found", err)
	}
	if err := runAdmin(ctx, []string{"reset-password", "--data-dir", dir}, strings.NewReader(""), &out, &errOut); err == nil || !strings.Contains(err.Error(), "--user") {
		t.Errorf("reset without --user: %v, want it named", err)
	}
}

// TestIgnoredAdminPasswordIsSaid: jobmesh dev says when --admin-password meets a store that
// already has users.
func TestIgnoredAdminPasswordIsSaid(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	(&devstack.Stack{}).PrintWhere(&out, devstack.Config{AdminPassword: "given-but-ignored"})
	if !strings.Contains(out.String(), "--admin-password ignored") || !strings.Contains(out.String(), "reset-password") {
		t.Errorf("jobmesh dev's banner with an ignored --admin-password:\n%s\nwant a warning pointing at reset-password", out.String())
	}
}

// TestBannerNamesTheEndpoint: jobmesh dev's banner gives the client's login the gateway's
// address when it is not the client's default.
func TestBannerNamesTheEndpoint(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"127.0.0.1:8080":  "command-line client: jobmesh login --user admin, then",
		"127.0.0.1:18080": "command-line client: jobmesh login --user admin --endpoint http://127.0.0.1:18080, then",
	} {
		var out bytes.Buffer
		(&devstack.Stack{HTTPAddr: addr}).PrintWhere(&out, devstack.Config{})
		if !strings.Contains(out.String(), want) {
			t.Errorf("jobmesh dev's banner on %s:\n%s\nwant %q", addr, out.String(), want)
		}
	}
}
