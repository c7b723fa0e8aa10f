package scheduler

import (
	"context"
	"fmt"
)

// saveWarnings says what a saved job's executor group cannot do for it now, so that the person
// saving it hears of it at once rather than at its first fire: that the group has no live
// executor, or none that runs the job's glue type. GLUE_GROOVY runs only on XXL-JOB executors
// (jobmesh agents refuse it); every other type runs on both kinds. The live view is a moment old
// and executors come and go, so these are warnings, not refusals: the job is saved all the same.
func (s *Service) saveWarnings(ctx context.Context, j *jobRow) []string {
	if s.groups == nil {
		return nil
	}
	g, err := s.groups.group(ctx, j.GroupID)
	if err != nil {
		return nil
	}
	addrs, _, err := s.groups.addresses(ctx, j.GroupID)
	if err != nil {
		return nil
	}
	if len(addrs) == 0 {
		return []string{fmt.Sprintf("executor group %q has no live executor now: the job's fires fail until one registers", g.GetAppName())}
	}
	if j.GlueType != glueGroovy {
		return nil
	}
	for _, a := range addrs {
		if isXxlAddress(a) {
			return nil
		}
	}
	return []string{fmt.Sprintf("glue_type GLUE_GROOVY: no live executor of group %q runs Groovy; only XXL-JOB executors (xxl-job-core) do, and jobmesh agents refuse it", g.GetAppName())}
}
