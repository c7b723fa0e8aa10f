package scheduler

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
)

// TestSaveWarnings: a saved job hears that its group has no live executor, or none that runs
// its glue type (GLUE_GROOVY only on XXL-JOB executors), and nothing when the group can run it.
func TestSaveWarnings(t *testing.T) {
	t.Parallel()
	v := newRouteView(nil, slog.New(slog.DiscardHandler), nil)
	v.apply(&registryv1.WatchExecutorsResponse{Type: registryv1.ExecutorEventType_EXECUTOR_EVENT_TYPE_SNAPSHOT, Executors: []*registryv1.Executor{
		{AppName: "agents", InstanceId: "a", Address: "127.0.0.1:7501"},
		{AppName: "mixed", InstanceId: "a", Address: "127.0.0.1:7502"},
		{AppName: "mixed", InstanceId: "xxl-127.0.0.1:9999", Address: "http://127.0.0.1:9999/", Kind: registryv1.ExecutorKind_EXECUTOR_KIND_XXL_JOB},
	}})
	for id, app := range map[int64]string{1: "agents", 2: "mixed", 3: "empty"} {
		v.groups[id] = groupEntry{g: &registryv1.ExecutorGroup{Id: id, AppName: app, AddressType: registryv1.AddressType_ADDRESS_TYPE_AUTO}, fetched: time.Now()}
	}
	v.groups[4] = groupEntry{g: &registryv1.ExecutorGroup{Id: 4, AppName: "manual-xxl", AddressType: registryv1.AddressType_ADDRESS_TYPE_MANUAL,
		Addresses: []string{"http://10.0.0.7:9999/"}}, fetched: time.Now()}
	s := &Service{groups: v}
	groovy, bean, shell := glueGroovy, glueBean, glueTypeOf(schedulerv1.GlueType_GLUE_TYPE_GLUE_SHELL)
	for _, c := range []struct {
		group int64
		glue  glueType
		want  string // a part of the one warning; "" for none
	}{
		{1, bean, ""},
		{1, shell, ""},
		{1, groovy, `glue_type GLUE_GROOVY: no live executor of group "agents" runs Groovy`},
		{2, groovy, ""},
		{2, bean, ""},
		{3, bean, `executor group "empty" has no live executor now`},
		{3, groovy, `executor group "empty" has no live executor now`},
		{4, groovy, ""},
	} {
		got := s.saveWarnings(t.Context(), &jobRow{GroupID: c.group, GlueType: c.glue})
		switch {
		case c.want == "" && len(got) != 0:
			t.Errorf("group %d, %v: warnings %q, want none", c.group, c.glue, got)
		case c.want != "" && (len(got) != 1 || !strings.Contains(got[0], c.want)):
			t.Errorf("group %d, %v: warnings %q, want one containing %q", c.group, c.glue, got, c.want)
		}
	}
}
