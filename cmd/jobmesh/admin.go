package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/devstack"
	"github.com/jobmesh/jobmesh/services/gateway/auth"
)

const adminUsage = `Usage:
  jobmesh admin reset-password --user NAME [--database-url URL | --data-dir DIR] [--password-stdin]

reset-password sets a user's password directly in the auth store, for when the admin's is lost:
a new random password is printed, or the one read from stdin (--password-stdin) is set. The
user's sessions end. The store is Postgres (--database-url, as given to jobmesh gateway) or the
SQLite store of jobmesh dev under --data-dir.
`

// ignoredAdminPassword is the warning when --admin-password meets a store that has users.
const ignoredAdminPassword = devstack.IgnoredAdminPassword

// runAdmin runs the operator commands that work on the stores directly.
func runAdmin(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "reset-password" {
		fmt.Fprint(stderr, adminUsage)
		return errors.New("admin: want the reset-password command")
	}
	var (
		user, databaseURL, dataDir string
		fromStdin                  bool
	)
	f := newFlags("jobmesh admin reset-password", stderr)
	f.str(&user, "user", "", "`name` of the user whose password to reset (required)")
	f.str(&databaseURL, "database-url", "", "Postgres `url` of the auth store (schema auth); empty means the SQLite store under --data-dir")
	f.str(&dataDir, "data-dir", ".data/dev", "jobmesh dev's data `directory`, when --database-url is empty")
	f.BoolVar(&fromStdin, "password-stdin", false, "read the new password from the first line of stdin instead of choosing a random one")
	if err := f.parse(args[1:]); err != nil {
		return err
	}
	if f.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", f.Args())
	}
	if user == "" {
		return errors.New("--user: required")
	}
	password := ""
	if fromStdin {
		line, err := bufio.NewReader(stdin).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("--password-stdin: %w", err)
		}
		if password = strings.TrimRight(line, "\r\n"); password == "" {
			return errors.New("--password-stdin: stdin holds no password")
		}
	}
	store, err := db.Open(ctx, db.Config{URL: databaseURL, DataDir: filepath.Join(dataDir, "db"), Schema: "auth"})
	if err != nil {
		return fmt.Errorf("--database-url/--data-dir: %w", err)
	}
	defer store.Close()
	if err := store.Migrate(ctx, auth.MigrationsFS()); err != nil {
		return err
	}
	svc, err := auth.New(auth.Config{}, store)
	if err != nil {
		return err
	}
	set, err := svc.ResetPassword(ctx, user, password)
	if err != nil {
		return err
	}
	if fromStdin {
		fmt.Fprintf(stdout, "password of %q reset; their sessions ended\n", user)
	} else {
		fmt.Fprintf(stdout, "password of %q reset to %s (shown once; change it); their sessions ended\n", user, set)
	}
	return nil
}
