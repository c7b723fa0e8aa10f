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
