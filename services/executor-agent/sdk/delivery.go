package sdk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/protobuf/proto"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/services/executor-agent/ackstream"
	"github.com/jobmesh/jobmesh/services/executor-agent/meshtls"
	"github.com/jobmesh/jobmesh/services/executor-agent/spool"
)

// outbox holds results and log lines until logsvc acknowledges them (streamOutbox, with an
// on-disk spool), or drops them when there is no logsvc (nopOutbox).
// Items leave in the order they were added, except that a final result is delivered only after
// every line of its fire added before it was acknowledged, and a RUNNING result (addStart)
// leaves only once its fire has run for runningAfter, so a fire's RUNNING result always precedes
// its final one. A RUNNING result still waiting to leave when its fire's final result is added
// does not leave: the final one, which carries all it says, leaves in its place.
type outbox interface {
	start(ctx context.Context)
	// addLines queues lines of a running fire, to be written at once.
	addLines(lines []*logsv1.LogLine)
	// addStart queues the RUNNING result of a fire just accepted, without waiting for anything:
	// it is written at the next spoolSoon or waitSpooled, or with anything added after it that
	// is written, and leaves runningAfter after the fire's start unless its final result
	// replaces it. (Run accepts all its fires, then calls spoolSoon once: their RUNNING results
	// share one write.)
	addStart(r *logsv1.RunResult)
	// addResult queues a fire's final result, to be written at once.
	addResult(r *logsv1.RunResult)
	// spoolSoon has what was added so far written now, without waiting for it (Run, once it
	// has placed its fires).
	spoolSoon()
	// waitSpooled waits until everything added so far is in the spool (or dropped). Log calls it
	// before saying a fire ended, Stop before flushing.
	waitSpooled()
	// flush waits until everything added so far is acknowledged or ctx ends.
	flush(ctx context.Context) error
	// pending counts items not yet acknowledged.
	pending() int
	stop()
}

// nopOutbox is used without logsvc: lines stay in the local run log.
type nopOutbox struct{}

func (nopOutbox) start(context.Context)       {}
func (nopOutbox) addLines([]*logsv1.LogLine)  {}
func (nopOutbox) addStart(*logsv1.RunResult)  {}
func (nopOutbox) addResult(*logsv1.RunResult) {}
func (nopOutbox) spoolSoon()                  {}
func (nopOutbox) waitSpooled()                {}
func (nopOutbox) flush(context.Context) error { return nil }
func (nopOutbox) pending() int                { return 0 }
func (nopOutbox) stop()                       {}

type (
	lineSender   = ackstream.Sender[spooled[*logsv1.LogLine], logsv1.IngestLogLinesRequest, logsv1.IngestLogLinesResponse]
	resultSender = ackstream.Sender[*resultItem, logsv1.IngestResultsRequest, logsv1.IngestResultsResponse]
)

// spooled is an item with its spool record number (0 when it could not be written to disk).
// maxLineBatchBytes caps the text of one batch of log lines sent to logsvc.
const maxLineBatchBytes = 1 << 20

type spooled[T any] struct {
	seq uint64
	v   T
}

// resultItem is a result on its way to logsvc. Its fields are guarded by streamOutbox.mu while
// the item is in starts (r may change then), and fixed once it is not.
type resultItem struct {
	r   *logsv1.RunResult
	seq uint64 // its spool record; 0 when not on disk
	// merged is the spool record of a final result that took the place of this RUNNING one.
	merged uint64
	// staged: not yet taken by writeLoop (so not yet marshalled for the spool); queued: handed
	// to the results sender. A final result takes a RUNNING one's place only in either state.
	staged, queued bool
	// sendAt is when a RUNNING result leaves for logsvc if its fire has not ended by then
	// (runningAfter); superseded: its fire's final result left in its place before that.
	sendAt     time.Time
	superseded bool
}

// runningAfter is how long a fire runs before its RUNNING result leaves for logsvc (from its
// start: a held fire's due time). A fire that ends sooner sends its final result alone, which
// carries all a RUNNING one would say (start time, address, trace): at thousands of quick fires
// per second the RUNNING results were a third of what agents sent and logsvc ingested. The
// scheduler's trigger record already shows a dispatched fire as running in logsvc meanwhile.
const runningAfter = time.Second

// Spool record kinds: the first byte of a record, then the protobuf.
const (
	kindLine   = 'L'
	kindStart  = 'S'
	kindResult = 'R'
)

// errEncode: an item could not be encoded for the spool (it is dropped).
var errEncode = errors.New("encoding for the spool")

// staged is an item added and not yet written to the spool: a line or a result.
type staged struct {
	line *logsv1.LogLine
	res  *resultItem
}

// streamOutbox delivers over IngestLogLines and IngestResults streams of one connection. Every
// item is first written to the on-disk spool, then batched in memory and resent after a
// reconnect until acknowledged; an acknowledgement releases its spool records. Items the spool
// still holds at start-up (from before a stop or crash) are delivered first, in order.
//
// Adding an item only stages it: one goroutine (writeLoop) takes everything staged since its
// last write, writes it to the spool with one write (a group commit: under load, a write
// carries the items of many fires), and only then hands it to the senders, in order. So an item
// is on disk before it can reach logsvc, and a killed agent loses nothing logsvc has not
// acknowledged but what was added in its last moments, not yet written and never sent (as a
// kill a moment earlier would have). A Log call's end of a fire waits for the write; a Run
// call's acks do not (Run only has the write start at once, spoolSoon): a scheduler that waited
// for a slow disk gave up on fires the executor then ran. So an agent killed in the moment
// between its ack and that write leaves no RUNNING record of the fires it just took; their runs
// are decided as those of any fire its dead executor had not reported (the trigger record says
// where it went; logsvc settles the run when the executor leaves).
//
// A RUNNING result not yet batched for logsvc when its fire's final result comes is not sent:
// the final result takes its place (it carries the start time, executor address and trace the
// RUNNING one would have stored), and releases both spool records when acknowledged. RUNNING
// results wait runningAfter before they go to the sender, so a quick fire sends one result.
type streamOutbox struct {
	log        *slog.Logger
	conn       *grpc.ClientConn
	sp         *spool.Spool
	maxPending int
	lines      *lineSender
	results    *resultSender

	mu      sync.Mutex
	staging []staged      // added, waiting for writeLoop
	added   uint64        // items ever staged
	written uint64        // items ever taken through the spool by writeLoop
	work    *sync.Cond    // on mu: staging has items, or stopping
	wrote   *sync.Cond    // on mu: written advanced
	stopped bool          // stop began: nothing more is staged
	done    chan struct{} // closed when writeLoop has ended; nil before start
	// unacked counts the lines of a fire added and not yet acknowledged (or dropped).
	unacked map[string]int
	// parked holds final results waiting for their fire's lines.
	parked map[string]*resultItem
	// starts holds the RUNNING results not yet in a batch for logsvc, by trigger id: a final
	// result may still take their place.
	starts map[string]*resultItem
	// later holds RUNNING results written to the spool and waiting for their sendAt, in the
	// order they were written; laterN counts those not superseded.
	later   []*resultItem
	laterN  int
	full    bool // the queue is full (logged once per episode)
	dropped int  // items dropped in this episode
}

// defaultDialOptions: mutual TLS with id (plaintext without), reconnect backoff capped at 2 s.
func defaultDialOptions(id *meshtls.Identity) []grpc.DialOption {
	return []grpc.DialOption{
		id.DialOption(),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	}
}

func newStreamOutbox(cfg Config, log *slog.Logger) (*streamOutbox, error) {
	opts := dialOptions(cfg)
	sp, replay, err := spool.Open(spool.Config{Dir: cfg.SpoolDir, MaxBytes: cfg.SpoolMaxBytes, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("SpoolDir: %w", err)
	}
	conn, err := grpc.NewClient(cfg.LogsvcAddr, opts...)
	if err != nil {
		sp.Close()
		return nil, fmt.Errorf("LogsvcAddr: dial %s: %w", cfg.LogsvcAddr, err)
	}
	cli := logsv1.NewIngestServiceClient(conn)
	o := &streamOutbox{
		log: log, conn: conn, sp: sp, maxPending: cfg.MaxPending,
		unacked: map[string]int{}, parked: map[string]*resultItem{}, starts: map[string]*resultItem{},
	}
	o.work = sync.NewCond(&o.mu)
	o.wrote = sync.NewCond(&o.mu)
	// The outbox bounds what it holds (MaxPending, SpoolMaxBytes); the senders hold the same.
	const unbounded = 1 << 40
	o.lines = ackstream.New(ackstream.Config[spooled[*logsv1.LogLine], logsv1.IngestLogLinesRequest, logsv1.IngestLogLinesResponse]{
		Name: "log lines",
		Open: func(ctx context.Context) (ackstream.Stream[logsv1.IngestLogLinesRequest, logsv1.IngestLogLinesResponse], error) {
			s, err := cli.IngestLogLines(ctx)
			if err != nil {
				return nil, err
			}
			return s, nil
		},
		Batch: func(id uint64, items []spooled[*logsv1.LogLine]) *logsv1.IngestLogLinesRequest {
			ls := make([]*logsv1.LogLine, len(items))
			for i, it := range items {
				ls[i] = it.v
			}
			return &logsv1.IngestLogLinesRequest{BatchId: id, Lines: ls}
		},
		Acked: func(r *logsv1.IngestLogLinesResponse) uint64 { return r.GetBatchId() },
		// 500 lines of 64 KiB would be 32 MiB: far over logsvc's 4 MiB message limit, so such
		// a batch was refused and resent for ever, and the fire's result waited behind it.
		Size:          func(l spooled[*logsv1.LogLine]) int { return len(l.v.GetText()) + len(l.v.GetTriggerId()) + 32 },
		MaxBatchBytes: maxLineBatchBytes,
		Linger:        20 * time.Millisecond,
		MaxPending:    unbounded,
		Logger:        log,
		OnAck:         o.linesAcked,
	})
	o.results = ackstream.New(ackstream.Config[*resultItem, logsv1.IngestResultsRequest, logsv1.IngestResultsResponse]{
		Name: "results",
		Open: func(ctx context.Context) (ackstream.Stream[logsv1.IngestResultsRequest, logsv1.IngestResultsResponse], error) {
			s, err := cli.IngestResults(ctx)
			if err != nil {
				return nil, err
			}
			return s, nil
		},
		Batch: o.resultsBatch,
		Acked: func(r *logsv1.IngestResultsResponse) uint64 {
			if ids := r.GetRefusedTriggerIds(); len(ids) > 0 {
				log.Info("logsvc refused results of fires that had already finished", "trigger_ids", ids)
			}
			return r.GetBatchId()
		},
		Linger: 20 * time.Millisecond,
		// logsvc acknowledges a batch once every result in it is stored, and holds a result
		// whose trigger record has not come yet (a fire that ran at once, its record still on
		// the scheduler's stream). Four batches in flight were four such results at 250 runs a
		// second: the next results, other fires' whose records were there, waited out the
		// linger (p90 7 ms, p99 15 ms before leaving the agent). A batch per result in flight
		// for that wait fits in this window.
		Window:     64,
		MaxPending: unbounded,
		Logger:     log,
		OnAck:      o.resultsAcked,
	})
	if err := o.replay(replay); err != nil {
		o.stop()
		return nil, fmt.Errorf("SpoolDir: %w", err)
	}
	return o, nil
}

// replay queues what the spool held at start-up, in its order, as it was queued the first time.
func (o *streamOutbox) replay(recs []spool.Record) error {
	if len(recs) == 0 {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	var lines, results int
	for _, rec := range recs {
		if len(rec.Data) == 0 {
			continue
		}
		switch rec.Data[0] {
		case kindLine:
			l := &logsv1.LogLine{}
			if err := proto.Unmarshal(rec.Data[1:], l); err != nil {
				return fmt.Errorf("spool record %d: %w", rec.Seq, err)
			}
			o.unacked[l.GetTriggerId()]++
			o.queueLineLocked(spooled[*logsv1.LogLine]{rec.Seq, l})
			lines++
		case kindStart, kindResult:
			r := &logsv1.RunResult{}
			if err := proto.Unmarshal(rec.Data[1:], r); err != nil {
				return fmt.Errorf("spool record %d: %w", rec.Seq, err)
			}
			o.deliverResultLocked(&resultItem{r: r, seq: rec.Seq})
			results++
		default:
			return fmt.Errorf("spool record %d: unknown kind %q", rec.Seq, rec.Data[0])
		}
	}
	o.log.Info("delivering results and log lines kept in the spool from before the last stop", "results", results, "lines", lines, "spool_bytes", o.sp.Bytes())
	return nil
}

// admitLocked reports whether one more item fits in MaxPending (results have a reserve beyond
// it, for when lines have filled the queue); an item that does not is dropped.
func (o *streamOutbox) admitLocked(urgent bool, what string) bool {
	if o.stopped {
		o.drop(what, 1, ackstream.ErrStopped)
		return false
	}
	limit := o.maxPending
	if urgent {
		limit += o.maxPending/10 + 1
	}
	if held := o.lines.Pending() + o.results.Pending() + len(o.staging); held >= limit {
		o.drop(what, 1, fmt.Errorf("%d items held, MaxPending %d: %w", held, o.maxPending, ackstream.ErrFull))
		return false
	}
	return true
}

// stageLocked hands an item to writeLoop; wake says to write it now rather than with the next
// item that does or at the next spoolSoon or waitSpooled.
func (o *streamOutbox) stageLocked(it staged, wake bool) {
	o.staging = append(o.staging, it)
	o.added++
	if wake {
		o.work.Signal()
	}
}

func (o *streamOutbox) start(ctx context.Context) {
	o.lines.Start(ctx)
	o.results.Start(ctx)
	o.mu.Lock()
	o.done = make(chan struct{})
	done := o.done
	o.mu.Unlock()
	go o.writeLoop()
	go o.laterLoop(done) // not on ctx: it bounds the executor's start only
}

// laterTick is how often laterLoop looks for RUNNING results that are due to leave.
const laterTick = 100 * time.Millisecond

// laterLoop hands RUNNING results to the results sender once their sendAt has come, until
// writeLoop has ended (stop). One that is left when the agent stops stays in the spool and
// leaves at the next start.
func (o *streamOutbox) laterLoop(done <-chan struct{}) {
	t := time.NewTicker(laterTick)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			o.mu.Lock()
			o.sendLaterLocked(now)
			o.mu.Unlock()
		}
	}
}

// sendLaterLocked hands on the waiting RUNNING results whose sendAt is before until, from the
// front (they wait in the order they were written, within the hold of the dispatch lead of
// their sendAt order), and drops the superseded ones.
func (o *streamOutbox) sendLaterLocked(until time.Time) {
	n := 0
	for ; n < len(o.later); n++ {
		it := o.later[n]
		if it.superseded {
			continue
		}
		if it.sendAt.After(until) {
			break
		}
		o.laterN--
		it.queued = true
		o.sendResultLocked(it)
	}
	clear(o.later[:n])
	o.later = o.later[n:]
	if len(o.later) == 0 {
		o.later = nil
	}
}

// writeLoop writes what is staged to the spool, many items with one write, and hands them on
// in order. It ends, with nothing left staged, when stop begins.
func (o *streamOutbox) writeLoop() {
	defer close(o.done)
	var (
		batch   []staged
		entries []spool.Entry
		buf     []byte
	)
	for {
		o.mu.Lock()
		for len(o.staging) == 0 && !o.stopped {
			o.work.Wait()
		}
		if len(o.staging) == 0 {
			o.mu.Unlock()
			return
		}
		// Let goroutines that are ready to run (workers ending their fires, a Run call accepting
		// fires) add their items first: under load one write takes them all; when idle this
		// returns at once.
		o.mu.Unlock()
		runtime.Gosched()
		o.mu.Lock()
		batch, o.staging = o.staging, batch[:0]
		upTo := o.added
		for _, it := range batch {
			if it.res != nil {
				it.res.staged = false // from now on its result stays as it is until delivered
			}
		}
		o.mu.Unlock()

		entries, buf = entries[:0], buf[:0]
		for _, it := range batch {
			var m proto.Message = it.line
			kind, urgent := byte(kindLine), false
			if it.res != nil {
				m, kind, urgent = it.res.r, kindResult, true
				if it.res.r.GetStatus() == logsv1.RunStatus_RUN_STATUS_RUNNING {
					kind = kindStart
				}
			}
			off := len(buf)
			var err error
			buf, err = proto.MarshalOptions{}.MarshalAppend(append(buf, kind), m)
			if err != nil {
				buf = buf[:off]
				entries = append(entries, spool.Entry{Err: fmt.Errorf("%w: %v", errEncode, err)})
				continue
			}
			entries = append(entries, spool.Entry{Data: buf[off:len(buf):len(buf)], Urgent: urgent})
		}
		o.appendBatch(entries)

		o.mu.Lock()
		for i, it := range batch {
			o.deliverLocked(it, entries[i].Seq, entries[i].Err)
		}
		o.written = upTo
		o.wrote.Broadcast()
		o.mu.Unlock()
		clear(batch)
		clear(entries)
	}
}

// appendBatch writes the encoded entries to the spool; entries that failed to encode (Err set,
// no Data) are left out and keep their error.
func (o *streamOutbox) appendBatch(entries []spool.Entry) {
	bad := 0
	for _, e := range entries {
		if e.Err != nil {
			bad++
		}
	}
	if bad == 0 {
		o.sp.AppendBatch(entries)
		return
	}
	var good []spool.Entry
	var idx []int
	for i, e := range entries {
		if e.Err == nil {
			good = append(good, e)
			idx = append(idx, i)
		}
	}
	o.sp.AppendBatch(good)
	for j, i := range idx {
		entries[i] = good[j]
	}
}

// deliverLocked hands a staged item, just written to the spool as record seq (or refused with
// err), to its sender. An item the spool refused for want of room is dropped; one the disk
// refused for another reason is still delivered from memory (record 0).
func (o *streamOutbox) deliverLocked(it staged, seq uint64, err error) {
	if err != nil {
		what := "log lines"
		if it.res != nil {
			what = "result of " + it.res.r.GetTriggerId()
		}
		switch {
		case errors.Is(err, spool.ErrFull):
			o.drop(what, 1, fmt.Errorf("spool holds %d bytes, SpoolMaxBytes %d: %w", o.sp.Bytes(), o.sp.MaxBytes(), err))
			o.forgetLocked(it)
			return
		case errors.Is(err, spool.ErrClosed):
			o.drop(what, 1, ackstream.ErrStopped)
			o.forgetLocked(it)
			return
		case errors.Is(err, errEncode):
			o.drop(what, 1, err)
			o.forgetLocked(it)
			return
		}
		o.log.Error("writing to the spool failed; delivering from memory only (lost if the agent dies first)", "item", what, "error", err)
	}
	if it.line != nil {
		o.queueLineLocked(spooled[*logsv1.LogLine]{seq, it.line})
		return
	}
	it.res.seq = seq
	o.deliverResultLocked(it.res)
}

// forgetLocked undoes what adding an item that is dropped before delivery counted.
func (o *streamOutbox) forgetLocked(it staged) {
	if it.line != nil {
		o.lineDoneLocked(it.line.GetTriggerId())
		return
	}
	if id := it.res.r.GetTriggerId(); o.starts[id] == it.res {
		delete(o.starts, id)
	}
}

// deliverResultLocked sends a result on, in the order results were added: a RUNNING one at once;
// a final one after its fire's lines are acknowledged (parked until then), in the place of its
// fire's RUNNING result when that has not been batched yet.
func (o *streamOutbox) deliverResultLocked(it *resultItem) {
	id := it.r.GetTriggerId()
	if it.r.GetStatus() == logsv1.RunStatus_RUN_STATUS_RUNNING {
		// It leaves runningAfter after the fire's start, unless the final result comes first.
		o.starts[id] = it
		from := time.Now()
		if start := time.UnixMilli(it.r.GetStartUnixMs()); start.After(from) {
			from = start // a held fire: from its due time
		}
		it.sendAt = from.Add(runningAfter)
		o.later = append(o.later, it)
		o.laterN++
		return
	}
	if o.unacked[id] > 0 {
		o.parked[id] = it
		return
	}
	if s, ok := o.starts[id]; ok {
		delete(o.starts, id)
		if s.queued {
			// Its RUNNING result waits in the results queue: send this one in its place.
			s.r, s.merged = it.r, it.seq
			return
		}
		// Its RUNNING result has not left yet: it never will; this one releases its record.
		s.superseded = true
		o.laterN--
		it.merged = s.seq
	}
	o.sendResultLocked(it)
}

func (o *streamOutbox) addLines(ls []*logsv1.LogLine) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, l := range ls {
		if !o.admitLocked(false, "log lines") {
			continue
		}
		// Counted when added, so the fire's result, added after, waits for it.
		o.unacked[l.GetTriggerId()]++
		o.stageLocked(staged{line: l}, true)
	}
}

func (o *streamOutbox) queueLineLocked(it spooled[*logsv1.LogLine]) {
	if err := o.lines.Send(it); err != nil {
		o.drop("log lines", 1, err)
		o.lineDoneLocked(it.v.GetTriggerId())
		return
	}
	o.room()
}

func (o *streamOutbox) addStart(r *logsv1.RunResult) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.admitLocked(true, "RUNNING result of "+r.GetTriggerId()) {
		return
	}
	it := &resultItem{r: r, staged: true}
	o.starts[r.GetTriggerId()] = it
	o.stageLocked(staged{res: it}, false)
}

func (o *streamOutbox) addResult(r *logsv1.RunResult) {
	o.mu.Lock()
	defer o.mu.Unlock()
	id := r.GetTriggerId()
	if s, ok := o.starts[id]; ok && s.staged && o.unacked[id] == 0 {
		// Its RUNNING result is not even written yet: write and send this one instead.
		delete(o.starts, id)
		s.r = r
		o.work.Signal()
		return
	}
	if !o.admitLocked(true, "result of "+id) {
		return
	}
	o.stageLocked(staged{res: &resultItem{r: r}}, true)
}

func (o *streamOutbox) spoolSoon() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.written < o.added {
		o.work.Signal()
	}
}

func (o *streamOutbox) waitSpooled() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.waitWrittenLocked(o.added)
}

// waitWrittenLocked waits until writeLoop has taken the first n items through the spool. Every
// staged item is taken, also at stop, so this ends.
func (o *streamOutbox) waitWrittenLocked(n uint64) {
	if o.written < n {
		o.work.Signal()
	}
	for o.written < n && o.done != nil {
		o.wrote.Wait()
	}
}

// lineDoneLocked counts off a line of fire id that is acknowledged or dropped, and sends the
// fire's parked result once no line of it is left.
func (o *streamOutbox) lineDoneLocked(id string) {
	if n := o.unacked[id] - 1; n > 0 {
		o.unacked[id] = n
		return
	}
	delete(o.unacked, id)
	if r, ok := o.parked[id]; ok {
		delete(o.parked, id)
		o.deliverResultLocked(r)
	}
}

// linesAcked releases the lines' spool records and the results whose fire has no
// unacknowledged line left.
func (o *streamOutbox) linesAcked(ls []spooled[*logsv1.LogLine]) {
	seqs := make([]uint64, 0, len(ls))
	for _, l := range ls {
		seqs = append(seqs, l.seq)
	}
	o.sp.Ack(seqs...)
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, l := range ls {
		o.lineDoneLocked(l.v.GetTriggerId())
	}
}

// resultsBatch builds a request of results. From now on they are what logsvc receives (also
// when the batch is resent): a RUNNING result in it can no longer give way to its final one.
func (o *streamOutbox) resultsBatch(id uint64, items []*resultItem) *logsv1.IngestResultsRequest {
	rs := make([]*logsv1.RunResult, len(items))
	o.mu.Lock()
	for i, it := range items {
		if tid := it.r.GetTriggerId(); o.starts[tid] == it {
			delete(o.starts, tid)
		}
		rs[i] = it.r
	}
	o.mu.Unlock()
	return &logsv1.IngestResultsRequest{BatchId: id, Results: rs}
}

// resultsAcked releases the results' spool records.
func (o *streamOutbox) resultsAcked(rs []*resultItem) {
	seqs := make([]uint64, 0, 2*len(rs))
	o.mu.Lock() // the records were set under it
	for _, r := range rs {
		seqs = append(seqs, r.seq)
		if r.merged != 0 {
			seqs = append(seqs, r.merged)
		}
	}
	o.mu.Unlock()
	o.sp.Ack(seqs...)
}

func (o *streamOutbox) sendResultLocked(r *resultItem) {
	if err := o.results.Send(r); err != nil {
		o.drop("result of "+r.r.GetTriggerId(), 1, err)
		if id := r.r.GetTriggerId(); o.starts[id] == r {
			delete(o.starts, id)
		}
		return
	}
	o.room()
}

// drop logs items that could not be queued: loudly once when the queue fills, then counted.
func (o *streamOutbox) drop(what string, n int, err error) {
	o.dropped += n
	if errors.Is(err, ackstream.ErrStopped) {
		o.log.Error("delivery to logsvc has stopped; dropping "+what, "count", n)
		return
	}
	if !o.full {
		o.full = true
		o.log.Error("spool for logsvc is full (logsvc unreachable or slow): dropping new log lines, then results, until it drains — output stays in the local run log",
			"dropping", what, "reason", err, "pending", o.lines.Pending()+o.results.Pending(), "spool_bytes", o.sp.Bytes(), "spool_max_bytes", o.sp.MaxBytes())
	}
}

// room notes that the queue takes items again after an episode of drops.
func (o *streamOutbox) room() {
	if o.full {
		o.log.Warn("delivery queue to logsvc has room again", "dropped", o.dropped)
		o.full, o.dropped = false, 0
	}
}

func (o *streamOutbox) flush(ctx context.Context) error {
	o.waitSpooled()
	o.mu.Lock()
	o.sendLaterLocked(time.Unix(1<<40, 0)) // every one added so far, whenever it was due
	o.mu.Unlock()
	if err := o.lines.Flush(ctx); err != nil {
		return err
	}
	// Lines are acknowledged, so every parked result has moved to the results stream.
	return o.results.Flush(ctx)
}

func (o *streamOutbox) pending() int {
	o.mu.Lock()
	n := len(o.parked) + len(o.staging) + o.laterN
	o.mu.Unlock()
	return o.lines.Pending() + o.results.Pending() + n
}

// stop writes what is staged to the spool, then ends delivery and closes the spool.
func (o *streamOutbox) stop() {
	o.mu.Lock()
	o.stopped = true
	done := o.done
	o.work.Signal()
	o.mu.Unlock()
	if done != nil {
		<-done
	}
	o.lines.Stop()
	o.results.Stop()
	if err := o.conn.Close(); err != nil {
		o.log.Warn("closing logsvc connection", "error", err)
	}
	if err := o.sp.Close(); err != nil {
		o.log.Error("closing the spool", "error", err)
	}
}

// dialOptions are the options of the executor's connections to the registry and logsvc: the
// configured (or default) ones, the executor's credential, and tracing.
func dialOptions(cfg Config) []grpc.DialOption {
	opts := cfg.DialOptions
	if len(opts) == 0 {
		opts = defaultDialOptions(cfg.TLS)
	}
	return append(opts[:len(opts):len(opts)], grpc.WithPerRPCCredentials(executorCreds{app: cfg.AppName, token: cfg.AccessToken}),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler()))
}

// executorCreds present the executor's group credential on every call: its access token as
// "authorization: Bearer <token>" and its app name as "x-jobmesh-executor-app".
type executorCreds struct{ app, token string }

func (c executorCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + c.token, "x-jobmesh-executor-app": c.app}, nil
}

// RequireTransportSecurity is false: the dial options decide on TLS.
func (executorCreds) RequireTransportSecurity() bool { return false }
