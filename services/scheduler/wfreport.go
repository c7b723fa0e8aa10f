package scheduler

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
)

const (
	// dayMs is a UTC day in milliseconds.
	dayMs = int64(24 * time.Hour / time.Millisecond)
	// maxReportDays bounds a CountWorkflowInstances range, as logsvc's reports are.
	maxReportDays = 366
)

// CountWorkflowInstances implements WorkflowService: instances by status per UTC day of their
// scheduled time, read from the instances table through its scheduled_ms index.
func (s *Service) CountWorkflowInstances(ctx context.Context, req *schedulerv1.CountWorkflowInstancesRequest) (*schedulerv1.CountWorkflowInstancesResponse, error) {
	var bad apierr.Fields
	start, err := time.Parse(time.DateOnly, req.GetStartDate())
	if err != nil {
		bad.Add("start_date", "want YYYY-MM-DD, got %q", req.GetStartDate())
	} else if start.Year() < 1970 {
		bad.Add("start_date", "want 1970-01-01 or later, got %s", req.GetStartDate())
	}
	end, err := time.Parse(time.DateOnly, req.GetEndDate())
	if err != nil {
		bad.Add("end_date", "want YYYY-MM-DD, got %q", req.GetEndDate())
	}
	days := int(end.Sub(start)/(24*time.Hour)) + 1
	if len(bad) == 0 {
		switch {
		case days < 1:
			bad.Add("end_date", "before start_date")
		case days > maxReportDays+1:
			bad.Add("end_date", "at most %d days after start_date, got %d", maxReportDays, days-1)
		}
	}
	for i, g := range req.GetGroupIds() {
		if g <= 0 {
			bad.Add(fmt.Sprintf("group_ids[%d]", i), "want a positive id, got %d", g)
		}
	}
	if err := bad.Err(); err != nil {
		return nil, err
	}
	first := start.UnixMilli() / dayMs
	counts, err := s.wfStore().countInstances(ctx, first, first+int64(days), req.GetGroupIds())
	if err != nil {
		return nil, err
	}
	resp := &schedulerv1.CountWorkflowInstancesResponse{Days: make([]*schedulerv1.WorkflowInstanceDay, days)}
	for i := range resp.Days {
		c := counts[first+int64(i)]
		if c == nil {
			c = &schedulerv1.WorkflowInstanceCounts{}
		}
		resp.Days[i] = &schedulerv1.WorkflowInstanceDay{Date: start.AddDate(0, 0, i).Format(time.DateOnly), Counts: c}
	}
	return resp, nil
}

// countInstances counts the instances scheduled in days [fromDay, toDay) (UTC day numbers) by
// day and status, those of workflows in groups only when groups is not empty.
func (s store) countInstances(ctx context.Context, fromDay, toDay int64, groups []int64) (map[int64]*schedulerv1.WorkflowInstanceCounts, error) {
	q := `SELECT i.scheduled_ms / ` + strconv.FormatInt(dayMs, 10) + `, i.status, COUNT(*) FROM workflow_instances i`
	args := []any{fromDay * dayMs, toDay * dayMs}
	if len(groups) > 0 {
		ph := make([]string, len(groups))
		for i, g := range groups {
			args = append(args, g)
			ph[i] = "$" + strconv.Itoa(len(args))
		}
		q += ` JOIN workflows w ON w.id = i.workflow_id AND w.group_id IN (` + strings.Join(ph, ", ") + `)`
	}
	q += ` WHERE i.scheduled_ms >= $1 AND i.scheduled_ms < $2 GROUP BY 1, 2`
	rows, err := s.db.QueryContext(ctx, s.db.Q(q), args...)
	if err != nil {
		return nil, storeErr(err, "count workflow instances")
	}
	defer rows.Close()
	out := map[int64]*schedulerv1.WorkflowInstanceCounts{}
	for rows.Next() {
		var day, n int64
		var st instStatus
		if err := rows.Scan(&day, &st, &n); err != nil {
			return nil, storeErr(err, "count workflow instances")
		}
		c := out[day]
		if c == nil {
			c = &schedulerv1.WorkflowInstanceCounts{}
			out[day] = c
		}
		switch st {
		case instRunning:
			c.Running += n
		case instSuccess:
			c.Success += n
		case instFailed:
			c.Failed += n
		case instKilled:
			c.Killed += n
		case instSkipped:
			c.Skipped += n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, storeErr(err, "count workflow instances")
	}
	return out, nil
}
