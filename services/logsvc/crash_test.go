package logsvc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	"github.com/jobmesh/jobmesh/internal/db"
	"github.com/jobmesh/jobmesh/internal/db/dbtest"
	"github.com/jobmesh/jobmesh/internal/grpcserver"
)

// The crash child is this test binary run again as a plain logsvc process: it opens the store
// named by the environment, serves on loopback, prints its address, and SIGKILLs itself between
// the writes and the commit of its crashAtEnv-th transaction.
const (
	crashChildEnv = "JOBMESH_LOGSVC_CRASH_CHILD"
	crashURLEnv   = "JOBMESH_LOGSVC_CRASH_URL"
	crashDirEnv   = "JOBMESH_LOGSVC_CRASH_DIR"
	crashAtEnv    = "JOBMESH_LOGSVC_CRASH_AT"
)

func crashChild() int {
	ctx := context.Background()
	store, err := db.Open(ctx, db.Config{URL: os.Getenv(crashURLEnv), DataDir: os.Getenv(crashDirEnv), Schema: "logs"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		return 2
	}
	at, _ := strconv.Atoi(os.Getenv(crashAtEnv))
	svc, err := New(Config{Retention: -1}, store, &fakeKiller{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		return 2
	}
	n := 0
	svc.beforeCommit = func(context.Context, *db.Tx) {
		if n++; n == at {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	}
	g := grpcserver.New(slog.New(slog.DiscardHandler))
	svc.Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		return 2
	}
	fmt.Println(ln.Addr().String())
	if err := g.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
	}
	return 1
}

// TestKillBetweenBatchAndCommit kills a logsvc process (SIGKILL) after it wrote a batch and
// before it committed it: the batch acknowledged before the kill is all there, the batch in
// flight is neither acknowledged nor stored, and once resent to a new process both are stored
// exactly once.
func TestKillBetweenBatchAndCommit(t *testing.T) {
	t.Parallel()
	for _, st := range dbtest.Stores(t) {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			check := dbtest.Open(t, st.Config, "logs", MigrationsFS()) // migrated before the child starts
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), crashChildEnv+"=1", crashURLEnv+"="+st.Config.URL, crashDirEnv+"="+st.Config.DataDir, crashAtEnv+"=2")
			cmd.Stderr = os.Stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatalf("pipe: %v", err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatalf("start child: %v", err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }() // the child prints its address before it can exit
			t.Cleanup(func() {
				_ = cmd.Process.Kill() // only if the test failed before the crash
				<-exited
			})
			addr, err := within(t, "child address", func() (string, error) {
				s := bufio.NewScanner(out)
				if !s.Scan() {
					return "", errors.New("child printed no address")
				}
				return s.Text(), nil
			})
			if err != nil {
				t.Fatal(err)
			}
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatalf("dial child: %v", err)
			}
			defer conn.Close()
			ingest := logsv1.NewIngestServiceClient(conn)
			batch := func(from, n int) *logsv1.IngestTriggerRecordsRequest {
				req := &logsv1.IngestTriggerRecordsRequest{BatchId: uint64(from)}
				for i := from; i < from+n; i++ {
					req.Records = append(req.Records, record(fmt.Sprintf("134-%04d", i), 134, base))
				}
				return req
			}
			stream, err := ingest.IngestTriggerRecords(ctxFor(t))
			if err != nil {
				t.Fatalf("open stream: %v", err)
			}
			if err := stream.Send(batch(0, 500)); err != nil {
				t.Fatalf("send batch 1: %v", err)
			}
			if ack, err := within(t, "ack 1", stream.Recv); err != nil || ack.GetBatchId() != 0 {
				t.Fatalf("ack of batch 1: got %v, %v", ack, err)
			}
			if err := stream.Send(batch(500, 500)); err != nil {
				t.Fatalf("send batch 2: %v", err)
			}
			if ack, err := within(t, "ack 2", stream.Recv); err == nil {
				t.Fatalf("batch 2 acknowledged (%v) by a process killed before its commit", ack)
			}
			werr, _ := within(t, "child exit", func() (error, error) { return <-exited, nil })
			exited <- werr // for the cleanup
			var ee *exec.ExitError
			if !errors.As(werr, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("child exit: got %v, want killed by SIGKILL", werr)
			}
			count := func() int {
				t.Helper()
				var n int
				if err := check.QueryRowContext(ctxFor(t), check.Q(`SELECT COUNT(*) FROM runs WHERE job_id = $1`), 134).Scan(&n); err != nil {
					t.Fatalf("count: %v", err)
				}
				return n
			}
			if got := count(); got != 500 {
				t.Fatalf("runs after the kill: got %d, want 500 (batch 1 acknowledged, batch 2 never committed)", got)
			}
			// The sender resends what was not acknowledged (and, to be safe, more) to a new process.
			e := newEnvWith(t, st, Config{Retention: -1}, false)
			e.mustRecords(t, batch(500, 500).GetRecords()...)
			e.mustRecords(t, batch(0, 1000).GetRecords()...)
			if got := count(); got != 1000 {
				t.Errorf("runs after resending: got %d, want 1000", got)
			}
		})
	}
}
