package db

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// Batch is statements a transaction sends together (Tx.Send): on Postgres in one round trip,
// as a pipeline, so that a transaction's statements wait for the server once rather than once
// each. Under load every round trip is a wait for a CPU on both sides, and a transaction that
// decides a workflow node, stores a run or pre-reads a partition reads and writes several
// tables. Statements whose arguments do not depend on each other's results can share one.
type Batch struct{ stmts []batchStmt }

type batchStmt struct {
	query    string
	args     []any
	wrap     func(error) error
	row      func(Row) error   // a query: each row it returns
	affected func(int64) error // a write whose count of rows matters
}

// Row is one row of a query queued with QueueRows. In a batch of several statements on
// Postgres Scan is pgx's, stricter than database/sql's (no conversion between text and
// numbers), elsewhere database/sql's: scan each column into its own type.
type Row interface {
	Scan(dest ...any) error
}

// Queue appends a statement (written for the store's dialect: Q it first). wrap, when not nil,
// makes the statement's error the one Send returns (it names what failed).
func (b *Batch) Queue(wrap func(error) error, query string, args ...any) {
	b.stmts = append(b.stmts, batchStmt{query: query, args: args, wrap: wrap})
}

// QueueAffected appends a write whose count of rows changed Send hands to affected; an error
// it returns ends the batch as a failing statement does, and Send returns it as it is.
func (b *Batch) QueueAffected(wrap func(error) error, affected func(n int64) error, query string, args ...any) {
	b.stmts = append(b.stmts, batchStmt{query: query, args: args, wrap: wrap, affected: affected})
}

// QueueRows appends a query whose rows Send hands to row, in order; an error row returns ends
// the batch as a failing statement does, and Send returns it as it is.
func (b *Batch) QueueRows(wrap func(error) error, row func(Row) error, query string, args ...any) {
	b.stmts = append(b.stmts, batchStmt{query: query, args: args, wrap: wrap, row: row})
}

// Len is how many statements b holds.
func (b *Batch) Len() int { return len(b.stmts) }

// Send runs b's statements in order inside t and empties b. On Postgres they travel in one
// round trip; the first that fails ends the batch (the server skips the rest, and the
// transaction is aborted as after any failed statement) and its error is returned. Elsewhere
// they run one by one. A statement's callbacks run as its results arrive, before the next
// statement's: a callback cannot change what a later statement of the same batch sends, and
// on Postgres the statements after one whose callback failed have run by then (on SQLite they
// have not). After any error from Send, roll the transaction back.
func (t *Tx) Send(ctx context.Context, b *Batch) error {
	stmts := b.stmts
	b.stmts = nil
	if len(stmts) == 0 {
		return nil
	}
	if t.conn == nil {
		return sql.ErrTxDone
	}
	if len(stmts) > 1 {
		err := t.conn.Raw(func(dc any) error {
			c, ok := dc.(*stdlib.Conn)
			if !ok {
				return errNotPostgres
			}
			return sendPipeline(ctx, c.Conn(), stmts)
		})
		if !errors.Is(err, errNotPostgres) {
			return err
		}
	}
	for _, s := range stmts {
		if err := t.run(ctx, s); err != nil {
			return s.fail(err)
		}
	}
	return nil
}

// sendPipeline sends stmts to c in one round trip and reads their results in order.
func sendPipeline(ctx context.Context, c *pgx.Conn, stmts []batchStmt) error {
	var pb pgx.Batch
	for _, s := range stmts {
		pb.Queue(s.query, s.args...)
	}
	br := c.SendBatch(ctx, &pb)
	for _, s := range stmts {
		if err := readResult(br, s); err != nil {
			br.Close()
			return s.fail(err)
		}
	}
	return br.Close()
}

// readResult reads one statement's result off br.
func readResult(br pgx.BatchResults, s batchStmt) error {
	if s.row == nil {
		tag, err := br.Exec()
		if err != nil || s.affected == nil {
			return err
		}
		return callback(s.affected(tag.RowsAffected()))
	}
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	return eachRow(rows, s.row)
}

// run runs one statement alone through database/sql.
func (t *Tx) run(ctx context.Context, s batchStmt) error {
	if s.row == nil {
		res, err := t.ExecContext(ctx, s.query, s.args...)
		if err != nil || s.affected == nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		return callback(s.affected(n))
	}
	rows, err := t.QueryContext(ctx, s.query, s.args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return eachRow(rows, s.row)
}

// eachRow hands each of rows (either driver's) to row.
func eachRow(rows interface {
	Row
	Next() bool
	Err() error
}, row func(Row) error) error {
	for rows.Next() {
		if err := row(rows); err != nil {
			return callback(err)
		}
	}
	return rows.Err()
}

// callbackError is an error of a statement's callback: Send returns it unwrapped.
type callbackError struct{ err error }

func (e callbackError) Error() string { return e.err.Error() }

// callback marks err (nil stays nil) as a callback's.
func callback(err error) error {
	if err == nil {
		return nil
	}
	return callbackError{err}
}

// fail is err as the statement names it; a callback's error as it is.
func (s batchStmt) fail(err error) error {
	var cb callbackError
	if errors.As(err, &cb) {
		return cb.err
	}
	if s.wrap != nil {
		return s.wrap(err)
	}
	return err
}

// errNotPostgres: the transaction's connection is not a Postgres one (SQLite): statements run
// one by one.
var errNotPostgres = errors.New("db: not a Postgres connection")
