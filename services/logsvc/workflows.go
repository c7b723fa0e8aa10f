package logsvc

import (
	"context"

	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
)

// Workflows counts workflow instances for reports and the dashboard. The scheduler owns
// instances and counts them (SchedulerWorkflows): logsvc never reads its tables.
type Workflows interface {
	// CountInstances counts the instances scheduled in the UTC days from start to end
	// ("YYYY-MM-DD", inclusive) by day and status, of the groups' workflows (all when groups is
	// empty).
	CountInstances(ctx context.Context, start, end string, groups []int64) (map[string]*schedulerv1.WorkflowInstanceCounts, error)
}

// SchedulerWorkflows counts instances through the scheduler's WorkflowService.
type SchedulerWorkflows struct {
	// Client reaches the scheduler.
	Client schedulerv1.WorkflowServiceClient
}

// CountInstances implements Workflows.
func (w SchedulerWorkflows) CountInstances(ctx context.Context, start, end string, groups []int64) (map[string]*schedulerv1.WorkflowInstanceCounts, error) {
	resp, err := w.Client.CountWorkflowInstances(ctx, &schedulerv1.CountWorkflowInstancesRequest{StartDate: start, EndDate: end, GroupIds: groups})
	if err != nil {
		return nil, err
	}
	out := make(map[string]*schedulerv1.WorkflowInstanceCounts, len(resp.GetDays()))
	for _, d := range resp.GetDays() {
		out[d.GetDate()] = d.GetCounts()
	}
	return out, nil
}

// workflowDays counts the instances of the days from start to end for a report or the
// dashboard; nil, logged, when the scheduler cannot be asked (the run counts are answered
// without them).
func (s *Service) workflowDays(ctx context.Context, start, end string, groups []int64) map[string]*schedulerv1.WorkflowInstanceCounts {
	if s.cfg.Workflows == nil {
		return nil
	}
	days, err := s.cfg.Workflows.CountInstances(ctx, start, end, groups)
	if err != nil {
		s.log.WarnContext(ctx, "cannot count workflow instances", "error", err)
		return nil
	}
	return days
}
