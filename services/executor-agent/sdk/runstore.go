package sdk

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
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// runStore is the executor's local copy of run output: instead of a file per fire (a directory
// entry created and opened at each fire's first line cost more CPU than an echo-hi script), the
// lines of every fire go to a few append-only segment files, runs/<yyyy-mm-dd>/<n>.seg, each
// with an index file <n>.idx (trigger id → record offset). As the spool does with results, one
// goroutine takes every line added since its last write and writes them with one write per file
// (a group commit): the lines of a fire in a batch make one record. A segment is closed at
// runSegmentBytes or when the UTC day changes, and the day directories are deleted after
// LogRetentionDays (pruneLogs), as the per-fire files were. A record is length- and
// CRC-checked, so a torn tail (a crash mid-write) is skipped when read; an agent never appends
// to a segment an earlier process wrote.
//
// Reading a fire's log (the Log call) finds its records through an in-memory index of the fires
// of the last recentCap ends, or, for older fires and after a restart, by reading the index
// files, newest day first.
type runStore struct {
	dir      string // LogDir/runs
	segBytes int64
	log      *slog.Logger

	mu      sync.Mutex
	staging []outLine
	added   uint64     // lines ever staged
	written uint64     // lines ever taken through the files by writeLoop
	work    *sync.Cond // on mu: staging has lines, or stopping
	wrote   *sync.Cond // on mu: written advanced
	stopped bool
	done    chan struct{} // closed when writeLoop has ended
	segs    []string      // paths of the segments written by this process; recLoc.seg indexes it
	fires   map[string][]recLoc
	endedQ  []string // fires in the order they ended (or were looked up), for eviction from fires

	// The writer's own (writeLoop).
	day     string
	seg     *os.File
	idx     *os.File
	segN    int   // number of the current segment in its day
	segSize int64 // bytes written to it
	segID   int   // its index in segs
}

// outLine is a line added and not yet written.
type outLine struct {
	id     string
	lineNo int64
	text   string
}

// recLoc is where one record of a fire is: a segment (an index in runStore.segs, or -1 with path
// set for one found on disk) and the record's offset.
type recLoc struct {
	seg  int
	path string
	off  int64
}

// runSegmentBytes is the size at which a new run log segment begins.
const runSegmentBytes = 64 << 20

// Record header: body length (4), CRC-32C of the body (4). Body: trigger id length (1), trigger
// id, first line number (uvarint), line count (uvarint), then each line as uvarint length and
// text.
const runRecHeader = 8

var runCRC = crc32.MakeTable(crc32.Castagnoli)

func newRunStore(dir string, log *slog.Logger) *runStore {
	s := &runStore{dir: dir, segBytes: runSegmentBytes, log: log, fires: map[string][]recLoc{}, segID: -1}
	s.work = sync.NewCond(&s.mu)
	s.wrote = sync.NewCond(&s.mu)
	return s
}

// start runs the writer.
func (s *runStore) start() {
	s.mu.Lock()
	s.done = make(chan struct{})
	s.mu.Unlock()
	go s.writeLoop()
}

// add stages one line of fire id. The caller holds the run's lock, so a fire's lines are staged
// in order.
func (s *runStore) add(id string, lineNo int64, text string) {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.staging = append(s.staging, outLine{id, lineNo, text})
	s.added++
	if len(s.staging) == 1 {
		s.work.Signal()
	}
	s.mu.Unlock()
}

// ended notes that fire id will add no more lines; its records stay in the in-memory index
// until recentCap more fires have ended.
func (s *runStore) ended(id string) {
	s.mu.Lock()
	s.rememberLocked(id)
	s.mu.Unlock()
}

// rememberLocked queues id for eviction from the in-memory index, evicting the oldest beyond
// recentCap.
func (s *runStore) rememberLocked(id string) {
	s.endedQ = append(s.endedQ, id)
	if len(s.endedQ) > 2*recentCap {
		for _, old := range s.endedQ[:len(s.endedQ)-recentCap] {
			delete(s.fires, old)
		}
		s.endedQ = slices.Clone(s.endedQ[len(s.endedQ)-recentCap:])
	}
}

// sync waits until every line added so far is written.
func (s *runStore) sync() {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.added
	if s.written < n {
		s.work.Signal()
	}
	for s.written < n && s.done != nil && !s.finishedLocked() {
		s.wrote.Wait()
	}
}

func (s *runStore) finishedLocked() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// stop writes what is staged and closes the files; later lines are dropped (the fires have
// ended by then). It is idempotent.
func (s *runStore) stop() {
	s.mu.Lock()
	s.stopped = true
	done := s.done
	s.work.Signal()
	s.mu.Unlock()
	if done != nil {
		<-done
	}
}

// writeLoop writes what is staged, one write per file per batch, until stop.
func (s *runStore) writeLoop() {
	defer close(s.done)
	defer s.closeFiles()
	var (
		batch  []outLine
		segBuf []byte
		idxBuf []byte
		order  []string
		recs   map[string][]outLine
	)
	recs = map[string][]outLine{}
	for {
		s.mu.Lock()
		for len(s.staging) == 0 && !s.stopped {
			s.work.Wait()
		}
		if len(s.staging) == 0 {
			s.mu.Unlock()
			return
		}
		// Let ready goroutines add their lines first: under load one write takes them all.
		s.mu.Unlock()
		runtime.Gosched()
		s.mu.Lock()
		batch, s.staging = s.staging, batch[:0]
		upTo := s.added
		s.mu.Unlock()

		// One record per fire in the batch, in the order of the fires' first lines.
		order = order[:0]
		for _, l := range batch {
			if _, ok := recs[l.id]; !ok {
				order = append(order, l.id)
			}
			recs[l.id] = append(recs[l.id], l)
		}
		if err := s.rotateIfNeeded(time.Now()); err != nil {
			s.log.Error("run log: cannot open a segment file; these lines are kept by logsvc only", "dir", s.dir, "lines", len(batch), "error", err)
		}
		type placed struct {
			id  string
			off int64
		}
		var done []placed
		segBuf, idxBuf = segBuf[:0], idxBuf[:0]
		for _, id := range order {
			off := s.segSize + int64(len(segBuf))
			segBuf = appendRunRecord(segBuf, id, recs[id])
			idxBuf = append(idxBuf, byte(len(id)))
			idxBuf = append(idxBuf, id...)
			idxBuf = binary.LittleEndian.AppendUint64(idxBuf, uint64(off))
			done = append(done, placed{id, off})
		}
		ok := s.seg != nil
		if ok {
			if _, err := s.seg.Write(segBuf); err != nil {
				s.log.Error("run log: write failed; these lines are kept by logsvc only", "segment", s.seg.Name(), "lines", len(batch), "error", err)
				ok = false
				s.closeFiles() // the next batch starts a new segment
			} else {
				s.segSize += int64(len(segBuf))
				if _, err := s.idx.Write(idxBuf); err != nil {
					s.log.Error("run log: index write failed; a Log call finds these lines only until a restart", "index", s.idx.Name(), "error", err)
				}
			}
		}

		s.mu.Lock()
		if ok {
			for _, p := range done {
				s.fires[p.id] = append(s.fires[p.id], recLoc{seg: s.segID, off: p.off})
			}
		}
		s.written = upTo
		s.wrote.Broadcast()
		s.mu.Unlock()
		clear(batch)
		clear(recs)
		if cap(segBuf) > 4<<20 {
			segBuf, idxBuf = nil, nil
		}
	}
}

// appendRunRecord encodes the lines of one fire as a record.
func appendRunRecord(buf []byte, id string, lines []outLine) []byte {
	start := len(buf)
	buf = append(buf, make([]byte, runRecHeader)...)
	buf = append(buf, byte(len(id)))
	buf = append(buf, id...)
	buf = binary.AppendUvarint(buf, uint64(lines[0].lineNo))
	buf = binary.AppendUvarint(buf, uint64(len(lines)))
	for _, l := range lines {
		buf = binary.AppendUvarint(buf, uint64(len(l.text)))
		buf = append(buf, l.text...)
	}
	body := buf[start+runRecHeader:]
	binary.LittleEndian.PutUint32(buf[start:], uint32(len(body)))
	binary.LittleEndian.PutUint32(buf[start+4:], crc32.Checksum(body, runCRC))
	return buf
}

// rotateIfNeeded starts a new segment at the first write, when the current one is full or the
// UTC day has changed.
func (s *runStore) rotateIfNeeded(now time.Time) error {
	day := now.UTC().Format(time.DateOnly)
	if s.seg != nil && day == s.day && s.segSize < s.segBytes {
		return nil
	}
	s.closeFiles()
	dir := filepath.Join(s.dir, day)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	n := s.segN + 1
	if day != s.day {
		// Never append to a segment of an earlier process: number after the day's last one.
		n = 1
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if v, err := strconv.Atoi(strings.TrimSuffix(e.Name(), ".seg")); err == nil && strings.HasSuffix(e.Name(), ".seg") {
				n = max(n, v+1)
			}
		}
	}
	base := filepath.Join(dir, fmt.Sprintf("%06d", n))
	seg, err := os.OpenFile(base+".seg", os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	idx, err := os.OpenFile(base+".idx", os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		seg.Close()
		return err
	}
	s.seg, s.idx, s.day, s.segN, s.segSize = seg, idx, day, n, 0
	s.mu.Lock()
	s.segs = append(s.segs, seg.Name())
	s.segID = len(s.segs) - 1
	s.mu.Unlock()
	return nil
}

func (s *runStore) closeFiles() {
	for _, f := range []*os.File{s.seg, s.idx} {
		if f != nil {
			if err := f.Close(); err != nil {
				s.log.Warn("run log: closing a file", "path", f.Name(), "error", err)
			}
		}
	}
	s.seg, s.idx = nil, nil
}

// locate returns the records of fire id, oldest first, and whether any were found: from the
// in-memory index, or else from the index files on disk (newest day first; the result is then
// remembered).
func (s *runStore) locate(id string) ([]recLoc, error) {
	s.mu.Lock()
	locs, ok := s.fires[id]
	segs := s.segs
	s.mu.Unlock()
	if ok {
		out := make([]recLoc, len(locs))
		for i, l := range locs {
			out[i] = recLoc{seg: -1, path: segs[l.seg], off: l.off}
		}
		return out, nil
	}
	found, err := s.scan(id)
	if err != nil || len(found) == 0 {
		return nil, err
	}
	s.mu.Lock()
	if _, ok := s.fires[id]; !ok {
		for _, l := range found {
			i := slices.Index(s.segs, l.path)
			if i < 0 {
				s.segs = append(s.segs, l.path)
				i = len(s.segs) - 1
			}
			s.fires[id] = append(s.fires[id], recLoc{seg: i, off: l.off})
		}
		s.rememberLocked(id)
	}
	s.mu.Unlock()
	return found, nil
}

// scan reads the index files for fire id's records: newest day first, and it stops at the first
// day without any once it has found some (a fire's records are in the days it ran).
func (s *runStore) scan(id string) ([]recLoc, error) {
	days, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var found []recLoc
	for i := len(days) - 1; i >= 0; i-- {
		day := days[i]
		if !day.IsDir() {
			continue
		}
		idxs, _ := filepath.Glob(filepath.Join(s.dir, day.Name(), "*.idx"))
		slices.Sort(idxs)
		var inDay []recLoc
		for _, p := range idxs {
			offs, err := scanIndex(p, id)
			if err != nil {
				return nil, err
			}
			seg := strings.TrimSuffix(p, ".idx") + ".seg"
			for _, off := range offs {
				inDay = append(inDay, recLoc{seg: -1, path: seg, off: off})
			}
		}
		if len(inDay) == 0 && len(found) > 0 {
			break
		}
		found = append(inDay, found...)
	}
	return found, nil
}

// scanIndex returns the offsets an index file gives for fire id; a torn last entry is ignored.
func scanIndex(path, id string) ([]int64, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 64<<10)
	var offs []int64
	var buf [256 + 8]byte
	for {
		n, err := br.ReadByte()
		if err != nil {
			return offs, nil
		}
		if _, err := io.ReadFull(br, buf[:int(n)+8]); err != nil {
			return offs, nil
		}
		if string(buf[:n]) == id {
			offs = append(offs, int64(binary.LittleEndian.Uint64(buf[n:int(n)+8])))
		}
	}
}

// read returns the lines of fire id from line from (1-based) on, at most maxLogLines and
// maxLogBytes, whether the last line written so far was reached, and whether the fire has any
// records. Lines added before the call are read too: it waits for them to be written.
func (s *runStore) read(id string, from int64) (lines []string, eof, found bool, err error) {
	s.sync()
	locs, err := s.locate(id)
	if err != nil || len(locs) == 0 {
		return nil, true, false, err
	}
	var f *os.File
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	size := 0
	for _, loc := range locs {
		if f == nil || f.Name() != loc.path {
			if f != nil {
				f.Close()
			}
			if f, err = os.Open(loc.path); errors.Is(err, fs.ErrNotExist) {
				f = nil // its day was pruned
				continue
			} else if err != nil {
				return lines, false, true, err
			}
		}
		first, texts, ok := readRunRecord(f, loc.off, id)
		if !ok {
			continue // torn by a crash
		}
		for i, t := range texts {
			if first+int64(i) < from {
				continue
			}
			if len(lines) >= maxLogLines || size+len(t)+1 > maxLogBytes && len(lines) > 0 {
				return lines, false, true, nil
			}
			size += len(t) + 1
			lines = append(lines, t)
		}
	}
	return lines, true, true, nil
}

// readRunRecord reads the record at off of a segment and returns its first line number and its
// lines; ok is false when it is torn, corrupt or not fire id's.
func readRunRecord(f *os.File, off int64, id string) (first int64, lines []string, ok bool) {
	var hdr [runRecHeader]byte
	if _, err := f.ReadAt(hdr[:], off); err != nil {
		return 0, nil, false
	}
	n := binary.LittleEndian.Uint32(hdr[0:4])
	if n > 1<<30 {
		return 0, nil, false
	}
	body := make([]byte, n)
	if _, err := f.ReadAt(body, off+runRecHeader); err != nil || crc32.Checksum(body, runCRC) != binary.LittleEndian.Uint32(hdr[4:8]) {
		return 0, nil, false
	}
	if len(body) < 1 || len(body) < 1+int(body[0]) || string(body[1:1+int(body[0])]) != id {
		return 0, nil, false
	}
	b := body[1+int(body[0]):]
	fl, k := binary.Uvarint(b)
	if k <= 0 {
		return 0, nil, false
	}
	b = b[k:]
	count, k := binary.Uvarint(b)
	if k <= 0 {
		return 0, nil, false
	}
	b = b[k:]
	for range count {
		l, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < l {
			return 0, nil, false
		}
		lines = append(lines, string(b[k:k+int(l)]))
		b = b[k+int(l):]
	}
	return int64(fl), lines, true
}
