package scheduler

import (
	"errors"
	"testing"

	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/apierr"
)

// TestCallerTriggerType: a trigger's caller may say MANUAL or API, or nothing (the call's
// default); any other trigger type is the scheduler's own and is refused, naming the field.
func TestCallerTriggerType(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   schedulerv1.TriggerType
		dflt triggerType
		want triggerType
		ok   bool
	}{
		{schedulerv1.TriggerType_TRIGGER_TYPE_UNSPECIFIED, triggerManual, triggerManual, true},
		{schedulerv1.TriggerType_TRIGGER_TYPE_UNSPECIFIED, triggerAPI, triggerAPI, true},
		{schedulerv1.TriggerType_TRIGGER_TYPE_MANUAL, triggerAPI, triggerManual, true},
		{schedulerv1.TriggerType_TRIGGER_TYPE_API, triggerManual, triggerAPI, true},
		{schedulerv1.TriggerType_TRIGGER_TYPE_CRON, triggerManual, 0, false},
		{schedulerv1.TriggerType_TRIGGER_TYPE_RETRY, triggerManual, 0, false},
		{schedulerv1.TriggerType_TRIGGER_TYPE_PARENT, triggerManual, 0, false},
		{schedulerv1.TriggerType_TRIGGER_TYPE_MISFIRE, triggerManual, 0, false},
		{schedulerv1.TriggerType(42), triggerManual, 0, false},
	} {
		got, err := callerTriggerType(c.in, c.dflt)
		var fe *apierr.FieldError
		switch {
		case c.ok && (err != nil || got != c.want):
			t.Errorf("%v (default %v): %v, %v; want %v", c.in, c.dflt, got, err, c.want)
		case !c.ok && (!errors.As(err, &fe) || fe.Field != "trigger_type"):
			t.Errorf("%v: error %v, want one naming trigger_type", c.in, err)
		}
	}
}
