package spool_test

import (
	"bytes"
	"testing"

	"github.com/jobmesh/jobmesh/services/executor-agent/spool"
)

// BenchmarkAppend measures appending a result-sized record (150 bytes) one at a time, each
// acknowledged soon after as delivery would, so the spool stays small.
func BenchmarkAppend(b *testing.B) {
	s, _ := open(b, spool.Config{Dir: b.TempDir()})
	rec := bytes.Repeat([]byte("r"), 150)
	b.SetBytes(int64(len(rec)))
	for b.Loop() {
		seq, err := s.Append(rec)
		if err != nil {
			b.Fatal(err)
		}
		s.Ack(seq)
	}
}

// BenchmarkAppendBatch measures the same records appended 50 at a time (a group commit); ns/op
// and B/s are per record, comparable with BenchmarkAppend.
func BenchmarkAppendBatch(b *testing.B) {
	s, _ := open(b, spool.Config{Dir: b.TempDir()})
	rec := bytes.Repeat([]byte("r"), 150)
	const batch = 50
	es := make([]spool.Entry, batch)
	seqs := make([]uint64, batch)
	b.SetBytes(int64(len(rec)))
	for i := 0; b.Loop(); i++ {
		if i%batch != 0 {
			continue
		}
		for j := range es {
			es[j] = spool.Entry{Data: rec}
		}
		s.AppendBatch(es)
		for j, e := range es {
			if e.Err != nil {
				b.Fatal(e.Err)
			}
			seqs[j] = e.Seq
		}
		s.Ack(seqs...)
	}
}
