package scheduler

import (
	"strconv"

	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/schedule"
)

// The scheduler's own enums for what its tables hold. Their numbers are the stored values,
// which are the API's (rows written before these types existed hold the proto numbers), and
// they are converted from and to the proto types at the API edge (fromProto, toProto) and
// where a fire meets a store row (pending_fires). SQL names them through sqlConst, never as a
// bare number. A job's schedule type is schedule.Type, the schedule package's own.

// jobStatus is a job's status as jobs.status stores it.
type jobStatus int32

const (
	// jobStatusUnset is a status not given (the API then defaults to jobStopped).
	jobStatusUnset jobStatus = 0
	// jobStopped: the job has no fires.
	jobStopped jobStatus = 1
	// jobRunning: the job fires on its schedule; only running jobs are due (store.due).
	jobRunning jobStatus = 2
)

// jobStatusOf converts the API's status; an unknown value keeps its number, for validation to
// refuse.
func jobStatusOf(s schedulerv1.JobStatus) jobStatus { return jobStatus(s) }

// proto converts the status for the API.
func (s jobStatus) proto() schedulerv1.JobStatus { return schedulerv1.JobStatus(s) }

// String names the status as the API does.
func (s jobStatus) String() string { return s.proto().String() }

// scheduleTypeOf converts the API's schedule type; an unknown value keeps its number, for
// validation to refuse.
func scheduleTypeOf(t schedulerv1.ScheduleType) schedule.Type { return schedule.Type(t) }

// scheduleTypeProto converts a job's schedule type for the API.
func scheduleTypeProto(t schedule.Type) schedulerv1.ScheduleType { return schedulerv1.ScheduleType(t) }

// triggerType is why a fire runs, as pending_fires.trigger_type stores it.
type triggerType int32

const (
	// triggerManual: a console user's trigger.
	triggerManual triggerType = 1
	// triggerCron: the job's schedule.
	triggerCron triggerType = 2
	// triggerRetry: the retry of a failed run.
	triggerRetry triggerType = 3
	// triggerParent: a child job's run after its parent's success.
	triggerParent triggerType = 4
	// triggerAPI: a trigger through the API.
	triggerAPI triggerType = 5
	// triggerMisfire: FIRE_ONCE_NOW's one run for fires later than the misfire threshold.
	triggerMisfire triggerType = 6
)

// triggerTypeOf converts a fire's trigger type for the store.
func triggerTypeOf(t schedulerv1.TriggerType) triggerType { return triggerType(t) }

// proto converts a stored trigger type for a fire.
func (t triggerType) proto() schedulerv1.TriggerType { return schedulerv1.TriggerType(t) }

// sqlConst renders one of the package's enum constants as an SQL literal, for query text that
// must name it (a partial index's condition, a query's fixed filter): the SQL names the
// constant, the value is its stored number.
func sqlConst[E ~int | ~int32](e E) string { return strconv.FormatInt(int64(e), 10) }
