package logsvc

import (
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/jobmesh/jobmesh/internal/db"
)

const (
	// rowsPerStatement caps the rows of one multi-row statement: Postgres binds at most 65535
	// parameters and SQLite 32766.
	rowsPerStatement = 1000
	// deleteBatch caps the rows one DELETE removes, so clearing never holds long locks.
	deleteBatch = 1000
)

// The dynamic statements (multi-row writes, filtered lists) are built here with the store's own
// placeholders instead of db.Q, whose cache would keep one rebound copy per row count.

// ph is the n-th placeholder in the store's dialect. SQLite gets a plain "?", numbered by
// position: finding the name of a "?NNN" costs SQLite a scan per parameter, which made a
// 16,000-parameter batch quadratic. So the placeholders of a dynamic statement must appear in
// the order of their numbers, each once.
func (s *Service) ph(n int) string {
	if s.store.Dialect() == db.SQLite {
		return "?"
	}
	return "$" + strconv.Itoa(n)
}

// values returns rows tuples of cols placeholders numbered from 1, each followed by suffix
// (literal columns): "($1, $2, 1), ($3, $4, 1)".
func (s *Service) values(rows, cols int, suffix string) string {
	var b strings.Builder
	n := 1
	for r := range rows {
		if r > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for c := range cols {
			if c > 0 {
				b.WriteString(", ")
			}
			b.WriteString(s.ph(n))
			n++
		}
		b.WriteString(suffix)
		b.WriteByte(')')
	}
	return b.String()
}

// in returns "(" + n placeholders numbered from first + ")".
func (s *Service) in(n, first int) string {
	var b strings.Builder
	b.WriteByte('(')
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(s.ph(first + i))
	}
	b.WriteByte(')')
	return b.String()
}

// chunks splits xs into slices of at most n.
func chunks[T any](xs []T, n int) [][]T {
	var out [][]T
	for len(xs) > n {
		out = append(out, xs[:n])
		xs = xs[n:]
	}
	if len(xs) > 0 {
		out = append(out, xs)
	}
	return out
}

// anys converts values into query arguments.
func anys[T any](xs []T) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

// ts is a Unix-ms column as a Timestamp; 0 (unknown) is unset.
func ts(ms int64) *timestamppb.Timestamp {
	if ms == 0 {
		return nil
	}
	return timestamppb.New(time.UnixMilli(ms))
}
