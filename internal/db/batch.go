package db

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// Batch is statements a transaction sends together (Tx.Send): on Postgres in one round trip,
// as a pipeline, so that a transaction's writes wait for the server once rather than once
// each. Under load every round trip is a wait for a CPU on both sides, and a transaction that
// decides a workflow node or stores a run writes to several tables.
type Batch struct{ stmts []batchStmt }

type batchStmt struct {
	query string
	args  []any
	wrap  func(error) error
}

// Queue appends a statement (written for the store's dialect: Q it first). wrap, when not nil,
// makes the statement's error the one Send returns (it names what failed).
func (b *Batch) Queue(wrap func(error) error, query string, args ...any) {
	b.stmts = append(b.stmts, batchStmt{query: query, args: args, wrap: wrap})
}

// Len is how many statements b holds.
func (b *Batch) Len() int { return len(b.stmts) }

// Send runs b's statements in order inside t and empties b. On Postgres they travel in one
// round trip; the first that fails ends the batch (the server skips the rest, and the
// transaction is aborted as after any failed statement) and its error is returned. Elsewhere
// they run one by one.
func (t *Tx) Send(ctx context.Context, b *Batch) error {
	stmts := b.stmts
	b.stmts = nil
	fail := func(s batchStmt, err error) error {
		if s.wrap != nil {
			return s.wrap(err)
		}
		return err
	}
	if len(stmts) == 0 {
		return nil
	}
	if t.conn == nil {
		return sql.ErrTxDone
	}
	if len(stmts) == 1 {
		_, err := t.ExecContext(ctx, stmts[0].query, stmts[0].args...)
		if err != nil {
			return fail(stmts[0], err)
		}
		return nil
	}
	err := t.conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return errNotPostgres
		}
		var pb pgx.Batch
		for _, s := range stmts {
			pb.Queue(s.query, s.args...)
		}
		br := c.Conn().SendBatch(ctx, &pb)
		for _, s := range stmts {
			if _, err := br.Exec(); err != nil {
				br.Close()
				return fail(s, err)
			}
		}
		return br.Close()
	})
	if !errors.Is(err, errNotPostgres) {
		return err
	}
	for _, s := range stmts {
		if _, err := t.ExecContext(ctx, s.query, s.args...); err != nil {
			return fail(s, err)
		}
	}
	return nil
}

// errNotPostgres: the transaction's connection is not a Postgres one (SQLite): statements run
// one by one.
var errNotPostgres = errors.New("db: not a Postgres connection")
