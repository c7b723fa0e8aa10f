package db

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Channel is the name of the service's notification channel called name on Postgres, prefixed by the schema,
// so two services of one database never hear each other.
func (d *DB) Channel(name string) string { return d.schema + "_" + name }

// Listen holds a Postgres connection of its own (outside the pool) that LISTENs on channel
// (Channel's name) and calls got with each notification's payload, until ctx ends (it returns
// nil) or the connection fails (it returns the error). ready is called once the LISTEN is in
// place: every notification committed after it is delivered. Notifications sent while no
// connection listens are lost, so a caller that listens again after an error must assume it
// missed some (ready tells it when it listens again).
func (d *DB) Listen(ctx context.Context, channel string, ready func(), got func(payload string)) error {
	if d.dialect != Postgres {
		return errors.New("db: Listen needs Postgres")
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := pgx.ConnectConfig(cctx, d.conn)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("db: listen on %s: %w", channel, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("db: listen on %s: %w", channel, err)
	}
	ready()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("db: listen on %s: %w", channel, err)
		}
		got(n.Payload)
	}
}
