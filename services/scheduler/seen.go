package scheduler

import (
	"context"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
)

// A new leader re-fires what the old one may have armed and not sent. logsvc knows a sent fire
// only once its trigger record or the executor's first report has arrived, and both streams lag
// under load; a fire sent just before the crash may be unknown to it and be re-fired, and with
// ROUND routing the re-fire can land on another executor, which has not seen that trigger id and
// runs it again. So after asking logsvc, the takeover asks the executors themselves (Seen).
const (
	// seenTimeout bounds one Seen call, and the wait for the executor view before the first: an
	// executor that does not answer within it is skipped, and its fires are re-fired as before.
	seenTimeout = time.Second
	// seenChunk is the most trigger ids in one Seen call (the executor's limit).
	seenChunk = 10_000
	// seenParallel bounds the executors asked at once.
	seenParallel = 16
)

// seenTarget is one executor as a group's fires reach it: its address and the group's token.
type seenTarget struct{ addr, token string }

// seenOnExecutors asks the executors each trigger id's group routes over now (idsByGroup: group
// id → trigger ids) which of those ids they have accepted, in one Seen call per executor per
// chunk of seenChunk ids, and returns the ids found. It does not fail: an executor that does not
// answer within seenTimeout, refuses, or does not know Seen (an agent older than the call) is
// skipped with a warning, and so is a group that cannot be read; their ids count as not found.
// skipped is the number of executors (and groups) skipped.
func (s *Service) seenOnExecutors(ctx context.Context, idsByGroup map[int64][]string) (found map[string]bool, skipped int) {
	found = map[string]bool{}
	if len(idsByGroup) == 0 {
		return found, 0
	}
	if !s.groups.waitSynced(ctx, seenTimeout) {
		s.log.Warn("executor view not received from the registry yet; asking only the executors known so far",
			"waited", seenTimeout)
	}
	targets := map[seenTarget][]string{}
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
		}
	}

	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, seenParallel)
	)
	for t, ids := range targets {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			seen, err := s.askSeen(ctx, t, ids)
			mu.Lock()
			defer mu.Unlock()
			for _, id := range seen {
				found[id] = true
			}
			if err != nil {
				skipped++
				msg := "executor did not say which fires it has seen; the fires logsvc does not know are re-fired, and may run again there"
				if status.Code(err) == codes.Unimplemented {
					msg = "executor does not implement Seen (an agent older than the call); the fires logsvc does not know are re-fired, and may run again there"
				}
				s.log.Warn(msg, "executor", t.addr, "fires", len(ids), "error", err)
			}
		}()
	}
	wg.Wait()
	return found, skipped
}

// askSeen asks one executor about ids, a chunk per call, each call bounded by seenTimeout. It
// returns what the executor has seen, and the error that stopped it asking.
func (s *Service) askSeen(ctx context.Context, t seenTarget, ids []string) ([]string, error) {
	cli, err := s.execs.client(t.addr)
	if err != nil {
		return nil, err
	}
	var seen []string
	for chunk := range slices.Chunk(ids, seenChunk) {
		cctx, cancel := context.WithTimeout(withAccessToken(ctx, t.token), seenTimeout)
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
