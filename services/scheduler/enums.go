package scheduler

import (
	"strconv"
	"strings"

	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/route"
	"github.com/jobmesh/jobmesh/services/scheduler/internal/schedule"
)

// The scheduler's own enums for what its tables hold. Their numbers are the stored values,
// which are the API's (rows written before these types existed hold the proto numbers), and
// they are converted from and to the proto types at the API edge (fromProto, toProto) and
// where a fire meets a store row (pending_fires). SQL names them through sqlConst, never as a
// bare number. A job's schedule type is schedule.Type, the schedule package's own, and its
// routing strategy route.Strategy, the route package's.

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

// String names the trigger type as the API does, without its prefix (CRON, RETRY, ...).
func (t triggerType) String() string { return strings.TrimPrefix(t.proto().String(), "TRIGGER_TYPE_") }

// sqlConst renders one of the package's enum constants as an SQL literal, for query text that
// must name it (a partial index's condition, a query's fixed filter): the SQL names the
// constant, the value is its stored number.
func sqlConst[E ~int | ~int32](e E) string { return strconv.FormatInt(int64(e), 10) }

// misfireStrategyOf converts the API's misfire strategy; an unknown value keeps its number, for
// validation to refuse, and an unset one stays unset (defaults sets DO_NOTHING).
func misfireStrategyOf(m schedulerv1.MisfireStrategy) misfireStrategy { return misfireStrategy(m) }

// proto converts the strategy for the API.
func (m misfireStrategy) proto() schedulerv1.MisfireStrategy { return schedulerv1.MisfireStrategy(m) }

// routeOf converts the API's routing strategy (route.Strategy numbers its strategies as the API
// does); an unknown value keeps its number, for validation to refuse.
func routeOf(r schedulerv1.RouteStrategy) route.Strategy { return route.Strategy(r) }

// routeProto converts a job's routing strategy for the API.
func routeProto(r route.Strategy) schedulerv1.RouteStrategy { return schedulerv1.RouteStrategy(r) }

// blockStrategy is what an executor does with a fire of a job that is still running, as
// jobs.block_strategy stores it.
type blockStrategy int32

const (
	// blockSerial queues the fire behind the running one.
	blockSerial blockStrategy = 1
	// blockDiscardLater refuses the fire while the job runs.
	blockDiscardLater blockStrategy = 2
	// blockCoverEarly kills the running fire and runs the new one.
	blockCoverEarly blockStrategy = 3
)

// blockStrategyOf converts the API's block strategy; an unknown value keeps its number, for
// validation to refuse.
func blockStrategyOf(b schedulerv1.BlockStrategy) blockStrategy { return blockStrategy(b) }

// proto converts the strategy for the API and the executors.
func (b blockStrategy) proto() schedulerv1.BlockStrategy { return schedulerv1.BlockStrategy(b) }

// retryBackoff is how the waits between a job's retries grow, as jobs.retry_backoff stores it.
type retryBackoff int32

const (
	// retryNoWait retries at once.
	retryNoWait retryBackoff = 1
	// retryFixed waits the job's retry interval before each retry.
	retryFixed retryBackoff = 2
	// retryExponential doubles the wait after each retry, up to maxBackoff.
	retryExponential retryBackoff = 3
)

// retryBackoffOf converts the API's retry backoff; an unknown value keeps its number, for
// validation to refuse.
func retryBackoffOf(r schedulerv1.RetryBackoff) retryBackoff { return retryBackoff(r) }

// proto converts the backoff for the API.
func (r retryBackoff) proto() schedulerv1.RetryBackoff { return schedulerv1.RetryBackoff(r) }

// glueType is what a job runs, as jobs.glue_type and glue_versions.glue_type store it: a
// handler registered in the executor (BEAN) or a source the job carries (the GLUE types).
type glueType int32

const (
	// glueBean runs the executor's handler of the job's name.
	glueBean glueType = 1
	// glueGroovy runs the job's Groovy source; only XXL-JOB executors can.
	glueGroovy glueType = 2
)

// glueTypeOf converts the API's glue type; an unknown value keeps its number, for validation to
// refuse.
func glueTypeOf(g schedulerv1.GlueType) glueType { return glueType(g) }

// proto converts the glue type for the API and the executors.
func (g glueType) proto() schedulerv1.GlueType { return schedulerv1.GlueType(g) }

// String names the glue type as the API does, without its prefix (BEAN, GLUE_SHELL, ...).
func (g glueType) String() string { return strings.TrimPrefix(g.proto().String(), "GLUE_TYPE_") }

// isScript reports whether the job carries its source: every set glue type but BEAN.
func (g glueType) isScript() bool { return g != glueBean && g != 0 }
