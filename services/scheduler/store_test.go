package scheduler

import (
	"context"
	"errors"
	"testing"

	"github.com/jobmesh/jobmesh/internal/db/dbtest"
)

func TestFenceRefusesAnOlderEpoch(t *testing.T) {
	t.Parallel()
	for _, st := range dbtest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			d := dbtest.Open(t, st.Config, "scheduler", MigrationsFS())
			s := store{d}
			ctx := context.Background()
			fence := func(epoch int64) error {
				tx, err := d.BeginTx(ctx, nil)
				if err != nil {
					t.Fatalf("begin: %v", err)
				}
				defer tx.Rollback()
				if err := s.fence(ctx, tx, epoch, "r"); err != nil {
					return err
				}
				return tx.Commit()
			}
			for _, step := range []struct {
				epoch   int64
				deposed bool
			}{{5, false}, {5, false}, {3, true}, {6, false}, {5, true}} {
				err := fence(step.epoch)
				if got := errors.Is(err, errDeposed); got != step.deposed || (err != nil && !got) {
					t.Errorf("fence(%d) = %v, want deposed=%v", step.epoch, err, step.deposed)
				}
			}
		})
	}
}
