package registry_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/internal/etcdembed/etcdtest"
)

// TestAutoGroupShowsOnlineExecutorsWithLastSeen: an AUTO group lists its online executors, and
// an executor's last-seen time follows its lease's keepalives, not just the write of its key;
// a MANUAL group lists its typed addresses and no executors.
func TestAutoGroupShowsOnlineExecutorsWithLastSeen(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Client(t)
	c := serve(t, dbtest.Store{Name: "sqlite", Config: db.Config{DataDir: t.TempDir()}})
	ctx := t.Context()
	const app = "seen-app"
	auto, err := c.CreateExecutorGroup(ctx, &registryv1.CreateExecutorGroupRequest{Group: &registryv1.ExecutorGroup{AppName: app, Title: "auto"}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	lease := register(t, cli, app, "s1", "127.0.0.1:7201")
	waitAddresses(t, c, app, "127.0.0.1:7201")
	g, err := c.GetExecutorGroup(ctx, &registryv1.GetExecutorGroupRequest{Id: auto.Group.Id})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if len(g.Group.Executors) != 1 || g.Group.Executors[0].InstanceId != "s1" || g.Group.Executors[0].LastSeenTime == nil {
		t.Fatalf("AUTO group executors = %v, want s1 with a last-seen time", g.Group.Executors)
	}
	written := g.Group.Executors[0].LastSeenTime.AsTime()

	// Let time pass, then refresh the lease as an agent's keepalive does.
	select {
	case <-time.After(2500 * time.Millisecond):
	case <-ctx.Done():
	}
	if _, err := cli.KeepAliveOnce(ctx, lease); err != nil {
		t.Fatalf("keepalive: %v", err)
	}
	g, err = c.GetExecutorGroup(ctx, &registryv1.GetExecutorGroupRequest{Id: auto.Group.Id})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	seen := g.Group.Executors[0].LastSeenTime.AsTime()
	// The keepalive came 2.5 s after the write; etcd answers in whole seconds, so the last-seen
	// time is at least 1.5 s after the write, and never in the future.
	if seen.Before(written.Add(time.Second)) || seen.After(time.Now()) {
		t.Errorf("last seen %v after a keepalive 2.5s past the write at %v, want the keepalive's time", seen, written)
	}
	list, err := c.ListExecutors(ctx, &registryv1.ListExecutorsRequest{AppName: app})
	if err != nil || len(list.Executors) != 1 || list.Executors[0].LastSeenTime.AsTime().Before(written.Add(time.Second)) {
		t.Errorf("ListExecutors = %v, %v, want s1 last seen at its keepalive", list, err)
	}

	manual, err := c.CreateExecutorGroup(ctx, &registryv1.CreateExecutorGroupRequest{Group: &registryv1.ExecutorGroup{
		AppName: app + "-manual", Title: "manual", AddressType: registryv1.AddressType_ADDRESS_TYPE_MANUAL,
		ManualAddresses: []string{"10.1.0.2:9999", "10.1.0.1:9999"},
	}})
	if err != nil {
		t.Fatalf("create manual: %v", err)
	}
	if got := manual.Group; len(got.Executors) != 0 || len(got.Addresses) != 2 || got.Addresses[0] != "10.1.0.1:9999" {
		t.Errorf("MANUAL group = %v, want the sorted manual addresses and no executors", got)
	}
}

// TestGroupUpdateValidationNamesTheField: updates are checked like creates, and a bad update
// mask names itself.
func TestGroupUpdateValidationNamesTheField(t *testing.T) {
	t.Parallel()
	c := serve(t, dbtest.Store{Name: "sqlite", Config: db.Config{DataDir: t.TempDir()}})
	ctx := t.Context()
	cr, err := c.CreateExecutorGroup(ctx, &registryv1.CreateExecutorGroupRequest{Group: &registryv1.ExecutorGroup{AppName: "upd", Title: "t"}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	tests := []struct {
		name  string
		req   *registryv1.UpdateExecutorGroupRequest
		field string
	}{
		{"manual without addresses", &registryv1.UpdateExecutorGroupRequest{
			Group:      &registryv1.ExecutorGroup{Id: cr.Group.Id, AddressType: registryv1.AddressType_ADDRESS_TYPE_MANUAL},
			UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"address_type"}},
		}, "manual_addresses"},
		{"bad manual address", &registryv1.UpdateExecutorGroupRequest{
			Group: &registryv1.ExecutorGroup{Id: cr.Group.Id, AddressType: registryv1.AddressType_ADDRESS_TYPE_MANUAL,
				ManualAddresses: []string{"10.0.0.1:9999", "10.0.0.2:99999"}},
			UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"address_type", "manual_addresses"}},
		}, "manual_addresses[1]"},
		{"manual address with a space", &registryv1.UpdateExecutorGroupRequest{
			Group: &registryv1.ExecutorGroup{Id: cr.Group.Id, AddressType: registryv1.AddressType_ADDRESS_TYPE_MANUAL,
				ManualAddresses: []string{"10.0.0.1:9999", "no such host:9999"}},
			UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"address_type", "manual_addresses"}},
		}, "manual_addresses[1]"},
		{"XXL-JOB executor URL with a query", &registryv1.UpdateExecutorGroupRequest{
			Group: &registryv1.ExecutorGroup{Id: cr.Group.Id, AddressType: registryv1.AddressType_ADDRESS_TYPE_MANUAL,
				ManualAddresses: []string{"http://10.0.0.1:9999/", "http://10.0.0.2:9999/?x=1"}},
			UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"address_type", "manual_addresses"}},
		}, "manual_addresses[1]"},
		{"empty title", &registryv1.UpdateExecutorGroupRequest{
			Group:      &registryv1.ExecutorGroup{Id: cr.Group.Id},
			UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"title"}},
		}, "title"},
		{"read-only field in the mask", &registryv1.UpdateExecutorGroupRequest{
			Group:      &registryv1.ExecutorGroup{Id: cr.Group.Id},
			UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"update_time"}},
		}, "update_mask"},
	}
	for _, tt := range tests {
		_, err := c.UpdateExecutorGroup(ctx, tt.req)
		st, _ := status.FromError(err)
		if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tt.field) {
			t.Errorf("%s: err = %v, want InvalidArgument naming %s", tt.name, err, tt.field)
		}
	}
	// None of them changed the group.
	g, err := c.GetExecutorGroup(ctx, &registryv1.GetExecutorGroupRequest{Id: cr.Group.Id})
	if err != nil || g.Group.Title != "t" || g.Group.AddressType != registryv1.AddressType_ADDRESS_TYPE_AUTO {
		t.Errorf("group after refused updates = %v, %v, want it unchanged", g, err)
	}

	// XXL-JOB executors' URLs are manual addresses too, kept with the "/" the scheduler appends to.
	up, err := c.UpdateExecutorGroup(ctx, &registryv1.UpdateExecutorGroupRequest{
		Group: &registryv1.ExecutorGroup{Id: cr.Group.Id, AddressType: registryv1.AddressType_ADDRESS_TYPE_MANUAL,
			ManualAddresses: []string{"10.0.0.1:9999", "http://10.0.0.2:9999"}},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"address_type", "manual_addresses"}},
	})
	if err != nil || !slices.Equal(up.GetGroup().GetManualAddresses(), []string{"10.0.0.1:9999", "http://10.0.0.2:9999/"}) {
		t.Errorf("manual addresses with an XXL-JOB URL: %v, %v", up.GetGroup().GetManualAddresses(), err)
	}
}

// TestListWholeAppNameWithoutExecutors: the guard's credential lookup asks for one app name as a
// whole (ignoring case), not every group containing it, and without the live executors.
func TestListWholeAppNameWithoutExecutors(t *testing.T) {
	t.Parallel()
	cli := etcdtest.Client(t)
	c := serveWith(t, dbtest.Store{Name: "sqlite", Config: db.Config{DataDir: t.TempDir()}}, cli, nil)
	for _, app := range []string{"pay", "pay-batch", "repay"} {
		if _, err := c.CreateExecutorGroup(t.Context(), &registryv1.CreateExecutorGroupRequest{Group: &registryv1.ExecutorGroup{AppName: app, Title: app}}); err != nil {
			t.Fatal(err)
		}
	}
	register(t, cli, "pay", "p1", "127.0.0.1:41")
	waitAddresses(t, c, "pay", "127.0.0.1:41")
	for _, name := range []string{"pay", "PAY", "Pay"} {
		l, err := c.ListExecutorGroups(t.Context(), &registryv1.ListExecutorGroupsRequest{AppName: name, WholeAppName: true, WithoutExecutors: true})
		if err != nil || len(l.GetGroups()) != 1 || l.GetGroups()[0].GetAppName() != "pay" {
			t.Fatalf("whole app name %q: %v %v, want the group pay alone", name, l, err)
		}
		if g := l.GetGroups()[0]; len(g.GetExecutors()) != 0 || len(g.GetAddresses()) != 0 {
			t.Errorf("without executors: got %v", g)
		}
	}
	l, err := c.ListExecutorGroups(t.Context(), &registryv1.ListExecutorGroupsRequest{AppName: "pay"})
	if err != nil || len(l.GetGroups()) != 3 {
		t.Errorf("part of an app name: %v %v, want pay, pay-batch and repay", l, err)
	}
}
