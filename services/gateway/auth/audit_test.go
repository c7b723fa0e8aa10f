package auth_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	authv1 "github.com/jobmesh/jobmesh/gen/jobmesh/auth/v1"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
)

// TestAuditEventsFilter: on both stores the audit list filters by user (contains, any case),
// action (the whole RPC name), resource (contains, as typed: % and _ match only themselves) and
// time range, pages by number with the total of matching events, and refuses bad filters with
// InvalidArgument naming the field.
func TestAuditEventsFilter(t *testing.T) {
	t.Parallel()
	const (
		createJob = "/jobmesh.scheduler.v1.JobService/CreateJob"
		updateJob = "/jobmesh.scheduler.v1.JobService/UpdateJob"
		login     = "/jobmesh.auth.v1.AuthService/Login"
	)
	t0 := time.Date(2027, 3, 1, 8, 0, 0, 0, time.UTC)
	at := func(h int) *timestamppb.Timestamp { return timestamppb.New(t0.Add(time.Duration(h) * time.Hour)) }
	for _, st := range dbtest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, st)
			internal := e.as(internalToken)
			for _, ev := range []*authv1.AuditEvent{
				{Time: at(0), Username: "admin", Action: createJob, Resource: "jobs/1"},
				{Time: at(1), Username: "Otto", Action: updateJob, Resource: "jobs/12"},
				{Time: at(2), Username: "otto", Action: createJob, Resource: "jobs/2"},
				{Time: at(3), Username: "vera_x", Action: login, Resource: "users/vera_x"},
				{Time: at(4), Username: "vera", Action: login, Resource: "groups/50%"},
				{Time: at(5), Username: "vera", Action: login, Resource: "groups/500"},
			} {
				if _, err := e.c.RecordAuditEvent(internal, &authv1.RecordAuditEventRequest{Event: ev}); err != nil {
					t.Fatalf("RecordAuditEvent: %v", err)
				}
			}
			list := func(req *authv1.ListAuditEventsRequest) (string, *authv1.ListAuditEventsResponse) {
				t.Helper()
				if req.StartTime == nil {
					req.StartTime = at(0) // leave out the events of the env's own logins
				}
				resp, err := e.c.ListAuditEvents(e.admin, req)
				if err != nil {
					t.Fatalf("ListAuditEvents(%v): %v", req, err)
				}
				var got []string
				for _, ev := range resp.GetEvents() {
					got = append(got, ev.GetResource())
				}
				return strings.Join(got, " "), resp
			}
			for _, tt := range []struct {
				name string
				req  *authv1.ListAuditEventsRequest
				want string
			}{
				{"all", &authv1.ListAuditEventsRequest{}, "groups/500 groups/50% users/vera_x jobs/2 jobs/12 jobs/1"},
				{"user, any case", &authv1.ListAuditEventsRequest{Username: "OTTO"}, "jobs/2 jobs/12"},
				{"user with _", &authv1.ListAuditEventsRequest{Username: "a_"}, "users/vera_x"},
				{"action", &authv1.ListAuditEventsRequest{Action: createJob}, "jobs/2 jobs/1"},
				{"action is the whole name", &authv1.ListAuditEventsRequest{Action: "CreateJob"}, ""},
				{"resource contains", &authv1.ListAuditEventsRequest{Resource: "jobs/1"}, "jobs/12 jobs/1"},
				{"resource with %", &authv1.ListAuditEventsRequest{Resource: "50%"}, "groups/50%"},
				{"time range, end excluded", &authv1.ListAuditEventsRequest{StartTime: at(1), EndTime: at(3)}, "jobs/2 jobs/12"},
				{"together", &authv1.ListAuditEventsRequest{Username: "otto", Action: createJob}, "jobs/2"},
			} {
				got, resp := list(tt.req)
				if got != tt.want || resp.GetTotalSize() != int64(len(resp.GetEvents())) {
					t.Errorf("%s: got [%s] of %d, want [%s] of as many", tt.name, got, resp.GetTotalSize(), tt.want)
				}
			}
			// Page 2 of size 2 skips the first two; the total counts every match.
			got, resp := list(&authv1.ListAuditEventsRequest{PageSize: 2, Skip: 2})
			if got != "users/vera_x jobs/2" || resp.GetTotalSize() != 6 || resp.GetNextPageToken() == "" {
				t.Errorf("page 2: got [%s] of %d (next %q), want [users/vera_x jobs/2] of 6 and a next page", got, resp.GetTotalSize(), resp.GetNextPageToken())
			}
			got, _ = list(&authv1.ListAuditEventsRequest{PageSize: 2, Skip: 1, PageToken: resp.GetNextPageToken()})
			if got != "jobs/1" {
				t.Errorf("skip after a token: got [%s], want [jobs/1]", got)
			}

			for _, tt := range []struct {
				name  string
				req   *authv1.ListAuditEventsRequest
				field string
			}{
				{"end before start", &authv1.ListAuditEventsRequest{StartTime: at(2), EndTime: at(1)}, "end_time"},
				{"bad start", &authv1.ListAuditEventsRequest{StartTime: &timestamppb.Timestamp{Seconds: 1 << 62}}, "start_time"},
				{"negative skip", &authv1.ListAuditEventsRequest{Skip: -1}, "skip"},
				{"long user", &authv1.ListAuditEventsRequest{Username: strings.Repeat("u", 257)}, "username"},
				{"long resource", &authv1.ListAuditEventsRequest{Resource: strings.Repeat("r", 257)}, "resource"},
				{"bad token", &authv1.ListAuditEventsRequest{PageToken: "x"}, "page_token"},
			} {
				_, err := e.c.ListAuditEvents(e.admin, tt.req)
				if s := status.Convert(err); s.Code() != codes.InvalidArgument || !strings.Contains(s.Message(), tt.field) {
					t.Errorf("%s: %v, want InvalidArgument naming %s", tt.name, err, tt.field)
				}
			}
		})
	}
}
