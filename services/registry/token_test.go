package registry_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/internal/etcdembed/etcdtest"
	"github.com/jobmesh/jobmesh/services/registry"
)

// TestAccessTokenOnlyServicesReadInClear: every read masks a group's access token unless
// Config.RevealTokens says the caller is a service (in a stack, the guard's internal caller; here
// a metadata key stands in for it). An update that sends the masked value back, as the console's
// edit form does, keeps the token; one that sends a new token rotates it; "****" cannot be
// created as a token.
func TestAccessTokenOnlyServicesReadInClear(t *testing.T) {
	t.Parallel()
	isService := func(ctx context.Context) bool {
		md, _ := metadata.FromIncomingContext(ctx)
		return slices.Contains(md.Get("x-test-caller"), "service")
	}
	c := serveConfig(t, dbtest.Store{Name: "sqlite", Config: db.Config{DataDir: t.TempDir()}}, etcdtest.Client(t),
		registry.Config{RevealTokens: isService})
	person := context.Background()
	service := metadata.AppendToOutgoingContext(context.Background(), "x-test-caller", "service")

	cr, err := c.CreateExecutorGroup(person, &registryv1.CreateExecutorGroupRequest{Group: &registryv1.ExecutorGroup{
		AppName: "secured", Title: "Secured", AccessToken: "first-token",
	}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if got := cr.GetGroup().GetAccessToken(); got != registry.MaskedToken {
		t.Errorf("create answer's token = %q, want %q", got, registry.MaskedToken)
	}
	id := cr.GetGroup().GetId()
	// tokens reads the group's token as a person (Get and List) and as a service.
	tokens := func() (get, list, svc string) {
		t.Helper()
		g, err := c.GetExecutorGroup(person, &registryv1.GetExecutorGroupRequest{Id: id})
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		l, err := c.ListExecutorGroups(person, &registryv1.ListExecutorGroupsRequest{AppName: "secured"})
		if err != nil || len(l.GetGroups()) != 1 {
			t.Fatalf("list: %v %v, want one group", l, err)
		}
		s, err := c.GetExecutorGroup(service, &registryv1.GetExecutorGroupRequest{Id: id})
		if err != nil {
			t.Fatalf("get as a service: %v", err)
		}
		return g.GetGroup().GetAccessToken(), l.GetGroups()[0].GetAccessToken(), s.GetGroup().GetAccessToken()
	}
	check := func(when, wantPerson, wantService string) {
		t.Helper()
		get, list, svc := tokens()
		if get != wantPerson || list != wantPerson || svc != wantService {
			t.Errorf("%s: token read by a person (get %q, list %q), by a service %q; want %q and %q", when, get, list, svc, wantPerson, wantService)
		}
	}
	check("created", registry.MaskedToken, "first-token")

	update := func(g *registryv1.ExecutorGroup, paths ...string) {
		t.Helper()
		g.Id = id
		if _, err := c.UpdateExecutorGroup(person, &registryv1.UpdateExecutorGroupRequest{Group: g, UpdateMask: &fieldmaskpb.FieldMask{Paths: paths}}); err != nil {
			t.Fatalf("update %v: %v", paths, err)
		}
	}
	update(&registryv1.ExecutorGroup{Title: "Renamed", AccessToken: registry.MaskedToken}, "title", "access_token")
	check("title changed with the masked token sent back", registry.MaskedToken, "first-token")
	update(&registryv1.ExecutorGroup{AccessToken: "second-token"}, "access_token")
	check("rotated", registry.MaskedToken, "second-token")
	update(&registryv1.ExecutorGroup{AccessToken: ""}, "access_token")
	check("cleared", "", "")

	_, err = c.CreateExecutorGroup(person, &registryv1.CreateExecutorGroupRequest{Group: &registryv1.ExecutorGroup{
		AppName: "masked", Title: "Masked", AccessToken: registry.MaskedToken,
	}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "access_token") {
		t.Errorf("create with the mask as token: err = %v, want InvalidArgument naming access_token", err)
	}
}

// TestAccessTokenMaskedWithoutRevealTokens: a registry not told who services are reveals
// tokens to no one.
func TestAccessTokenMaskedWithoutRevealTokens(t *testing.T) {
	t.Parallel()
	c := serve(t, dbtest.Store{Name: "sqlite", Config: db.Config{DataDir: t.TempDir()}})
	cr, err := c.CreateExecutorGroup(context.Background(), &registryv1.CreateExecutorGroupRequest{Group: &registryv1.ExecutorGroup{
		AppName: "secured", Title: "Secured", AccessToken: "a-token",
	}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	g, err := c.GetExecutorGroup(metadata.AppendToOutgoingContext(context.Background(), "x-test-caller", "service"),
		&registryv1.GetExecutorGroupRequest{Id: cr.GetGroup().GetId()})
	if err != nil || g.GetGroup().GetAccessToken() != registry.MaskedToken {
		t.Errorf("get: token %q (%v), want %q", g.GetGroup().GetAccessToken(), err, registry.MaskedToken)
	}
}
