package scheduler

import (
	"context"
	"strings"
	"sync"
	"time"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/internal/db"
)

// A pending fire's row leaves pending_fires only once logsvc has acknowledged the trigger
// records of the fire (one per shard sent, or the one that says why it went nowhere). Until
// then those records wait in the records stream's memory: a leader that died with them and had
// deleted the row would leave no trace of the fire, and logsvc would complete its run only
// RecordWait later, from the executor's result alone (a workflow's next node would wait that
// long). While its row waits the fire stays claimed, so this leader does not arm it again; a
// next leader finds the row and asks logsvc and the executors about it (takeOverPending).

// rowDeleteChunk is the most rows one DELETE names.
const rowDeleteChunk = 100

// rowWait is a pending fire's row waiting for the acknowledgement of its trigger records.
type rowWait struct {
	lead *engine // the leadership that claimed the row
	// out counts the fire's records queued and not acknowledged yet.
	out int
	// settled: the fire left the ring for good; the row goes once out is 0.
	settled bool
}

// settledRow is a row to delete, and the leadership whose claim on it then ends.
type settledRow struct {
	k    pendingKey
	lead *engine
}

// rowAcks deletes the rows of settled pending fires once logsvc has their trigger records:
// deliver tells it which records a row waits for (expect), the records stream which ones
// logsvc acknowledged (acked), and the fire's dispatch when it is over (settle). A loop deletes
// the rows that wait for nothing more, in batches. What it holds is bounded by the records
// queue: a record the queue refuses counts as acknowledged (it will never be).
type rowAcks struct {
	s *Service

	mu    sync.Mutex
	rows  map[pendingKey]*rowWait
	ids   map[string]pendingKey // a queued record's trigger id → the row waiting for it
	ready []settledRow          // rows to delete
	wake  chan struct{}         // cap 1: ready grew

	stopOnce sync.Once
	stopC    chan struct{}
	done     chan struct{}
}

func newRowAcks(s *Service) *rowAcks {
	return &rowAcks{s: s, rows: map[pendingKey]*rowWait{}, ids: map[string]pendingKey{},
		wake: make(chan struct{}, 1), stopC: make(chan struct{}), done: make(chan struct{})}
}

// expect notes that pending fire f's row waits for the record of trigger id, about to be
// queued; a fire of no leadership or not pending has no row to wait.
func (a *rowAcks) expect(f *fire, id string) {
	if f == nil || !f.kind.stored() || f.lead == nil {
		return
	}
	k := f.key()
	a.mu.Lock()
	defer a.mu.Unlock()
	w := a.rows[k]
	if w == nil {
		w = &rowWait{lead: f.lead}
		a.rows[k] = w
	}
	if _, ok := a.ids[id]; !ok { // a second record under the same id is covered by the first's ack
		a.ids[id] = k
		w.out++
	}
}

// acked takes the records logsvc acknowledged (the records stream's OnAck: it runs on the
// delivery goroutine, so it only moves rows to the delete loop).
func (a *rowAcks) acked(recs []*logsv1.TriggerRecord) {
	a.mu.Lock()
	if len(a.ids) == 0 {
		a.mu.Unlock()
		return
	}
	n := len(a.ready)
	for _, r := range recs {
		a.ackLocked(r.GetTriggerId())
	}
	grew := len(a.ready) > n
	a.mu.Unlock()
	if grew {
		a.signal()
	}
}

// dropped takes a record the records queue refused: its row waits for it no longer.
func (a *rowAcks) dropped(id string) {
	a.mu.Lock()
	n := len(a.ready)
	a.ackLocked(id)
	grew := len(a.ready) > n
	a.mu.Unlock()
	if grew {
		a.signal()
	}
}

func (a *rowAcks) ackLocked(id string) {
	k, ok := a.ids[id]
	if !ok {
		return
	}
	delete(a.ids, id)
	w := a.rows[k]
	if w.out--; w.out == 0 && w.settled {
		delete(a.rows, k)
		a.ready = append(a.ready, settledRow{k, w.lead})
	}
}

// settle marks pending fire f of leadership l as out of the ring for good (dispatched, given
// up or decided by a takeover): its row goes once its records are acknowledged, at once when
// none is waiting.
func (a *rowAcks) settle(l *engine, f *fire) {
	k := f.key()
	a.mu.Lock()
	w := a.rows[k]
	switch {
	case w == nil:
		a.ready = append(a.ready, settledRow{k, l})
	case w.out == 0:
		delete(a.rows, k)
		a.ready = append(a.ready, settledRow{k, w.lead})
	default:
		w.settled = true
	}
	a.mu.Unlock()
	a.signal()
}

// waiting counts the rows waiting for acknowledgements or their delete.
func (a *rowAcks) waiting() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.rows) + len(a.ready)
}

func (a *rowAcks) signal() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// start runs the delete loop until stop.
func (a *rowAcks) start() {
	go func() {
		defer close(a.done)
		for {
			select {
			case <-a.wake:
				a.deleteReady()
			case <-a.stopC:
				a.deleteReady() // what the records' last acknowledgements settled
				return
			}
		}
	}()
}

// stop ends the delete loop once it has deleted what is ready; call it after the records
// stream's last acknowledgement. It is idempotent.
func (a *rowAcks) stop() {
	a.stopOnce.Do(func() { close(a.stopC) })
	<-a.done
}

// deleteReady deletes the rows ready to go, a chunk per statement, and ends their claims. A
// chunk that cannot be deleted stays claimed, so this leader does not send its fires again; a
// next leader asks logsvc about them.
func (a *rowAcks) deleteReady() {
	a.mu.Lock()
	ready := a.ready
	a.ready = nil
	a.mu.Unlock()
	for start := 0; start < len(ready); start += rowDeleteChunk {
		chunk := ready[start:min(start+rowDeleteChunk, len(ready))]
		keys := make([]pendingKey, len(chunk))
		for i, r := range chunk {
			keys[i] = r.k
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := a.s.jobs.deletePendings(ctx, keys)
		cancel()
		if err != nil {
			a.s.log.Warn("dispatched fires left pending", "fires", len(keys), "first_trigger_id", keys[0].triggerID(), "error", err)
			continue
		}
		for _, r := range chunk {
			r.lead.claims.done(r.k)
		}
	}
}

// deletePendings removes settled pending fires, in one statement: on Postgres a join with the
// keys as arrays (a plan of one join, where an OR of one condition per key cost a plan that grew
// with the keys), elsewhere an OR of them.
func (s store) deletePendings(ctx context.Context, keys []pendingKey) error {
	if len(keys) == 0 {
		return nil
	}
	if s.db.Dialect() == db.Postgres {
		n := len(keys)
		jobs, fires, parents, wfs := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		shards, attempts, nodes := make([]int32, n), make([]int32, n), make([]int32, n)
		for i, k := range keys {
			jobs[i], fires[i], shards[i], attempts[i], parents[i], wfs[i], nodes[i] = k.job, k.fireMs, k.shard, k.attempt, k.parent, k.wf, k.node
		}
		if _, err := s.db.ExecContext(ctx, `DELETE FROM pending_fires p
			USING unnest($1::bigint[], $2::bigint[], $3::int[], $4::int[], $5::bigint[], $6::bigint[], $7::int[])
				AS u(job, fire, shard, attempt, parent, wf, node)
			WHERE p.job_id = u.job AND p.fire_ms = u.fire AND p.shard = u.shard AND p.attempt = u.attempt
				AND p.parent_job_id = u.parent AND p.wf_id = u.wf AND p.wf_node = u.node`,
			jobs, fires, shards, attempts, parents, wfs, nodes); err != nil {
			return storeErr(err, "delete %d dispatched pending fires", len(keys))
		}
		return nil
	}
	var q strings.Builder
	q.WriteString(`DELETE FROM pending_fires WHERE `)
	args := make([]any, 0, 7*len(keys))
	for i, k := range keys {
		if i > 0 {
			q.WriteString(` OR `)
		}
		n := len(args)
		q.WriteString(pendingMatch(n))
		args = append(args, pendingArgs(k)...)
	}
	if _, err := s.db.ExecContext(ctx, s.db.Q(q.String()), args...); err != nil {
		return storeErr(err, "delete %d dispatched pending fires", len(keys))
	}
	return nil
}
