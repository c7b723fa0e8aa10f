package logsvc

import (
	"context"
	"log/slog"
	"strconv"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/internal/seal"
)

// delivery checks one executor's deliveries: each result and line must carry the delivery token
// the scheduler sealed for its fire (Config.DeliverySecret) and sent only to the executor it
// dispatched the fire to. The token is a capability for one fire, not bound to a group: a MANUAL
// group may name another group's executor (with that group's token), whose credential is its
// own group's. What fails is left out of the batch: results are refused in the ack (the executor
// then drops them), lines dropped, and both logged.
type delivery struct {
	key   *seal.Key // nil: every delivery fails
	group string    // the executor's, for logs
	app   string
	log   *slog.Logger
}

// deliveryOf returns the check of a stream's deliveries: nil for a service's stream.
func (s *Service) deliveryOf(ctx context.Context) *delivery {
	if s.cfg.Executor == nil {
		return nil
	}
	gid, app, ok := s.cfg.Executor(ctx)
	if !ok {
		return nil
	}
	return &delivery{key: s.delivery, group: strconv.FormatInt(gid, 10), app: app, log: s.log}
}

// filterResults removes the results without their fire's token from req and returns their ids.
func (d *delivery) filterResults(req *logsv1.IngestResultsRequest) (refused []string) {
	kept := req.Results[:0]
	for _, r := range req.Results {
		if d.key.Valid(r.GetDeliveryToken(), r.GetTriggerId()) {
			kept = append(kept, r)
			continue
		}
		refused = append(refused, r.GetTriggerId())
	}
	clear(req.Results[len(kept):])
	req.Results = kept
	if len(refused) > 0 {
		d.log.Warn("executor results refused: not fires dispatched to this executor (no valid delivery token)",
			"app", d.app, "group_id", d.group, "count", len(refused), "first_trigger_id", refused[0])
	}
	return refused
}

// filterLines removes the lines without their fire's token from req.
func (d *delivery) filterLines(req *logsv1.IngestLogLinesRequest) {
	kept := req.Lines[:0]
	var first string
	for _, l := range req.Lines {
		if d.key.Valid(l.GetDeliveryToken(), l.GetTriggerId()) {
			kept = append(kept, l)
		} else if first == "" {
			first = l.GetTriggerId()
		}
	}
	if n := len(req.Lines) - len(kept); n > 0 {
		d.log.Warn("executor log lines dropped: not fires dispatched to this executor (no valid delivery token)",
			"app", d.app, "group_id", d.group, "count", n, "first_trigger_id", first)
	}
	clear(req.Lines[len(kept):])
	req.Lines = kept
}
