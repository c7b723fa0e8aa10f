package scheduler

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/triggerid"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/partition"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/schedule"
)

// maxBackoff caps exponential retry backoff.
const maxBackoff = time.Hour

// completionFollower is the replica's one stream of logsvc's completions, shared by its
// engines: each partition's completions are acted on under that partition's fence and advance
// that partition's cursor, so a partition's next leader resumes where its previous one stopped.
// The stream starts at the lowest cursor of the engines led; an engine that joins with a lower
// one (a partition just taken over) restarts it from there, and the completions an engine has
// acted on already are passed over.
type completionFollower struct {
	wakeC chan struct{}
	// at is the cursor of the last batch received, or the cursor the stream started after (0:
	// from the oldest completion, or logsvc had none); -1 while no stream has said where it is.
	at atomic.Int64

	mu sync.Mutex
	// live is closed while a session of the stream is live (its starting cursor fixed); a new
	// one replaces it when the session ends.
	live   chan struct{}
	isLive bool
}

func newCompletionFollower() *completionFollower {
	f := &completionFollower{wakeC: make(chan struct{}, 1), live: make(chan struct{})}
	f.at.Store(-1)
	return f
}

// setLive records whether a session of the stream is live.
func (f *completionFollower) setLive(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case on && !f.isLive:
		close(f.live)
	case !on && f.isLive:
		f.live = make(chan struct{})
	}
	f.isLive = on
}

// waitLive waits up to d for a live session; false when there is none by then.
func (f *completionFollower) waitLive(ctx context.Context, d time.Duration) bool {
	f.mu.Lock()
	live := f.live
	f.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-live:
		return true
	case <-ctx.Done():
	case <-t.C:
	}
	return false
}

// wake tells the follower that the set of engines, or a cursor, changed.
func (f *completionFollower) wake() {
	select {
	case f.wakeC <- struct{}{}:
	default:
	}
}

// completionCursorHeader is the response header of LogService.WatchCompletions that carries the
// cursor the stream starts after.
const completionCursorHeader = "x-jobmesh-completion-cursor"

// errRestart: an engine needs completions from before the stream's position.
var errRestart = errors.New("completion stream restarts for a partition taken over")

// followCompletions follows logsvc's completion stream while this replica leads any partition,
// and acts on every run that ends: retries, child jobs and the next FIX_DELAY fire.
func (s *Service) followCompletions(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		from, oldest, ok := s.completionStart(false)
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-s.completions.wakeC:
			}
			continue
		}
		err := s.completionSession(ctx, from, oldest)
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, errRestart):
			backoff = 100 * time.Millisecond
			continue
		}
		s.log.Warn("completion stream broken; reconnecting", "error", err)
		if s.wait(ctx, backoff) != nil {
			return
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// completionStart returns where the stream starts: the lowest cursor of the engines ready for
// completions and not ending; ok false when there are none. An engine at cursor 0 (its partition
// has never acted on a completion) counts only when no other has a cursor: 0 starts the stream
// at logsvc's newest completion, which would pass over the completions the others have not
// acted on yet, while every completion after another's cursor is one the engine at 0 has not
// acted on either. An engine whose 0 means every completion (all) starts it at the oldest
// (oldest true). With carried, an engine's position counts the completions the follower holds
// for it (streamPos): what a live session has yet to give it, not where a new one starts.
func (s *Service) completionStart(carried bool) (from int64, oldest, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.engines {
		if l.ending() {
			continue // its partition's next leader reads the stored cursor
		}
		c := l.cursor.Load()
		if carried {
			c = l.streamPos()
		}
		if c == 0 && l.all {
			return 0, true, true
		}
		if c >= 0 && (!ok || from == 0 || (c > 0 && c < from)) {
			from, ok = c, true
		}
	}
	return from, false, ok
}

// completionSession follows the stream from cursor from, or from the oldest completion, until
// it breaks or an engine needs it to start earlier (errRestart).
func (s *Service) completionSession(ctx context.Context, from int64, oldest bool) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	st, err := s.logs.WatchCompletions(ctx, &logsv1.WatchCompletionsRequest{AfterCursor: from, FromOldest: oldest})
	if err != nil {
		return err
	}
	// The header comes once logsvc has fixed where the stream starts, and says where.
	md, err := st.Header()
	if err != nil {
		return err
	}
	// A start the header does not give is known only when it is a cursor of ours: a logsvc that
	// does not know from_oldest streams from its newest, and says nothing.
	start, known := from, from > 0
	if v := md.Get(completionCursorHeader); from == 0 && len(v) == 1 {
		if start, err = strconv.ParseInt(v[0], 10, 64); err != nil {
			return fmt.Errorf("completion stream: header %s: %w", completionCursorHeader, err)
		}
		known = !oldest || start == 0
	}
	// An older logsvc does not stream every completion when asked: asking again would not
	// either, so the stream goes on from its newest.
	refused := oldest && !known
	if refused {
		s.log.Warn("logsvc did not stream every completion as asked (an older version?); following it from its newest")
	}
	s.streamFrom(start, known)
	defer s.completions.setLive(false)
	defer s.dropCarried() // what a session holds back, the next reads again from the cursors
	// After 0 is every completion, whether asked for or found (logsvc had none).
	oldest = known && start == 0
	wantsOldest := func(need bool) bool { return need && !oldest && !refused }
	if _, need, _ := s.completionStart(false); wantsOldest(need) {
		return errRestart // an engine that needs every completion took over as the stream began
	}
	go func() { // an engine that needs older completions restarts the stream
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.completions.wakeC:
				if c, need, ok := s.completionStart(true); ok && (c < s.completions.at.Load() || wantsOldest(need)) {
					cancel(errRestart)
					return
				}
			}
		}
	}()
	// A reader takes messages off the stream while a batch is applied, so that the next batch
	// is what arrived meanwhile (up to maxCompletionBatch): logsvc sends a message per write
	// cycle it commits, and applying them one transaction each fell ever further behind a busy
	// logsvc.
	msgs := make(chan []*logsv1.Completion, maxQueuedCompletionMsgs)
	recvErr := make(chan error, 1)
	go func() {
		for {
			resp, err := st.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			if cs := resp.GetCompletions(); len(cs) > 0 {
				select {
				case msgs <- cs:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	// ended reports why the session ends: a restart (the context's cause) or err.
	ended := func(err error) error {
		if cause := context.Cause(ctx); errors.Is(cause, errRestart) {
			return cause
		}
		return err
	}
	var (
		broken error // the stream's end, once the reader met it: what it queued is applied first
		// carry are the completions of partitions whose fences were busy, held for the next
		// batch, which comes with the next message or after carryRetry.
		carry []*logsv1.Completion
	)
	for {
		if ctx.Err() != nil { // cut (a restart): the reader may have ended unheard
			return ended(ctx.Err())
		}
		var cs []*logsv1.Completion
		if broken != nil {
			select {
			case cs = <-msgs:
			default:
				return ended(broken)
			}
		} else {
			var retry <-chan time.Time
			if len(carry) > 0 {
				// A lock's poll, not a schedule: the wall clock. An unstopped timer is collected.
				retry = time.After(carryRetry)
			}
			select {
			case cs = <-msgs:
			case broken = <-recvErr:
				continue
			case <-ctx.Done():
				continue
			case <-retry:
			}
		}
		at := s.completions.at.Load()
		upTo := at
		if cs = gatherCompletions(cs, msgs, maxCompletionBatch-len(carry)); len(cs) > 0 {
			upTo = cs[len(cs)-1].GetCursor()
		}
		var err error
		if carry, err = s.handleCompletions(ctx, append(carry, cs...), at, upTo); err != nil {
			return ended(err)
		}
		s.completions.at.Store(upTo)
		// An engine that became ready while the batch was applied, after the wake check above
		// compared its cursor with the stream's position before the batch, was left out of it:
		// the batch's completions of its partition are still to act on.
		if s.behindStream(upTo) {
			return errRestart
		}
	}
}

// carryRetry is how soon completions held back by a busy fence are tried again when no
// message comes first: a pre-read holds its partition's fence for some milliseconds. maxCarry
// is how long a partition's completions are held back at most: then the batch waits for its
// fence, queued for it (a partition scanned again at once, after a full scan, frees its fence
// for a moment only).
const (
	carryRetry = 5 * time.Millisecond
	maxCarry   = 250 * time.Millisecond
)

// dropCarried forgets the completions a session held back: the next session reads them again
// from the engines' cursors.
func (s *Service) dropCarried() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.engines {
		l.carriedTo.Store(0)
		l.carriedSince.Store(0)
	}
}

// streamFrom records that the completion stream is live from cursor start. The engines that
// have never followed completions (cursor 0, not all) start there too, so that a restart of the
// stream resumes from it rather than from whatever is newest then (they fire only once it is
// live: startFollowing); a start of 0 is every completion (logsvc had none, or the stream is
// from the oldest). A logsvc that does not say where a stream from its newest starts (known
// false) leaves them as they were, and the stream's position unknown (-1) until its first batch.
func (s *Service) streamFrom(start int64, known bool) {
	s.mu.Lock()
	if known {
		for _, l := range s.engines {
			if l.cursor.Load() == 0 && !l.all {
				if start > 0 {
					l.cursor.CompareAndSwap(0, start)
				} else {
					l.all = true
				}
			}
		}
		s.completions.at.Store(start)
	} else {
		s.completions.at.Store(-1) // known after its first batch
	}
	s.mu.Unlock()
	s.completions.setLive(true)
}

// behindStream reports whether an engine ready for completions, and not ending, has a cursor
// (or completions held back, streamPos) below at, the stream's position: it was not in the
// batches up to at, and the stream must restart from its cursor. (An ending engine's cursor
// stays where it stopped; its partition's next leader reads the stored one.)
func (s *Service) behindStream(at int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.engines {
		if c := l.streamPos(); c >= 0 && c < at && !l.ending() {
			return true
		}
	}
	return false
}

// maxQueuedCompletionMsgs bounds the completion messages read ahead of the batch being applied
// (then the stream's flow control holds logsvc back); maxCompletionBatch is the size from which
// a batch takes no more of them: logsvc's default message size, so that a gathered batch holds
// its partitions' fences (and keeps their pre-reads waiting) no longer than one full message
// did.
const (
	maxQueuedCompletionMsgs = 64
	maxCompletionBatch      = 500
)

// gatherCompletions appends to cs, in order, the messages msgs holds now, until cs has limit
// completions or more.
func gatherCompletions(cs []*logsv1.Completion, msgs <-chan []*logsv1.Completion, limit int) []*logsv1.Completion {
	for len(cs) < limit {
		select {
		case more := <-msgs:
			cs = append(cs, more...)
		default:
			return cs
		}
	}
	return cs
}

// handleCompletions applies one batch, the stream's completions after cursor at through upTo (and
// those carried from earlier batches), for the partitions this replica leads, in one transaction
// fenced by each of them: schedule changes, the retries and child fires it decides on (as pending
// fires) and the partitions' cursors. After the commit it arms those fires; if this replica loses
// a partition first, its next leader finds them in pending_fires. A partition whose fence a newer
// leader holds is deposed, and the batch applied again without it. A batch that lost a race with
// another transaction (errRetryable) is applied again, up to maxCompletionRetries times, rather
// than restart the completion stream. It returns carry: the completions of partitions whose fences
// another transaction held (a pre-read), which wait for a later batch rather than hold this one
// back; those partitions' cursors stay before them. An engine that is not as far as at (it became
// ready while the stream was past its cursor) is left out: the stream restarts for it
// (behindStream).
func (s *Service) handleCompletions(ctx context.Context, cs []*logsv1.Completion, at, upTo int64) (carry []*logsv1.Completion, err error) {
	retries := 0
	for {
		carry, err = s.handleCompletionsOnce(ctx, cs, at, upTo)
		if errors.Is(err, errRetryable) && retries < maxCompletionRetries && ctx.Err() == nil {
			retries++
			s.log.Warn("completion batch lost a race with another transaction; applying it again", "error", err)
			continue
		}
		var d deposedError
		if !errors.As(err, &d) {
			return carry, err
		}
		for _, l := range d.engines {
			l.depose()
		}
	}
}

// maxCompletionRetries is how often handleCompletions applies a batch again that lost a race.
const maxCompletionRetries = 3

// deposedError names the engines a completion batch found deposed.
type deposedError struct{ engines []*engine }

func (e deposedError) Error() string {
	return fmt.Sprintf("%d partitions: %v", len(e.engines), errDeposed)
}
func (e deposedError) Unwrap() error { return errDeposed }

func (s *Service) handleCompletionsOnce(ctx context.Context, cs []*logsv1.Completion, at, upTo int64) ([]*logsv1.Completion, error) {
	// The engines this batch concerns: ready (the takeover read their cursor), as far as the
	// stream before the batch, and behind its end. While where the stream started is unknown
	// (at < 0: a logsvc that does not say), only those that never followed completions are: one
	// with a cursor restarts the stream from it.
	s.mu.Lock()
	byPart := make(map[int]*engine, len(s.engines))
	from := make(map[int]int64, len(s.engines))
	var terms []term
	for p, l := range s.engines {
		c := l.cursor.Load()
		asFar := l.streamPos() >= at && (at >= 0 || c == 0)
		if c >= 0 && c < upTo && asFar && !l.ending() {
			byPart[p], from[p] = l, c
			terms = append(terms, l.term())
		}
	}
	s.mu.Unlock()
	if len(terms) == 0 {
		return nil, nil
	}
	var mine []*logsv1.Completion
	for _, c := range cs {
		p := s.completionPart(c)
		if l := byPart[p]; l != nil && c.GetCursor() > from[p] {
			mine = append(mine, c)
		}
	}
	tx, err := s.jobs.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	// One read of the batch's jobs that act on a completion (children, retries, FIX_DELAY): most
	// completions ask nothing, and a batch that asks nothing writes nothing. Reads need no fence.
	ids := make([]int64, 0, len(mine))
	var nodes []*logsv1.Completion // workflow nodes' completions: the instance decides, not the job
	jobOnly := mine[:0:0]
	for _, c := range mine {
		if _, ok := isNodeCompletion(c); ok {
			nodes = append(nodes, c)
			continue
		}
		jobOnly = append(jobOnly, c)
		ids = append(ids, c.GetJobId())
	}
	mine = jobOnly
	acting, err := s.jobs.getActing(ctx, tx.Tx, ids)
	if err != nil {
		return nil, err
	}
	// The partitions to fence: those whose completions ask something (their cursors are saved
	// with what they ask, so a next leader never acts on them twice), and those whose saved
	// cursor is older than cursorSaveEvery (so that a next leader reads back little).
	now := s.clk.Now().UnixMilli()
	asks := map[int]bool{} // the partitions whose completions ask something
	var act []*logsv1.Completion
	for _, c := range mine {
		if acting[c.GetJobId()] != nil {
			act = append(act, c)
			asks[s.completionPart(c)] = true
		}
	}
	for _, c := range nodes {
		asks[s.completionPart(c)] = true
	}
	terms = terms[:0]
	for p, l := range byPart {
		if asks[p] || now-l.cursorSavedMs.Load() >= cursorSaveEvery.Milliseconds() {
			terms = append(terms, l.term())
		}
	}
	// A partition held back for maxCarry already waits for its fence.
	wait := map[int]bool{}
	for p, l := range byPart {
		if since := l.carriedSince.Load(); since != 0 && time.Since(time.Unix(0, since)) >= maxCarry {
			wait[p] = true
		}
	}
	var fenced map[int]bool
	if len(terms) > 0 {
		held, deposed, err := s.jobs.fenceFree(ctx, tx.Tx, terms, wait, s.cfg.ReplicaID)
		if err != nil {
			if !errors.Is(err, errDeposed) {
				return nil, err
			}
			var d deposedError
			for _, p := range deposed {
				d.engines = append(d.engines, byPart[p])
			}
			return nil, d
		}
		fenced = held
	}
	// A partition whose fence is busy acts on nothing in this batch: what its completions ask
	// is carried to the next, and its cursor stays before them. One that only saves its cursor
	// saves it with a later batch: a cursor is written only under its partition's fence.
	terms = slices.DeleteFunc(terms, func(t term) bool { return !fenced[t.part] })
	var carry []*logsv1.Completion
	carried := map[int]bool{}
	for p := range asks {
		if !fenced[p] {
			carried[p] = true
		}
	}
	if len(carried) > 0 {
		unheld := func(c *logsv1.Completion) bool { return carried[s.completionPart(c)] }
		for _, c := range slices.Concat(act, nodes) {
			if unheld(c) {
				carry = append(carry, c)
			}
		}
		slices.SortFunc(carry, func(a, b *logsv1.Completion) int { return cmp.Compare(a.GetCursor(), b.GetCursor()) })
		act = slices.DeleteFunc(act, unheld)
		nodes = slices.DeleteFunc(nodes, unheld)
	}
	// The batch's last writes (the nodes' decisions, notifications, the cursors) go to the
	// store in one round trip.
	var last db.Batch
	after, err := s.actOnCompletions(ctx, tx.Tx, &last, byPart, act, acting)
	if err != nil {
		return nil, err
	}
	if len(terms) > 0 {
		s.jobs.saveCursors(&last, terms, upTo)
	}
	wfAfter, err := s.actOnNodeCompletions(ctx, tx, nodes, &last)
	if err != nil {
		return nil, err
	}
	after = append(after, wfAfter...)
	if err := tx.Send(ctx, &last); err != nil { // what the nodes' flush did not send
		return nil, err
	}
	if err := s.jobs.commit(tx); err != nil {
		return nil, fmt.Errorf("completions: %w", err)
	}
	firstCarried := map[int]int64{}
	for _, c := range carry {
		if p := s.completionPart(c); firstCarried[p] == 0 {
			firstCarried[p] = c.GetCursor()
		}
	}
	for p, l := range byPart {
		if carried[p] {
			// Every completion of the partition before its first carried one is acted on: a
			// stream that restarts reads again from there.
			if c := firstCarried[p] - 1; c > l.cursor.Load() {
				l.cursor.Store(c)
			}
			l.carriedTo.Store(upTo)
			l.carriedSince.CompareAndSwap(0, time.Now().UnixNano()) // a lock's wait: the wall clock
			continue
		}
		l.cursor.Store(upTo)
		l.carriedTo.Store(0)
		l.carriedSince.Store(0)
		if fenced[p] {
			l.cursorSavedMs.Store(now)
		}
	}
	for _, f := range after {
		f()
	}
	return carry, nil
}

// cursorSaveEvery bounds how long a partition's saved completion cursor may lag the completions
// its leader has read when none of them asked anything: a next leader reads those again and
// finds nothing to do in them.
const cursorSaveEvery = 5 * time.Second

// actOnCompletions decides, inside the fenced tx, what each completion asks of the scheduler,
// and returns what arms or disarms fires after the commit. byPart are the engines of the
// completions' partitions, jobs the completions' jobs that act on completions; notifications
// are queued to last, which the caller sends before the commit.
func (s *Service) actOnCompletions(ctx context.Context, tx *sql.Tx, last *db.Batch, byPart map[int]*engine, cs []*logsv1.Completion,
	jobs map[int64]*jobRow) ([]func(), error) {
	if len(cs) == 0 {
		return nil, nil
	}
	// jobs are the batch's jobs that act on a completion, read in one query (a completion per
	// fire: one query each cost a round trip per fire); their child jobs are read after it. A
	// job that is not among them (no children, no retries, not FIX_DELAY; or deleted) asks
	// nothing.
	var childIDs []int64
	for _, c := range cs {
		if j := jobs[c.GetJobId()]; j != nil && c.GetStatus() == logsv1.RunStatus_RUN_STATUS_SUCCESS {
			for _, id := range splitIDs(j.ChildJobIDs) {
				if jobs[id] == nil {
					childIDs = append(childIDs, id)
				}
			}
		}
	}
	children, err := s.jobs.getMany(ctx, tx, childIDs)
	if err != nil {
		return nil, err
	}
	var after []func()
	for _, c := range cs {
		j := jobs[c.GetJobId()]
		if j == nil {
			continue // nothing to do for its completions, or deleted meanwhile
		}
		l := byPart[partition.PartitionOf(j.ID, s.partCount())]
		if c.GetReplacesStatus() != logsv1.RunStatus_RUN_STATUS_UNSPECIFIED {
			then, err := s.correct(ctx, tx, last, l, j, c, jobs, children)
			if err != nil {
				return nil, err
			}
			after = append(after, then...)
			continue
		}
		ok := c.GetStatus() == logsv1.RunStatus_RUN_STATUS_SUCCESS
		// A killed run is not retried, nor a skipped misfire (it did not run: its strategy said so).
		retry := !ok && c.GetStatus() != logsv1.RunStatus_RUN_STATUS_KILLED && c.GetStatus() != logsv1.RunStatus_RUN_STATUS_SKIPPED &&
			c.GetAttempt() < j.RetryCount
		switch {
		case retry:
			f := pendingRetry(j, c)
			due := s.clk.Now().Add(retryWait(j, c.GetAttempt())).UnixMilli()
			if err := s.jobs.addPending(ctx, tx, f, due); err != nil {
				return nil, err
			}
			after = append(after, func() { l.armPending(f, due) })
		case ok:
			then, err := s.fireChildren(ctx, tx, last, l, j, c, jobs, children)
			if err != nil {
				return nil, err
			}
			after = append(after, then...)
		}
		if !retry {
			if err := s.planFixDelay(ctx, tx, j, c); err != nil {
				return nil, err
			}
		}
	}
	return after, nil
}

// planFixDelay schedules the next fire of a running FIX_DELAY job one interval after its
// scheduled run c ended (a manual, API or parent-job run does not move its schedule, nor does
// the retry of a parent-job run: its trigger id names the parent). The next fire is planned
// once: only while none is.
func (s *Service) planFixDelay(ctx context.Context, tx *sql.Tx, j *jobRow, c *logsv1.Completion) error {
	if j.ScheduleType != schedule.FixDelay || j.Status != jobRunning ||
		c.GetTriggerType() == schedulerv1.TriggerType_TRIGGER_TYPE_MANUAL || c.GetTriggerType() == schedulerv1.TriggerType_TRIGGER_TYPE_API ||
		c.GetTriggerType() == schedulerv1.TriggerType_TRIGGER_TYPE_PARENT {
		return nil
	}
	if id, _ := triggerid.Parse(c.GetTriggerId()); id.Parent != 0 {
		return nil
	}
	sch, err := parseSchedule(j)
	if err != nil {
		return nil
	}
	// One interval after the run ended, however late its completion reached this leader; at
	// once when that has passed (a late completion does not add its lateness to the delay). The
	// end is the executor's clock's: it is taken as no earlier than the fire's scheduled time
	// and no later than now, so an executor's clock that is behind cannot shorten the delay
	// below the run itself, nor one ahead push the next fire out.
	nowMs := s.clk.Now().UnixMilli()
	end := min(max(c.GetEndUnixMs(), c.GetScheduledUnixMs()), nowMs)
	next := max(end+sch.Interval().Milliseconds(), nowMs)
	return s.jobs.planNextFire(ctx, tx, j.ID, next)
}

// fireChildren stores the PARENT fires of j's child jobs for its successful completion c, and
// returns what arms them after the commit (their notifications are queued to last). jobs and
// children are the batch's jobs read.
func (s *Service) fireChildren(ctx context.Context, tx *sql.Tx, last *db.Batch, l *engine, j *jobRow, c *logsv1.Completion,
	jobs, children map[int64]*jobRow) ([]func(), error) {
	var (
		after []func()
		fired []dueFire
	)
	for _, childID := range splitIDs(j.ChildJobIDs) {
		if childID == j.ID {
			continue
		}
		child := jobs[childID]
		if child == nil {
			child = children[childID]
		}
		if child == nil {
			s.log.Warn("child job not fired: it no longer exists", "job_id", j.ID, "child_job_id", childID)
			continue
		}
		if child.GroupID != j.GroupID {
			// Linked before it moved (or written around the API): a parent's success runs only
			// its own group's jobs.
			s.log.Warn("child job not fired: it is in another executor group", "job_id", j.ID,
				"group_id", j.GroupID, "child_job_id", childID, "child_group_id", child.GroupID)
			continue
		}
		// The child's scheduled time is the parent's and its id names the parent, so its trigger
		// id is the same however often this completion is handled, and not the id of the child's
		// own fire at that time.
		f := &fire{job: child, fireMs: c.GetScheduledUnixMs(), parent: j.ID, kind: kindChild, trigType: triggerParent}
		due := s.clk.Now().UnixMilli()
		if err := s.jobs.addPending(ctx, tx, f, due); err != nil {
			return nil, err
		}
		fired = append(fired, dueFire{f: f, due: due})
		after = append(after, func() { s.armOnLeader(f, due) })
	}
	// A child of a partition another replica leads is handed to it at once (handoff.go).
	s.notifyPending(last, fired)
	return after, nil
}

// heldDueMs is the due time of a retry held back: never due, so no pre-read or takeover arms it.
const heldDueMs = math.MaxInt64

// correct acts on a completion that corrects the run's previous one (logsvc reopened a run it
// had ended without the executor's word, once): the previous was a FAIL, or the RUNNING that
// retracted it. The FAIL may have stored a retry (attempt+1, in pending_fires); the truth
// decides it, as far as it has not been dispatched yet:
//   - RUNNING: the run runs after all. Its retry is held back (never due) until the run ends.
//   - SUCCESS: its retry is dropped, and its child jobs fire (their trigger ids are
//     deterministic, so a child is fired once however often this is handled).
//   - KILLED: its retry is dropped (a killed run is not retried).
//   - FAIL or TIMEOUT: a failure after all. A retry held back is due after the job's backoff
//     from now; one never held stands as the FAIL stored it.
//
// A retry already dispatched when the correction comes has run: the executor's report came too
// late to stop it. A FIX_DELAY job's next fire is planned by the run's last completion that
// calls for no retry: the FAIL when it had none to call for, else the retry's own completion,
// or the correction that drops the retry. It returns what arms or disarms fires after the
// commit.
func (s *Service) correct(ctx context.Context, tx *sql.Tx, last *db.Batch, l *engine, j *jobRow, c *logsv1.Completion,
	jobs, children map[int64]*jobRow) ([]func(), error) {
	retry := pendingRetry(j, c)
	k := retry.key()
	switch st := c.GetStatus(); st {
	case logsv1.RunStatus_RUN_STATUS_RUNNING:
		held, err := s.jobs.setPendingDue(ctx, tx, k, heldDueMs, 0)
		if err != nil || !held {
			return nil, err
		}
		s.log.Info("retry held back: the executor reports the run it was for as running", "trigger_id", c.GetTriggerId(),
			"retry_trigger_id", k.triggerID())
		return []func(){func() { l.disarmPending(k, false) }}, nil
	case logsv1.RunStatus_RUN_STATUS_SUCCESS, logsv1.RunStatus_RUN_STATUS_KILLED:
		dropped, err := s.jobs.dropPending(ctx, tx, k)
		if err != nil {
			return nil, err
		}
		var after []func()
		if dropped {
			s.log.Info("retry dropped: the executor's report corrects the failure it was for", "trigger_id", c.GetTriggerId(),
				"retry_trigger_id", k.triggerID(), "status", st.String())
			after = append(after, func() { l.disarmPending(k, true) })
			if err := s.planFixDelay(ctx, tx, j, c); err != nil { // the retry would have
				return nil, err
			}
		}
		if st == logsv1.RunStatus_RUN_STATUS_SUCCESS {
			then, err := s.fireChildren(ctx, tx, last, l, j, c, jobs, children)
			if err != nil {
				return nil, err
			}
			after = append(after, then...)
		}
		return after, nil
	default:
		if c.GetReplacesStatus() != logsv1.RunStatus_RUN_STATUS_RUNNING {
			return nil, nil // the FAIL's retry stands
		}
		due := s.clk.Now().Add(retryWait(j, c.GetAttempt())).UnixMilli()
		released, err := s.jobs.setPendingDue(ctx, tx, k, due, heldDueMs)
		if err != nil || !released {
			return nil, err
		}
		return []func(){func() { l.armPending(retry, due) }}, nil
	}
}

// disarmPending takes a pending fire out of this leadership's ring, if it is armed there.
// deleted says its row is gone: it is not armed again from a read of pending_fires that began
// before the delete (claims.done).
func (l *engine) disarmPending(k pendingKey, deleted bool) {
	for _, e := range l.ring.RemoveJob(k.job) {
		if e.Value.kind.stored() && e.Value.key() == k {
			if !deleted {
				l.disarmEntry(e)
			}
			continue
		}
		l.ring.Add(e)
	}
	if deleted {
		l.claims.done(k)
	}
}

// retryWait is how long the retry after the given (failed) attempt waits: the job's backoff.
func retryWait(j *jobRow, attempt int32) time.Duration {
	wait := time.Duration(j.RetryIntervalMs) * time.Millisecond
	switch j.RetryBackoff {
	case retryFixed:
	case retryExponential:
		for range attempt {
			if wait = 2 * wait; wait >= maxBackoff {
				return maxBackoff
			}
		}
	default:
		return 0
	}
	return wait
}
