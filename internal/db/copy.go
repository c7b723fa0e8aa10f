package db

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5/stdlib"
)

// Tx is a transaction held on one connection of the store, so that a Postgres COPY can join
// it (CopyIn). Commit and Rollback end it and give the connection back to the pool.
type Tx struct {
	*sql.Tx
	conn *sql.Conn
}

// Begin starts a transaction on a connection of its own.
func (d *DB) Begin(ctx context.Context, opts *sql.TxOptions) (*Tx, error) {
	conn, err := d.Conn(ctx)
	if err != nil {
		return nil, err
	}
	tx, err := conn.BeginTx(ctx, opts)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &Tx{Tx: tx, conn: conn}, nil
}

// Commit commits the transaction and releases its connection.
func (t *Tx) Commit() error {
	err := t.Tx.Commit()
	t.release()
	return err
}

// Rollback rolls the transaction back (sql.ErrTxDone once it has ended) and releases its
// connection.
func (t *Tx) Rollback() error {
	err := t.Tx.Rollback()
	t.release()
	return err
}

func (t *Tx) release() {
	if t.conn != nil {
		t.conn.Close()
		t.conn = nil
	}
}

// CopyIn inserts rows into table (columns, in the order rows gives their fields) with
// COPY … FROM STDIN in binary format, inside the transaction: one statement for any number of
// rows, no arrays for the client to build and the server to take apart, and the server fills
// a page at a time. Postgres only; table and columns are trusted SQL, never user input.
func (t *Tx) CopyIn(ctx context.Context, table, columns string, rows *CopyRows) (int64, error) {
	if rows.n == 0 {
		return 0, nil
	}
	if t.conn == nil {
		return 0, sql.ErrTxDone
	}
	q := "COPY " + table + " (" + columns + ") FROM STDIN (FORMAT binary)"
	var n int64
	err := t.conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return errors.New("db: COPY needs a Postgres store")
		}
		tag, err := c.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(rows.bytes()), q)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return n, fmt.Errorf("copy into %s: %w", table, err)
	}
	return n, nil
}

// CopyRows builds the rows of a binary COPY (the format of Postgres's COPY documentation): each
// row is Row with its number of fields, then each field in the order of CopyIn's columns. A
// value must suit its column: Int64 a bigint, Int32 an int, Text a text.
type CopyRows struct {
	buf []byte
	n   int // rows
}

// copySignature opens a binary COPY stream: the signature, no flags, no header extension.
const copySignature = "PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00"

// Grow makes room for n more bytes of rows (a row of f fields takes 2 + 4f bytes and its
// values': 8 a bigint, 4 an int, a text's length), so a large COPY is built without copying its
// buffer as it grows.
func (b *CopyRows) Grow(n int) {
	if len(b.buf) == 0 {
		n += len(copySignature)
	}
	b.buf = slices.Grow(b.buf, n+2) // and the trailer
}

// Row starts a row of fields values.
func (b *CopyRows) Row(fields int) {
	if len(b.buf) == 0 {
		b.buf = append(b.buf, copySignature...)
	}
	b.buf = binary.BigEndian.AppendUint16(b.buf, uint16(fields))
	b.n++
}

// Int64 adds a bigint.
func (b *CopyRows) Int64(v int64) {
	b.buf = binary.BigEndian.AppendUint32(b.buf, 8)
	b.buf = binary.BigEndian.AppendUint64(b.buf, uint64(v))
}

// Int32 adds an int.
func (b *CopyRows) Int32(v int32) {
	b.buf = binary.BigEndian.AppendUint32(b.buf, 4)
	b.buf = binary.BigEndian.AppendUint32(b.buf, uint32(v))
}

// Text adds a text, which must be valid UTF-8 without NUL, as any text parameter.
func (b *CopyRows) Text(s string) {
	b.buf = binary.BigEndian.AppendUint32(b.buf, uint32(len(s)))
	b.buf = append(b.buf, s...)
}

// bytes is the whole stream, with its trailer.
func (b *CopyRows) bytes() []byte {
	return append(b.buf, 0xff, 0xff) // the trailer: a field count of -1 (not kept in buf)
}
