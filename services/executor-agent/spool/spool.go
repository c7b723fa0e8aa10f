// Package spool is the agent's durable outbox: an append-only, checksummed queue of records on
// disk that survives a crash of the agent, so results and log lines that logsvc has not yet
// acknowledged are replayed, in order, after a restart.
//
// Records are numbered (seq) in the order they were appended and written to the current segment
// file before Append returns (so a killed process loses nothing: the kernel has the bytes);
// AppendBatch writes many records with one write (a group commit). A background syncer fsyncs
// within SyncInterval, so a power loss loses at most that much. Acknowledged
// records are forgotten: the highest contiguous acknowledged seq is persisted (within
// AckSyncInterval: after a crash, records acknowledged since may be delivered again, which
// logsvc tolerates), and segments that hold only acknowledged records are deleted. The spool is bounded by MaxBytes on disk and says
// so (ErrFull) rather than growing.
package spool

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrFull: appending would take the spool's files beyond their limit; nothing was appended.
var ErrFull = errors.New("spool: full")

// ErrClosed: Append after Close.
var ErrClosed = errors.New("spool: closed")

// Config describes a spool directory. Zero values mean the documented defaults.
type Config struct {
	// Dir holds the segment files; it is created if missing and locked against a second process.
	// Required.
	Dir string
	// MaxBytes caps the segment files on disk. Append refuses records beyond ReserveFraction of
	// it; AppendUrgent may use the rest. Default 128 MiB.
	MaxBytes int64
	// SegmentBytes is the size at which a new segment file begins. Default 4 MiB.
	SegmentBytes int64
	// SyncInterval is the longest an appended record waits for fsync. Default 10 ms.
	SyncInterval time.Duration
	// AckSyncInterval is the longest an acknowledgement waits to be persisted (and its records'
	// space to be freed; with the files over half of MaxBytes it does not wait). Persisting it
	// costs two fsyncs, a rename and, once everything is acknowledged, a new segment file; a
	// crash forgets at most this much of acknowledging. Default 1 s.
	AckSyncInterval time.Duration
	// Logger receives trouble with the files; nil discards.
	Logger *slog.Logger
}

// ordinaryShare is the share of MaxBytes that Append may fill; the rest is kept for AppendUrgent.
const ordinaryShare = 0.9

// Record is one spooled record.
type Record struct {
	// Seq numbers records in append order, from 1, across restarts.
	Seq uint64
	// Data is what was appended.
	Data []byte
}

// header: length (4), CRC-32C of seq and data (4), seq (8).
const headerLen = 16

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type segment struct {
	first uint64 // seq of its first record (its file name)
	path  string
	size  int64
	last  uint64 // seq of its last record; first-1 when empty
}

// Spool is an open spool directory. Its methods are safe for concurrent use.
type Spool struct {
	cfg  Config
	log  *slog.Logger
	lock *os.File

	// syncMu makes one sync at a time, so Sync returns only once what it covers is on disk,
	// even when the sync loop took the acknowledged mark first and is still writing it.
	syncMu sync.Mutex

	mu        sync.Mutex
	segs      []*segment // oldest first; the last is being written
	cur       *os.File
	nextSeq   uint64
	acked     uint64              // every seq ≤ acked is acknowledged
	ackedSet  map[uint64]struct{} // acknowledged seqs above acked
	diskBytes int64
	dirty     bool       // written since the last fsync
	toClose   []*os.File // rotated-out files, closed by the syncer after a last fsync
	ackDirty  bool
	closed    bool
	buf       []byte // reused to encode appended records

	wake chan struct{}
	stop chan struct{}
	done chan struct{}
}

// Open opens (or creates) the spool in cfg.Dir and returns it with every record not yet
// acknowledged, in seq order. A torn record at the end of a segment (a crash mid-write) is cut
// off.
func Open(cfg Config) (*Spool, []Record, error) {
	if cfg.Dir == "" {
		return nil, nil, errors.New("spool: Dir is required")
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 128 << 20
	}
	if cfg.SegmentBytes <= 0 {
		cfg.SegmentBytes = 4 << 20
	}
	cfg.SegmentBytes = min(cfg.SegmentBytes, max(cfg.MaxBytes/4, 1))
	if cfg.SyncInterval <= 0 {
		cfg.SyncInterval = 10 * time.Millisecond
	}
	if cfg.AckSyncInterval <= 0 {
		cfg.AckSyncInterval = time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("spool %s: %w", cfg.Dir, err)
	}
	lock, err := os.OpenFile(filepath.Join(cfg.Dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("spool %s: %w", cfg.Dir, err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, nil, fmt.Errorf("spool %s: in use by another process: %w", cfg.Dir, err)
	}
	s := &Spool{cfg: cfg, log: log, lock: lock, ackedSet: map[uint64]struct{}{}, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	recs, err := s.load()
	if err != nil {
		lock.Close()
		return nil, nil, fmt.Errorf("spool %s: %w", cfg.Dir, err)
	}
	if err := s.rotateLocked(); err != nil {
		lock.Close()
		return nil, nil, fmt.Errorf("spool %s: %w", cfg.Dir, err)
	}
	go s.syncLoop()
	return s, recs, nil
}

// load reads the acknowledged mark and every segment, and returns the unacknowledged records.
func (s *Spool) load() ([]Record, error) {
	if b, err := os.ReadFile(filepath.Join(s.cfg.Dir, "acked")); err == nil {
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil {
			s.acked = n
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	entries, err := os.ReadDir(s.cfg.Dir)
	if err != nil {
		return nil, err
	}
	var firsts []uint64
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".seg")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(name, 10, 64)
		if err != nil {
			continue
		}
		firsts = append(firsts, n)
	}
	slices.Sort(firsts)
	s.nextSeq = s.acked + 1
	var recs []Record
	for _, first := range firsts {
		seg := &segment{first: first, path: s.segPath(first), last: first - 1}
		rs, size, err := readSegment(seg.path)
		if err != nil {
			return nil, err
		}
		seg.size = size
		for _, r := range rs {
			seg.last = r.Seq
			if r.Seq > s.acked {
				recs = append(recs, r)
			}
			s.nextSeq = max(s.nextSeq, r.Seq+1)
		}
		if seg.last <= s.acked {
			if err := os.Remove(seg.path); err != nil {
				return nil, err
			}
			continue
		}
		s.segs = append(s.segs, seg)
		s.diskBytes += seg.size
	}
	return recs, nil
}

// readSegment reads a segment's records; a torn or corrupt tail is truncated away.
func readSegment(path string) ([]Record, int64, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 64<<10)
	var recs []Record
	var off int64
	var hdr [headerLen]byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			break
		}
		n := binary.LittleEndian.Uint32(hdr[0:4])
		sum := binary.LittleEndian.Uint32(hdr[4:8])
		seq := binary.LittleEndian.Uint64(hdr[8:16])
		if n > 1<<30 {
			break
		}
		data := make([]byte, n)
		if _, err := io.ReadFull(br, data); err != nil {
			break
		}
		if crc32.Update(crc32.Checksum(hdr[8:16], castagnoli), castagnoli, data) != sum {
			break
		}
		recs = append(recs, Record{Seq: seq, Data: data})
		off += headerLen + int64(n)
	}
	st, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	if st.Size() != off {
		if err := f.Truncate(off); err != nil {
			return nil, 0, err
		}
		if err := f.Sync(); err != nil {
			return nil, 0, err
		}
	}
	return recs, off, nil
}

func (s *Spool) segPath(first uint64) string {
	return filepath.Join(s.cfg.Dir, fmt.Sprintf("%020d.seg", first))
}

// rotateLocked starts a new segment at nextSeq.
func (s *Spool) rotateLocked() error {
	path := s.segPath(s.nextSeq)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	if err := syncDir(s.cfg.Dir); err != nil {
		f.Close()
		return err
	}
	if s.cur != nil {
		s.toClose = append(s.toClose, s.cur)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	s.cur = f
	if n := len(s.segs); n > 0 && s.segs[n-1].first == s.nextSeq {
		// Reopened an empty or partly written segment of the same name (after a restart).
		return nil
	}
	s.segs = append(s.segs, &segment{first: s.nextSeq, path: path, size: st.Size(), last: s.nextSeq - 1})
	s.diskBytes += st.Size()
	return nil
}

// Append adds a record and returns its seq. It fails with ErrFull when the spool's files would
// pass 90% of MaxBytes: the rest is kept for AppendUrgent.
func (s *Spool) Append(data []byte) (uint64, error) {
	return s.appendOne(data, false)
}

// AppendUrgent is Append allowed to fill the spool to MaxBytes, for records that matter more
// (a fire's result) than the many ordinary ones (its output lines).
func (s *Spool) AppendUrgent(data []byte) (uint64, error) {
	return s.appendOne(data, true)
}

func (s *Spool) appendOne(data []byte, urgent bool) (uint64, error) {
	e := []Entry{{Data: data, Urgent: urgent}}
	s.AppendBatch(e)
	return e[0].Seq, e[0].Err
}

// Entry is a record for AppendBatch, and what became of it.
type Entry struct {
	// Data is the record.
	Data []byte
	// Urgent lets the record fill the spool to MaxBytes, as AppendUrgent does.
	Urgent bool
	// Seq is set by AppendBatch to the record's seq once it is written; 0 when it was not.
	Seq uint64
	// Err is set by AppendBatch when the record was not written: ErrFull (no room for it; the
	// entries after it are still tried), ErrClosed, or the write's error.
	Err error
}

// maxKeptBuf bounds the write buffer a spool keeps between appends.
const maxKeptBuf = 1 << 20

// AppendBatch appends entries in their order with one write to the segment file (one more each
// time a segment fills): a group commit that costs about what a single Append does. On return
// every entry with a Seq is written, exactly as after Append, so a killed process loses none of
// them; numbers are consecutive in entry order, skipping the entries that were not written.
func (s *Spool) AppendBatch(es []Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range es {
		es[i].Seq, es[i].Err = 0, nil
	}
	if s.closed {
		for i := range es {
			es[i].Err = ErrClosed
		}
		return
	}
	ordinary := int64(float64(s.cfg.MaxBytes) * ordinaryShare)
	buf := s.buf[:0]
	var chunk []int // entries encoded in buf, not yet written
	for i := range es {
		e := &es[i]
		need := int64(headerLen + len(e.Data))
		limit := ordinary
		if e.Urgent {
			limit = s.cfg.MaxBytes
		}
		if s.diskBytes+int64(len(buf))+need > limit {
			e.Err = ErrFull
			continue
		}
		if size := s.segs[len(s.segs)-1].size + int64(len(buf)); size > 0 && size+need > s.cfg.SegmentBytes {
			if err := s.writeLocked(buf, es, chunk); err != nil {
				failRest(es[i:], err)
				return
			}
			buf, chunk = buf[:0], chunk[:0]
			if err := s.rotateLocked(); err != nil {
				failRest(es[i:], fmt.Errorf("spool: new segment: %w", err))
				return
			}
		}
		seq := s.nextSeq + uint64(len(chunk))
		off := len(buf)
		buf = append(buf, make([]byte, headerLen)...)
		binary.LittleEndian.PutUint32(buf[off:off+4], uint32(len(e.Data)))
		binary.LittleEndian.PutUint64(buf[off+8:off+16], seq)
		binary.LittleEndian.PutUint32(buf[off+4:off+8], crc32.Update(crc32.Checksum(buf[off+8:off+16], castagnoli), castagnoli, e.Data))
		buf = append(buf, e.Data...)
		e.Seq = seq
		chunk = append(chunk, i)
	}
	if err := s.writeLocked(buf, es, chunk); err != nil {
		return
	}
	if cap(buf) <= maxKeptBuf {
		s.buf = buf[:0]
	}
}

// failRest marks entries not yet tried as not written.
func failRest(es []Entry, err error) {
	for i := range es {
		if es[i].Err == nil {
			es[i].Err = err
		}
	}
}

// writeLocked writes buf, the encoded records of the entries es[chunk], to the current segment.
// When the write fails, those entries are marked not written; their numbers are spent (counted
// as acknowledged, so the acknowledged mark never waits for them) and the next records go to a
// new segment. Whatever part of buf reached the file is either cut off at the next Open (a torn
// record) or replayed then, which delivery tolerates (logsvc stores an item once).
func (s *Spool) writeLocked(buf []byte, es []Entry, chunk []int) error {
	if len(chunk) == 0 {
		return nil
	}
	seg := s.segs[len(s.segs)-1]
	n := uint64(len(chunk))
	if _, err := s.cur.Write(buf); err != nil {
		s.log.Error("spool: write failed", "path", seg.path, "records", n, "error", err)
		err = fmt.Errorf("spool: write: %w", err)
		for _, i := range chunk {
			es[i].Seq, es[i].Err = 0, err
		}
		for q := s.nextSeq; q < s.nextSeq+n; q++ {
			s.ackedSet[q] = struct{}{}
		}
		s.nextSeq += n
		_ = s.rotateLocked()
		return err
	}
	size := int64(len(buf))
	s.nextSeq += n
	seg.size += size
	seg.last = s.nextSeq - 1
	s.diskBytes += size
	s.dirty = true
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

// Ack marks records acknowledged; they are not returned by a later Open. Segments holding only
// acknowledged records are deleted.
func (s *Spool) Ack(seqs ...uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, q := range seqs {
		if q > s.acked {
			s.ackedSet[q] = struct{}{}
		}
	}
	advanced := false
	for {
		if _, ok := s.ackedSet[s.acked+1]; !ok {
			break
		}
		delete(s.ackedSet, s.acked+1)
		s.acked++
		advanced = true
	}
	if !advanced {
		return
	}
	s.ackDirty = true
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Bytes is the size of the spool's files.
func (s *Spool) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.diskBytes
}

// MaxBytes is the configured bound.
func (s *Spool) MaxBytes() int64 { return s.cfg.MaxBytes }

// Sync fsyncs everything appended so far and persists the acknowledged mark.
func (s *Spool) Sync() error {
	return s.syncOnce(true)
}

func (s *Spool) syncLoop() {
	defer close(s.done)
	t := time.NewTicker(s.cfg.SyncInterval)
	defer t.Stop()
	markT := time.NewTimer(s.cfg.AckSyncInterval) // armed while a mark waits to be persisted
	markT.Stop()
	var markC <-chan time.Time
	var nextMark time.Time
	for {
		select {
		case <-s.stop:
			return
		case <-s.wake:
		case <-markC:
			markC = nil
		}
		now := time.Now()
		pending, filling := s.markPending()
		mark := !now.Before(nextMark) || (pending && filling)
		if mark {
			nextMark = now.Add(s.cfg.AckSyncInterval)
		}
		if err := s.syncOnce(mark); err != nil {
			s.log.Error("spool: fsync failed", "dir", s.cfg.Dir, "error", err)
		}
		if pending, _ := s.markPending(); pending && markC == nil {
			markT.Reset(time.Until(nextMark))
			markC = markT.C
		}
		// At most one fsync per interval: appends in between share the next one.
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
	}
}

// markPending reports whether acknowledgements wait to be persisted, and whether the files
// fill half of MaxBytes, when freeing what is acknowledged should not wait.
func (s *Spool) markPending() (pending, filling bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ackDirty, s.diskBytes > s.cfg.MaxBytes/2
}

// syncOnce fsyncs the written segments and, with mark, persists the acknowledged mark and
// deletes segments that hold only acknowledged records.
func (s *Spool) syncOnce(mark bool) error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.mu.Lock()
	cur, dirty := s.cur, s.dirty
	s.dirty = false
	closing := s.toClose
	s.toClose = nil
	ackDirty, acked := s.ackDirty && mark, s.acked
	if ackDirty {
		s.ackDirty = false
	}
	s.mu.Unlock()

	var errs []error
	for _, f := range closing {
		errs = append(errs, f.Sync(), f.Close())
	}
	if dirty && cur != nil {
		errs = append(errs, cur.Sync())
	}
	if !ackDirty {
		return errors.Join(errs...)
	}
	if err := writeFileSync(filepath.Join(s.cfg.Dir, "acked"), []byte(strconv.FormatUint(acked, 10)+"\n")); err != nil {
		s.mu.Lock()
		s.ackDirty = true
		s.mu.Unlock()
		return errors.Join(append(errs, err)...)
	}
	// With the mark on disk, drop fully acknowledged segments (never the one being written).
	s.mu.Lock()
	var drop []*segment
	for len(s.segs) > 1 && s.segs[0].last <= acked {
		drop = append(drop, s.segs[0])
		s.diskBytes -= s.segs[0].size
		s.segs = s.segs[1:]
	}
	if n := len(s.segs); n == 1 && s.segs[0].size > 0 && s.segs[0].last <= acked && s.nextSeq == acked+1 {
		// Everything is acknowledged: start an empty segment and drop the written one.
		old := s.segs[0]
		if err := s.rotateLocked(); err == nil {
			drop = append(drop, old)
			s.diskBytes -= old.size
			s.segs = s.segs[1:]
		} else {
			errs = append(errs, err)
		}
	}
	s.mu.Unlock()
	for _, seg := range drop {
		if err := os.Remove(seg.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Close fsyncs and closes the spool; records not acknowledged stay for the next Open. It is
// idempotent.
func (s *Spool) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	<-s.done
	err := s.syncOnce(true)
	s.mu.Lock()
	cur := s.cur
	s.cur = nil
	s.mu.Unlock()
	if cur != nil {
		err = errors.Join(err, cur.Close())
	}
	return errors.Join(err, s.lock.Close())
}

// writeFileSync replaces path with data durably: write aside, fsync, rename, fsync the dir.
func writeFileSync(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
