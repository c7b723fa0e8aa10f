package scheduler

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/partition"
)

// A pending fire decided on one replica for a job of a partition another replica leads (a
// workflow's next node, whose job hashes elsewhere than the workflow) is handed to that leader
// at once, not left for its next pre-read (up to PreReadInterval later):
//
//   - the deciding transaction notifies the scheduler's channel (Postgres NOTIFY, delivered
//     only if the transaction commits) with the partitions and the fires (job and scheduled
//     time) it stored;
//   - every replica listens (listenHandoffs); the leader of such a partition wakes the
//     partition's hand-off loop (engine.handoffLoop), which reads those fires' rows and arms
//     them, as its pre-read would.
//
// A notification is a hint: pending_fires holds the truth, and the pre-read still arms what a
// lost notification (a listener reconnecting, a leader changing) leaves behind. A replica that
// starts listening again has every engine read its whole partition once.

// handoffChannel names the scheduler's notification channel (db.DB.Channel).
const handoffChannel = "pending"

// maxHandoffPayload bounds a notification's payload (Postgres refuses 8000 bytes or more); a
// partition whose fires do not fit is named alone, and its leader reads all its due fires.
const maxHandoffPayload = 7000

// notifyPending queues to b, for the transaction that stores fs, a notification to the leader
// of each partition of fs's jobs that this replica does not lead, naming the fires stored for
// it. A payload is "<partition>:<job>.<scheduled ms>,…" or "<partition>:" for all of the
// partition's due fires.
func (s *Service) notifyPending(b *db.Batch, fs []dueFire) {
	st := s.wfStore()
	if st.db.Dialect() != db.Postgres || len(fs) == 0 {
		return
	}
	n := s.partCount()
	if n == 0 {
		return
	}
	byPart := map[int][]fireRef{}
	var parts []int
	for _, d := range fs {
		id := d.f.job.ID
		if s.engineOf(id) != nil {
			continue // led here: armed after the commit (armOnLeader)
		}
		p := partition.PartitionOf(id, n)
		if _, ok := byPart[p]; !ok {
			parts = append(parts, p)
		}
		byPart[p] = append(byPart[p], fireRef{job: id, fireMs: d.f.fireMs})
	}
	if len(parts) == 0 {
		return
	}
	payloads := make([]string, 0, len(parts))
	for _, p := range parts {
		var b strings.Builder
		b.WriteString(strconv.Itoa(p))
		b.WriteByte(':')
		seen := map[fireRef]bool{}
		for _, r := range byPart[p] {
			if seen[r] {
				continue
			}
			if len(seen) > 0 {
				b.WriteByte(',')
			}
			seen[r] = true
			b.WriteString(strconv.FormatInt(r.job, 10))
			b.WriteByte('.')
			b.WriteString(strconv.FormatInt(r.fireMs, 10))
		}
		pl := b.String()
		if len(pl) > maxHandoffPayload {
			pl = strconv.Itoa(p) + ":"
		}
		payloads = append(payloads, pl)
	}
	b.Queue(func(err error) error {
		return storeErr(err, "notify %d partitions' leaders of pending fires", len(payloads))
	},
		`SELECT pg_notify($1, x) FROM unnest($2::text[]) AS x`, st.db.Channel(handoffChannel), payloads)
}

// fireRef names a pending fire's rows: its job and scheduled time (its shards, attempts and
// workflow nodes share them).
type fireRef struct{ job, fireMs int64 }

// parseHandoff reads a notification's payload: its partition, and its fires (nil: all).
func parseHandoff(payload string) (part int, fires []fireRef, ok bool) {
	p, list, found := strings.Cut(payload, ":")
	if !found {
		return 0, nil, false
	}
	part, err := strconv.Atoi(p)
	if err != nil || part < 0 {
		return 0, nil, false
	}
	if list == "" {
		return part, nil, true
	}
	for _, f := range strings.Split(list, ",") {
		j, ms, found := strings.Cut(f, ".")
		job, err1 := strconv.ParseInt(j, 10, 64)
		fireMs, err2 := strconv.ParseInt(ms, 10, 64)
		if !found || err1 != nil || err2 != nil {
			return 0, nil, false
		}
		fires = append(fires, fireRef{job: job, fireMs: fireMs})
	}
	return part, fires, true
}

// listenHandoffs listens for hand-offs (Postgres) until ctx ends, listening again after a
// failure; each time it starts listening every engine reads its whole partition once.
func (s *Service) listenHandoffs(ctx context.Context) {
	st := s.wfStore()
	if st.db.Dialect() != db.Postgres {
		return
	}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := st.db.Listen(ctx, st.db.Channel(handoffChannel), func() {
			backoff = 100 * time.Millisecond
			s.mu.Lock()
			defer s.mu.Unlock()
			for _, l := range s.engines {
				l.handoff.add(nil)
			}
		}, s.onHandoff)
		if err == nil {
			return
		}
		s.log.Warn("listening for pending fires handed over stopped; listening again", "error", err)
		if s.wait(ctx, backoff) != nil {
			return
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// onHandoff wakes the hand-off loop of the notified partition when this replica leads it.
func (s *Service) onHandoff(payload string) {
	p, fires, ok := parseHandoff(payload)
	if !ok {
		s.log.Warn("unreadable pending fire hand-off ignored", "payload", payload)
		return
	}
	s.mu.Lock()
	l := s.engines[p]
	s.mu.Unlock()
	if l != nil {
		l.handoff.add(fires)
	}
}

// handoffs are the pending fires an engine was told of and has not read yet.
type handoffs struct {
	mu    sync.Mutex
	fires map[fireRef]struct{}
	all   bool
	wake  chan struct{} // holds a token while some are waiting
}

func newHandoffs() *handoffs { return &handoffs{wake: make(chan struct{}, 1)} }

// add records fires (nil: the whole partition's) and wakes the loop.
func (h *handoffs) add(fires []fireRef) {
	if h == nil {
		return // an engine built without hand-offs (tests)
	}
	h.mu.Lock()
	if fires == nil {
		h.all = true
	} else if !h.all {
		if h.fires == nil {
			h.fires = map[fireRef]struct{}{}
		}
		for _, r := range fires {
			h.fires[r] = struct{}{}
		}
	}
	h.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// take returns and forgets what was recorded: the fires, or all.
func (h *handoffs) take() (fires []fireRef, all bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	all = h.all
	if !all {
		fires = make([]fireRef, 0, len(h.fires))
		for r := range h.fires {
			fires = append(fires, r)
		}
	}
	h.all, h.fires = false, nil
	return fires, all
}

// handoffLoop arms the pending fires handed to this partition as they are announced, until
// ctx ends. It runs once the takeover is done (before it, the takeover decides what a previous
// leader sent).
func (l *engine) handoffLoop(ctx context.Context) {
	s := l.s
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.handoff.wake:
		}
		refs, all := l.handoff.take()
		if !all && len(refs) == 0 {
			continue
		}
		start := time.Now() // a measurement: a read older than claimGone/2 is not acted on
		horizon := s.clk.Now().Add(s.cfg.PreReadWindow).UnixMilli()
		var (
			fires []*fire
			dues  []int64
			err   error
		)
		if all {
			fires, dues, err = s.jobs.duePending(ctx, s.wfStore().db, l.part, horizon, s.cfg.PreReadBatch)
		} else {
			fires, dues, err = s.jobs.duePendingOf(ctx, s.wfStore().db, refs, horizon)
		}
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("pending fires handed over not read; the pre-read arms them", "partition", l.part, "error", err)
			}
			continue
		}
		if age := time.Since(start); age >= claimGone/2 {
			s.log.Warn("pending fires handed over read too long ago not armed; the pre-read arms them", "partition", l.part,
				"fires", len(fires), "read_ago", age)
			continue
		}
		for i, f := range fires {
			l.armPending(f, dues[i])
		}
	}
}
