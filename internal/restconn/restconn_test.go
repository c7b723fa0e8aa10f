package restconn_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/internal/restconn"
)

// recorded is the request a fake gateway saw.
type recorded struct {
	method, uri, auth, body string
}

// fakeGateway answers every request with status and body, recording it.
func fakeGateway(t *testing.T, code int, body string) (*restconn.Conn, *recorded) {
	t.Helper()
	var rec recorded
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rec = recorded{method: r.Method, uri: r.URL.RequestURI(), auth: r.Header.Get("Authorization"), body: string(b)}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	conn, err := restconn.New(srv.URL+"/", nil, "tok")
	if err != nil {
		t.Fatal(err)
	}
	return conn, &rec
}

func TestRoutesFromAnnotations(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name             string
		call             func(context.Context, *restconn.Conn) error
		wantMethod, want string
		wantBody         string
	}{
		{"get with path variable", func(ctx context.Context, cc *restconn.Conn) error {
			_, err := schedulerv1.NewJobServiceClient(cc).GetJob(ctx, &schedulerv1.GetJobRequest{Id: 7})
			return err
		}, "GET", "/api/v1/jobs/7", ""},
		{"list with query, enums by name, zero values left out", func(ctx context.Context, cc *restconn.Conn) error {
			_, err := schedulerv1.NewJobServiceClient(cc).ListJobs(ctx, &schedulerv1.ListJobsRequest{
				GroupId: 3, Status: schedulerv1.JobStatus_JOB_STATUS_RUNNING, Name: "a b", PageSize: 10})
			return err
		}, "GET", "/api/v1/jobs?group_id=3&name=a+b&page_size=10&status=JOB_STATUS_RUNNING", ""},
		{"body *", func(ctx context.Context, cc *restconn.Conn) error {
			_, err := schedulerv1.NewJobServiceClient(cc).TriggerJob(ctx, &schedulerv1.TriggerJobRequest{Id: 9, Params: "p", Addresses: []string{"h:1"}})
			return err
		}, "POST", "/api/v1/jobs/9:trigger", `{"id":"9","params":"p","addresses":["h:1"]}`},
		{"body of one field, nested path variable", func(ctx context.Context, cc *restconn.Conn) error {
			_, err := schedulerv1.NewJobServiceClient(cc).UpdateJob(ctx, &schedulerv1.UpdateJobRequest{Job: &schedulerv1.Job{Id: 4, Name: "n"}})
			return err
		}, "PATCH", "/api/v1/jobs/4", `{"id":"4","name":"n"}`},
		{"body of one field, the update mask in the query", func(ctx context.Context, cc *restconn.Conn) error {
			_, err := schedulerv1.NewJobServiceClient(cc).UpdateJob(ctx, &schedulerv1.UpdateJobRequest{Job: &schedulerv1.Job{Id: 4},
				UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"params", "child_job_ids"}}})
			return err
		}, "PATCH", "/api/v1/jobs/4?update_mask=params%2Cchild_job_ids", `{"id":"4"}`},
		{"string id escaped", func(ctx context.Context, cc *restconn.Conn) error {
			_, err := logsv1.NewLogServiceClient(cc).KillRun(ctx, &logsv1.KillRunRequest{Id: "1-2/3"})
			return err
		}, "POST", "/api/v1/logs/1-2%2F3:kill", `{"id":"1-2/3"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cc, rec := fakeGateway(t, 200, `{}`)
			if err := c.call(t.Context(), cc); err != nil {
				t.Fatal(err)
			}
			if rec.method != c.wantMethod || rec.uri != c.want || strings.ReplaceAll(rec.body, " ", "") != c.wantBody || rec.auth != "Bearer tok" {
				t.Errorf("got %s %s body %q auth %q, want %s %s body %q", rec.method, rec.uri, rec.body, rec.auth, c.wantMethod, c.want, c.wantBody)
			}
		})
	}
}

func TestMissingPathVariable(t *testing.T) {
	t.Parallel()
	cc, _ := fakeGateway(t, 200, `{}`)
	_, err := logsv1.NewLogServiceClient(cc).KillRun(t.Context(), &logsv1.KillRunRequest{})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "id: required") {
		t.Errorf("KillRun without an id = %v, want InvalidArgument naming id", err)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		code     int
		body     string
		wantCode codes.Code
		wantMsg  string
	}{
		{404, `{"code":5,"message":"job 9: not found","details":[]}`, codes.NotFound, "job 9: not found"},
		{400, `{"code":3,"message":"schedule.expression: bad cron"}`, codes.InvalidArgument, "schedule.expression: bad cron"},
		{404, `{"error":{"code":5,"message":"run \"r1\": not found","details":[]}}`, codes.NotFound, `run "r1": not found`},
		{502, `<html>bad gateway</html>`, codes.Unavailable, "HTTP 502: <html>bad gateway</html>"},
		{401, ``, codes.Unauthenticated, "HTTP 401: Unauthorized"},
		{409, `{}`, codes.Aborted, "HTTP 409: {}"},
	} {
		cc, _ := fakeGateway(t, c.code, c.body)
		_, err := schedulerv1.NewJobServiceClient(cc).GetJob(t.Context(), &schedulerv1.GetJobRequest{Id: 9})
		st, _ := status.FromError(err)
		if st.Code() != c.wantCode || st.Message() != c.wantMsg {
			t.Errorf("HTTP %d %q = %v %q, want %v %q", c.code, c.body, st.Code(), st.Message(), c.wantCode, c.wantMsg)
		}
	}
}

func TestUnreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cc, err := restconn.New("http://"+addr, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = schedulerv1.NewJobServiceClient(cc).GetJob(t.Context(), &schedulerv1.GetJobRequest{Id: 1})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "cannot reach the gateway at http://"+addr) {
		t.Errorf("GetJob against nothing = %v, want Unavailable naming the gateway", err)
	}
}

func TestBadEndpoints(t *testing.T) {
	t.Parallel()
	for _, e := range []string{"127.0.0.1:8080", "ftp://h", "http://", "http://h/?x=1", ""} {
		if _, err := restconn.New(e, nil, ""); err == nil || !strings.Contains(err.Error(), "http://") {
			t.Errorf("New(%q) = %v, want an error saying what an endpoint looks like", e, err)
		}
	}
}

func TestServerStream(t *testing.T) {
	t.Parallel()
	cc, rec := fakeGateway(t, 200, `{"result":{"lines":[{"line_no":"1","text":"a"}]}}`+"\n\n"+
		`{"result":{"lines":[{"line_no":"2","text":"b"}],"status":"RUN_STATUS_SUCCESS","added_later":1}}`+"\n")
	st, err := logsv1.NewLogServiceClient(cc).TailRun(t.Context(), &logsv1.TailRunRequest{Id: "r1", FromLine: 1})
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	var final logsv1.RunStatus
	for {
		resp, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range resp.GetLines() {
			texts = append(texts, l.GetText())
		}
		final = resp.GetStatus()
	}
	if rec.uri != "/api/v1/logs/r1/lines:tail?from_line=1" || strings.Join(texts, ",") != "a,b" || final != logsv1.RunStatus_RUN_STATUS_SUCCESS {
		t.Errorf("tail %s: lines %v, status %v", rec.uri, texts, final)
	}
}

func TestServerStreamErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		body     string
		wantCode codes.Code
	}{
		{`{"result":{}}` + "\n" + `{"error":{"code":5,"message":"run r1: not found"}}` + "\n", codes.NotFound},
		{`{"result":{}}` + "\n" + `{"result":{"lin`, codes.Unavailable}, // cut short
	} {
		cc, _ := fakeGateway(t, 200, c.body)
		st, err := logsv1.NewLogServiceClient(cc).TailRun(t.Context(), &logsv1.TailRunRequest{Id: "r1"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatalf("first chunk: %v", err)
		}
		if _, err := st.Recv(); status.Code(err) != c.wantCode {
			t.Errorf("%q: second Recv = %v, want %v", c.body, err, c.wantCode)
		}
	}
}
