package spool_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jobmesh/jobmesh/services/executor-agent/spool"
)

func open(t testing.TB, cfg spool.Config) (*spool.Spool, []spool.Record) {
	t.Helper()
	s, recs, err := spool.Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, recs
}

func datas(recs []spool.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, string(r.Data))
	}
	return out
}

func TestReopenReturnsUnackedInOrder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// Small segments, so acknowledgements delete whole files and reopening spans several.
	cfg := spool.Config{Dir: dir, SegmentBytes: 64}
	s, recs := open(t, cfg)
	if len(recs) != 0 {
		t.Fatalf("fresh spool: got %d records, want none", len(recs))
	}
	var seqs []uint64
	for i := range 20 {
		seq, err := s.Append(fmt.Appendf(nil, "rec-%02d", i))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	if !slices.Equal(seqs, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}) {
		t.Fatalf("seqs: got %v", seqs)
	}
	// 1–9 contiguous, 12 and 15 out of order: 10, 11, 13, 14, 16–20 remain.
	s.Ack(1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 15)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, recs := open(t, cfg)
	var got []uint64
	for _, r := range recs {
		got = append(got, r.Seq)
		if want := fmt.Sprintf("rec-%02d", r.Seq-1); string(r.Data) != want {
			t.Errorf("record %d: got %q, want %q", r.Seq, r.Data, want)
		}
	}
	// Acknowledgements above the contiguous mark are not kept: 12 and 15 come back (a resend,
	// which logsvc stores once).
	if want := []uint64{10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}; !slices.Equal(got, want) {
		t.Fatalf("after reopen: got seqs %v, want %v", got, want)
	}
	if seq, err := s2.Append([]byte("next")); err != nil || seq != 21 {
		t.Fatalf("Append after reopen: got %d %v, want 21", seq, err)
	}
	// Acknowledging everything leaves no data on disk.
	s2.Ack(10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21)
	if err := s2.Sync(); err != nil {
		t.Fatal(err)
	}
	if b := s2.Bytes(); b != 0 {
		t.Fatalf("bytes after acknowledging everything: got %d, want 0", b)
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	_, recs = open(t, cfg)
	if len(recs) != 0 {
		t.Fatalf("after acknowledging everything: got %q, want nothing", datas(recs))
	}
}

func TestTornTailIsCutOff(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, _ := open(t, spool.Config{Dir: dir})
	for _, d := range []string{"one", "two", "three"} {
		if _, err := s.Append([]byte(d)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	if len(segs) == 0 {
		t.Fatal("no segment files")
	}
	last := segs[len(segs)-1]
	info, err := os.Stat(last)
	if err != nil {
		t.Fatal(err)
	}
	// A crash in the middle of writing "three": its last two bytes never reached the file.
	if err := os.Truncate(last, info.Size()-2); err != nil {
		t.Fatal(err)
	}
	s2, recs := open(t, spool.Config{Dir: dir})
	if got := datas(recs); !slices.Equal(got, []string{"one", "two"}) {
		t.Fatalf("after a torn write: got %q, want [one two]", got)
	}
	if seq, err := s2.Append([]byte("four")); err != nil || seq != 3 {
		t.Fatalf("Append after a torn write: got %d %v, want seq 3", seq, err)
	}
	s2.Close()
	_, recs = open(t, spool.Config{Dir: dir})
	if got := datas(recs); !slices.Equal(got, []string{"one", "two", "four"}) {
		t.Fatalf("after reopen: got %q, want [one two four]", got)
	}
}

func TestFullKeepsRoomForUrgent(t *testing.T) {
	t.Parallel()
	s, _ := open(t, spool.Config{Dir: t.TempDir(), MaxBytes: 1000})
	rec := []byte(strings.Repeat("x", 84)) // 100 bytes with its header
	n := 0
	for {
		_, err := s.Append(rec)
		if errors.Is(err, spool.ErrFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 9 {
		t.Fatalf("ordinary records before full: got %d, want 9 (90%% of 1000 bytes)", n)
	}
	if _, err := s.AppendUrgent(rec); err != nil {
		t.Fatalf("AppendUrgent in the reserve: %v", err)
	}
	if _, err := s.AppendUrgent(rec); !errors.Is(err, spool.ErrFull) {
		t.Fatalf("AppendUrgent beyond MaxBytes: got %v, want ErrFull", err)
	}
	if b := s.Bytes(); b > 1000 {
		t.Fatalf("bytes: got %d, want at most 1000", b)
	}
	// Acknowledging frees room.
	s.Ack(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(rec); err != nil {
		t.Fatalf("Append after acknowledgements: %v", err)
	}
}

func TestSecondOpenOfADirFails(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	open(t, spool.Config{Dir: dir})
	if _, _, err := spool.Open(spool.Config{Dir: dir}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second Open: got %v, want an in-use error", err)
	}
}

// crashCopy copies the spool's files as they are now into a new directory, as a crash of the
// process would leave them: what was written is there, whether or not it was fsynced or closed.
func crashCopy(t *testing.T, dir string) string {
	t.Helper()
	out := t.TempDir()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "LOCK" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestAppendBatchIsWrittenOnReturn: once AppendBatch returns, its records are in the files (a
// crash then loses none), numbered in entry order across segments; entries without room are
// skipped and the ones after them still written.
func TestAppendBatchIsWrittenOnReturn(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// 100-byte segments: the batch spans several. 1,000 bytes in all: 900 for ordinary records.
	s, _ := open(t, spool.Config{Dir: dir, SegmentBytes: 100, MaxBytes: 1000})
	if _, err := s.Append([]byte(strings.Repeat("a", 684))); err != nil { // 700 bytes on disk
		t.Fatal(err)
	}
	es := []spool.Entry{
		{Data: []byte("b1-" + strings.Repeat("x", 61))}, // 80 bytes each
		{Data: []byte("b2-" + strings.Repeat("x", 61))},
		{Data: []byte("b3-" + strings.Repeat("x", 61))},               // 940 > 900: no room
		{Data: []byte("b4")},                                          // 878: fits
		{Data: []byte("b5-" + strings.Repeat("x", 61)), Urgent: true}, // 958 ≤ 1000
		{Data: []byte("b6-" + strings.Repeat("x", 61)), Urgent: true}, // 1038: no room
	}
	s.AppendBatch(es)
	var seqs []uint64
	for i, e := range es {
		seqs = append(seqs, e.Seq)
		if wantFull := i == 2 || i == 5; wantFull != errors.Is(e.Err, spool.ErrFull) || wantFull != (e.Seq == 0) {
			t.Errorf("entry %d: got seq %d, error %v; want ErrFull: %v", i+1, e.Seq, e.Err, wantFull)
		}
	}
	if want := []uint64{2, 3, 0, 4, 5, 0}; !slices.Equal(seqs, want) {
		t.Fatalf("seqs: got %v, want %v", seqs, want)
	}
	if segs, _ := filepath.Glob(filepath.Join(dir, "*.seg")); len(segs) < 3 {
		t.Fatalf("segments: got %d, want the batch spread over several", len(segs))
	}

	_, recs := open(t, spool.Config{Dir: crashCopy(t, dir), SegmentBytes: 100, MaxBytes: 1000})
	var got []string
	for _, r := range recs {
		got = append(got, fmt.Sprintf("%d:%.2s", r.Seq, r.Data))
	}
	if want := []string{"1:aa", "2:b1", "3:b2", "4:b4", "5:b5"}; !slices.Equal(got, want) {
		t.Fatalf("after a crash: got %q, want %q", got, want)
	}
}

// TestAppendBatchAfterReopenContinues: batches and single appends share one numbering that goes
// on after a reopen, and acknowledged records of a batch are not replayed.
func TestAppendBatchAfterReopenContinues(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, _ := open(t, spool.Config{Dir: dir})
	es := make([]spool.Entry, 50)
	for i := range es {
		es[i].Data = fmt.Appendf(nil, "rec-%02d", i)
	}
	s.AppendBatch(es)
	for _, e := range es {
		if e.Err != nil {
			t.Fatal(e.Err)
		}
	}
	for _, e := range es[:40] {
		s.Ack(e.Seq)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, recs := open(t, spool.Config{Dir: dir})
	if got := datas(recs); !slices.Equal(got, []string{"rec-40", "rec-41", "rec-42", "rec-43", "rec-44", "rec-45", "rec-46", "rec-47", "rec-48", "rec-49"}) {
		t.Fatalf("after reopen: got %q", got)
	}
	more := []spool.Entry{{Data: []byte("next-1")}, {Data: []byte("next-2")}}
	s2.AppendBatch(more)
	if more[0].Seq != 51 || more[1].Seq != 52 {
		t.Fatalf("batch after reopen: got seqs %d, %d; want 51, 52", more[0].Seq, more[1].Seq)
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	s2.AppendBatch(more)
	if !errors.Is(more[0].Err, spool.ErrClosed) || more[0].Seq != 0 {
		t.Fatalf("AppendBatch after Close: got seq %d, %v; want ErrClosed", more[0].Seq, more[0].Err)
	}
}

// TestAckIsPersistedWithinAckSyncInterval: without Sync or Close, acknowledgements reach the
// disk at most AckSyncInterval after the mark was last persisted, so a crash then replays only
// what was not acknowledged; before that, a crash replays acknowledged records too (delivered
// again, which logsvc tolerates).
func TestAckIsPersistedWithinAckSyncInterval(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		s, _ := open(t, spool.Config{Dir: dir, AckSyncInterval: time.Second})
		crashReplays := func() []string {
			synctest.Wait()
			_, recs := open(t, spool.Config{Dir: crashCopy(t, dir)})
			return datas(recs)
		}
		// The append's sync persists the mark (nothing acknowledged yet): the next may wait 1 s.
		seq, err := s.Append([]byte("zero"))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		s.Ack(seq)
		time.Sleep(500 * time.Millisecond)
		if got := crashReplays(); !slices.Equal(got, []string{"zero"}) {
			t.Fatalf("a crash 0.5 s after the acknowledgement: got %q, want [zero]", got)
		}
		time.Sleep(550 * time.Millisecond)
		if got := crashReplays(); len(got) != 0 {
			t.Fatalf("a crash 1 s after the mark was persisted: got %q, want nothing", got)
		}

		es := []spool.Entry{{Data: []byte("one")}, {Data: []byte("two")}, {Data: []byte("three")}}
		s.AppendBatch(es)
		s.Ack(es[0].Seq, es[1].Seq)
		time.Sleep(400 * time.Millisecond)
		if got := crashReplays(); !slices.Equal(got, []string{"one", "two", "three"}) {
			t.Fatalf("a crash right after the next acknowledgements: got %q, want [one two three]", got)
		}
		time.Sleep(time.Second)
		if got := crashReplays(); !slices.Equal(got, []string{"three"}) {
			t.Fatalf("a crash after AckSyncInterval: got %q, want [three]", got)
		}
	})
}

// TestAckIsPersistedAtOnceWhenFilling: with the files over half of MaxBytes, acknowledged
// records are freed without waiting for AckSyncInterval.
func TestAckIsPersistedAtOnceWhenFilling(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s, _ := open(t, spool.Config{Dir: t.TempDir(), MaxBytes: 1000, SegmentBytes: 100, AckSyncInterval: time.Hour})
		rec := []byte(strings.Repeat("x", 84)) // 100 bytes with its header
		// The append's sync persists the mark (nothing acknowledged yet), so at 100 of 1,000
		// the acknowledgement that follows waits for AckSyncInterval.
		first, err := s.Append(rec)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		synctest.Wait()
		s.Ack(first)
		time.Sleep(20 * time.Millisecond)
		synctest.Wait()
		if b := s.Bytes(); b != 100 {
			t.Fatalf("bytes after acknowledging 100 of 1,000: got %d, want 100 until AckSyncInterval", b)
		}
		var seqs []uint64
		for range 6 {
			seq, err := s.Append(rec)
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, seq)
		}
		s.Ack(seqs...)
		time.Sleep(20 * time.Millisecond)
		synctest.Wait()
		if b := s.Bytes(); b != 0 {
			t.Fatalf("bytes after acknowledging everything at 700 of 1,000: got %d, want 0", b)
		}
		// Below half, the same waits.
		seq, err := s.Append(rec)
		if err != nil {
			t.Fatal(err)
		}
		s.Ack(seq)
		time.Sleep(time.Minute)
		synctest.Wait()
		if b := s.Bytes(); b != 100 {
			t.Fatalf("bytes a minute after acknowledging 100 of 1,000: got %d, want 100 until AckSyncInterval", b)
		}
	})
}
