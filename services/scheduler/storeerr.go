package scheduler

import (
	"database/sql"
	"errors"
	"fmt"

	"github.com/jobmesh/jobmesh/internal/apierr"
	"github.com/jobmesh/jobmesh/internal/db"
)

// The store's errors, for callers to test with errors.Is; the driver's error stays in the chain
// (for logs) but callers never look at it: storeErr translates it, in this one place, as river's
// drivers turn pgx.ErrNoRows into rivertype.ErrNotFound.
var (
	// errDeposed: a scheduling write was fenced off because a newer leader holds the epoch.
	errDeposed = errors.New("deposed: a newer leader holds the scheduling fence")
	// errDuplicate: a write met a unique constraint (Postgres 23505, SQLite's UNIQUE or
	// PRIMARY KEY constraint).
	errDuplicate = errors.New("already stored")
	// errRetryable: the transaction lost a race with another (Postgres serialization failure
	// 40001 or deadlock 40P01, SQLite busy or locked) and may succeed when run again.
	errRetryable = errors.New("transaction lost a race with another; retry")
)

// storeErr wraps a store failure as "what: err", err translated: no row is
// apierr.ErrJobNotFound (every single-row read of the scheduler that can find none reads a
// job), a unique violation errDuplicate, a lost race errRetryable; other errors stay as they
// are.
func storeErr(err error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	var kind error
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("%s: %w", what, apierr.ErrJobNotFound) // the driver's "no rows" says no more
	case db.IsUniqueViolation(err):
		kind = errDuplicate
	case db.IsRetryable(err):
		kind = errRetryable
	default:
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s: %w: %w", what, kind, err)
}
