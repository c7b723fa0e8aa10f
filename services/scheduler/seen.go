package scheduler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
)

// A new leader re-fires what the old one may have armed and not sent. logsvc knows a sent fire
// only once its trigger record or the executor's first report has arrived, and both streams lag
// under load; a fire sent just before the crash may be unknown to it and be re-fired, and with
// ROUND routing the re-fire can land on another executor, which has not seen that trigger id and
// runs it again. So after asking logsvc, the takeover asks the executors themselves (Seen).
//
// An executor that does not answer Seen (too busy to answer in time, or an agent older than the
// call) may hold any of the fires it was asked about, so those fires never go to another
// executor: when it is the only one of the group in doubt, the fire is re-sent to it alone under
// its trigger id (its duplicate check answers DUPLICATE if it holds the fire); when several are,
// the leader asks them again, with longer deadlines, for up to the misfire threshold, and then
// records the fire UNKNOWN rather than risk running it twice. Only an executor that refuses the
// connection (nothing listens there: it is not running) is out of doubt.
const (
	// seenTimeout bounds the first Seen call to each executor, and the wait for the executor view
	// before it; later calls about fires still in doubt get twice as long each time.
	seenTimeout = time.Second
	// seenChunk is the most trigger ids in one Seen call (the executor's limit).
	seenChunk = 10_000
	// seenParallel bounds the executors asked at once.
	seenParallel = 16
	// doubtRetry is the first pause before asking again about fires in doubt.
	doubtRetry = 200 * time.Millisecond
)

// seenTarget is one executor as a group's fires reach it: its address and the group's token.
type seenTarget struct{ addr, token string }

// seenOnExecutors asks the executors each trigger id's group routes over now (idsByGroup: group
// id → trigger ids) which of those ids they have accepted, in one Seen call per executor per
// chunk of seenChunk ids, and returns the ids found (each with the address of an executor that
// holds it) and, per group, the executors that did not
// say (silent: they may hold any of the group's ids). It does not fail: an executor that does
// not answer within seenTimeout or does not know Seen is silent, with a warning; one that refuses
// the connection is skipped, and so is a group that cannot be read (its ids count as not found,
// with no executor in doubt). skipped counts both.
func (s *Service) seenOnExecutors(ctx context.Context, idsByGroup map[int64][]string) (found map[string]string, silent map[int64][]seenTarget, skipped int) {
	found, silent = map[string]string{}, map[int64][]seenTarget{}
	if len(idsByGroup) == 0 {
		return found, silent, 0
	}
	if !s.groups.waitSynced(ctx, seenTimeout) {
		s.log.Warn("executor view not received from the registry yet; asking only the executors known so far",
			"waited", seenTimeout)
	}
	targets := map[seenTarget][]string{}
	groupsOf := map[seenTarget][]int64{}
	for gid, ids := range idsByGroup {
		gctx, cancel := context.WithTimeout(ctx, seenTimeout) // the registry, when the group is not cached
		addrs, token, err := s.groups.addresses(gctx, gid)
		cancel()
		if err != nil {
			s.log.Warn("cannot ask the executors of a group which fires they have seen; fires logsvc does not know are re-fired",
				"group_id", gid, "fires", len(ids), "error", err)
			skipped++
			continue
		}
		for _, a := range addrs {
			t := seenTarget{a, token}
			targets[t] = append(targets[t], ids...)
			groupsOf[t] = append(groupsOf[t], gid)
		}
	}
	answers := s.askAll(ctx, targets, seenTimeout)
	for t, a := range answers {
		for _, id := range a.seen {
			found[id] = t.addr
		}
		switch {
		case a.err == nil:
		case connectionRefused(a.err):
			skipped++
			s.log.Warn("executor refused the connection: it is not running there; the fires logsvc does not know are re-fired",
				"executor", t.addr, "fires", len(targets[t]), "error", a.err)
		default:
			msg := "executor did not say which fires it has seen; those logsvc does not know go to it alone, or wait for it"
			if status.Code(a.err) == codes.Unimplemented {
				msg = "executor does not implement Seen (an agent older than the call); the fires logsvc does not know go to it alone, or wait for it"
			}
			s.log.Warn(msg, "executor", t.addr, "fires", len(targets[t]), "error", a.err)
			for _, gid := range groupsOf[t] {
				silent[gid] = append(silent[gid], t)
			}
		}
	}
	return found, silent, skipped
}

// seenAnswer is one executor's answer to Seen: the ids it has seen, and the error that stopped it
// answering about the rest (nil when it answered about all).
type seenAnswer struct {
	seen []string
	err  error
}

// askAll asks each target about its ids, seenParallel at once, each call bounded by timeout.
func (s *Service) askAll(ctx context.Context, targets map[seenTarget][]string, timeout time.Duration) map[seenTarget]seenAnswer {
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, seenParallel)
		out = make(map[seenTarget]seenAnswer, len(targets))
	)
	for t, ids := range targets {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			seen, err := s.askSeen(ctx, t, ids, timeout)
			mu.Lock()
			defer mu.Unlock()
			out[t] = seenAnswer{seen, err}
		}()
	}
	wg.Wait()
	return out
}

// doubt is a fire that executors which did not answer Seen may hold (cands); it goes to none of
// them until all but one have said they do not.
type doubt struct {
	f     *fire // a scheduled fire (owed) or a pending one (claimed)
	id    string
	cands []seenTarget
	found string // the address of an executor that said it holds it; empty until one has
}

// resolveDoubts asks the executors of fires in doubt again, with a deadline twice as long each
// time, until the misfire threshold has passed: a fire one of them holds is settled (it runs
// there); one that at most one executor may still hold is armed (pinned to that one); one still
// in doubt then is recorded UNKNOWN and not re-fired. It holds a dispatch of l, and stops when
// l is lost (the fires stay owed, or pending, for the next leader).
func (l *engine) resolveDoubts(ctx context.Context, ds []*doubt) {
	s := l.s
	defer l.end()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lost := l.lostChan()
	go func() {
		select {
		case <-lost:
			cancel()
		case <-ctx.Done():
		}
	}()
	giveUpAt := s.clk.Now().Add(s.cfg.MisfireThreshold)
	pause, timeout, rounds := doubtRetry, 2*seenTimeout, 0
	for len(ds) > 0 && s.clk.Now().Before(giveUpAt) {
		if s.wait(ctx, pause) != nil {
			return
		}
		pause = min(2*pause, time.Second)
		rounds++
		targets := map[seenTarget][]string{}
		for _, d := range ds {
			for _, c := range d.cands {
				targets[c] = append(targets[c], d.id)
			}
		}
		answers := s.askAll(ctx, targets, timeout)
		timeout *= 2
		if ctx.Err() != nil {
			return
		}
		rest := ds[:0]
		for _, d := range ds {
			var cands []seenTarget
			for _, c := range d.cands {
				a := answers[c]
				switch {
				case slices.Contains(a.seen, d.id):
					d.found = c.addr
				case a.err == nil || connectionRefused(a.err): // said it does not hold it, or is not running
				default:
					cands = append(cands, c)
				}
			}
			d.cands = cands
			switch {
			case d.found != "":
				s.rebuildRecord(ctx, d.f, d.found)
				l.doubtSettled(d)
			case len(d.cands) <= 1:
				l.doubtArmed(d)
			default:
				rest = append(rest, d)
			}
		}
		ds = rest
	}
	for _, d := range ds {
		addrs := make([]string, len(d.cands))
		for i, c := range d.cands {
			addrs[i] = c.addr
		}
		msg := fmt.Sprintf("takeover: executors %s did not say within %v (asked %d times) whether they hold the fire; it was not re-fired, so that it cannot run twice: their reports decide the run",
			strings.Join(addrs, ", "), s.cfg.MisfireThreshold, rounds+1)
		s.recordUnknown(ctx, d.f, msg)
		l.doubtSettled(d)
	}
}

// doubtSettled ends a fire in doubt that is not to be re-fired, as any fire leaving for good
// (settle): a scheduled one is no longer owed, a pending one's row goes once logsvc has the
// record just sent about it.
func (l *engine) doubtSettled(d *doubt) {
	l.s.settle(d.f)
}

// doubtArmed re-fires a fire that at most one executor may hold: pinned to that one, if any.
func (l *engine) doubtArmed(d *doubt) {
	if len(d.cands) == 1 {
		l.pin(d.f.key(), d.cands[0].addr)
	}
	switch k := d.f.kind; {
	case k.owed():
		l.ring.Add(ringEntry{JobID: d.f.job.ID, FireAt: d.f.fireMs, Value: d.f})
	case k.stored():
		l.claims.release(d.f.key())
		l.armPending(d.f, l.s.clk.Now().UnixMilli())
	default:
		panic(noKind(d.f))
	}
}

// recordUnknown records that the scheduler does not know whether a fire (its first shard) ran.
func (s *Service) recordUnknown(ctx context.Context, f *fire, msg string) {
	params := f.job.Params
	if f.params != nil {
		params = *f.params
	}
	shard, total := int32(0), int32(1)
	if f.shardTotal > 0 {
		shard, total = f.shard, f.shardTotal
	}
	id := f.triggerID(shard)
	rec := s.record(f, id, shard, total, "", params)
	rec.TriggerOutcome = logsv1.TriggerOutcome_TRIGGER_OUTCOME_UNKNOWN
	rec.TriggerMessage = msg
	s.log.WarnContext(ctx, "fire left unknown", "job_id", f.job.ID, "trigger_id", id, "reason", msg)
	s.metrics.gaveUp(outcomeUnknown)
	s.deliver(ctx, f, rec)
}

// rebuildRecord sends logsvc the trigger record of a fire the previous leader dispatched, as
// the executor at addr ("" when logsvc has the executor's reports) or logsvc says, rebuilt from
// its trigger id and its job: a leader killed with trigger records queued for logsvc loses them,
// and logsvc would keep the run without its group, trigger type and params. The record's
// outcome is OK (the fire reached an executor), its trigger time 0 (unknown), and it is marked
// rebuilt, so logsvc applies it only to a run no record made at dispatch has reached, and the
// executor's reports keep the run's status.
func (s *Service) rebuildRecord(ctx context.Context, f *fire, addr string) {
	params := f.job.Params
	if f.params != nil {
		params = *f.params
	}
	shard, total := int32(0), int32(1)
	if f.shardTotal > 0 {
		shard, total = f.shard, f.shardTotal
	}
	id := f.triggerID(shard)
	rec := s.record(f, id, shard, total, addr, params)
	rec.TriggerUnixMs = 0
	rec.TriggerOutcome = logsv1.TriggerOutcome_TRIGGER_OUTCOME_OK
	rec.Rebuilt = true
	rec.TriggerMessage = "rebuilt by the new leader at takeover: the previous leader dispatched this fire and its trigger record was lost with it; " +
		"the " + f.trigType.String() + " trigger type, params and executor group are the job's, the dispatch time is unknown"
	s.deliver(ctx, f, rec)
}

// askSeen asks one executor about ids, a chunk per call, each call bounded by timeout. It
// returns what the executor has seen, and the error that stopped it asking.
func (s *Service) askSeen(ctx context.Context, t seenTarget, ids []string, timeout time.Duration) ([]string, error) {
	cli, err := s.execs.client(t.addr)
	if err != nil {
		return nil, err
	}
	var seen []string
	for chunk := range slices.Chunk(ids, seenChunk) {
		cctx, cancel := context.WithTimeout(withAccessToken(ctx, t.token), timeout)
		resp, err := cli.Seen(cctx, &executorv1.SeenRequest{TriggerIds: chunk})
		cancel()
		if err != nil {
			return seen, err
		}
		if len(resp.GetSeenTriggerIds()) == 0 {
			continue
		}
		asked := make(map[string]struct{}, len(chunk))
		for _, id := range chunk {
			asked[id] = struct{}{}
		}
		for _, id := range resp.GetSeenTriggerIds() {
			if _, ok := asked[id]; ok { // an executor vouches only for the fires of its groups
				seen = append(seen, id)
			}
		}
	}
	return seen, nil
}
