package sdk_test

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	executorv1 "github.com/jobmesh/jobmesh/gen/jobmesh/executor/v1"
	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
	"github.com/jobmesh/jobmesh/services/executor-agent/sdk"
)

// TestEveryScriptType runs each GLUE type whose interpreter this machine has, with params and
// shard as arguments and the fire in the environment; a type whose interpreter is missing must
// be refused with a message naming it.
func TestEveryScriptType(t *testing.T) {
	t.Parallel()
	h := start(t, nil)
	for i, c := range []struct {
		interp string
		glue   schedulerv1.GlueType
		src    string
	}{
		{"bash", schedulerv1.GlueType_GLUE_TYPE_GLUE_SHELL, `echo "$1|$2|$3|$JOBMESH_TRIGGER_ID"`},
		{"python3", schedulerv1.GlueType_GLUE_TYPE_GLUE_PYTHON, "import os, sys\nprint('|'.join(sys.argv[1:4] + [os.environ['JOBMESH_TRIGGER_ID']]))"},
		{"node", schedulerv1.GlueType_GLUE_TYPE_GLUE_NODEJS, "console.log([...process.argv.slice(2, 5), process.env.JOBMESH_TRIGGER_ID].join('|'))"},
		{"php", schedulerv1.GlueType_GLUE_TYPE_GLUE_PHP, "<?php echo implode('|', array_merge(array_slice($argv, 1, 3), [getenv('JOBMESH_TRIGGER_ID')])), \"\\n\";"},
		{"pwsh", schedulerv1.GlueType_GLUE_TYPE_GLUE_POWERSHELL, "Write-Output (($args[0..2] + $env:JOBMESH_TRIGGER_ID) -join '|')"},
	} {
		t.Run(c.interp, func(t *testing.T) {
			t.Parallel()
			job := int64(300 + i)
			id := fmt.Sprintf("%d-1-0-0", job)
			tr := &executorv1.Trigger{TriggerId: id, JobId: job, GlueType: c.glue, GlueSource: c.src, GlueUpdatedUnixMs: 1,
				Params: "it's a \"param\"; $(rm -rf /)", ShardIndex: 2, ShardTotal: 5}
			if _, err := exec.LookPath(c.interp); err != nil {
				ack := h.run(t, tr)[0]
				if want := "interpreter " + c.interp + " not found on this executor"; ack.GetOutcome() != executorv1.RunOutcome_RUN_OUTCOME_REJECTED || ack.GetMessage() != want {
					t.Fatalf("without %s: got %v %q, want REJECTED %q", c.interp, ack.GetOutcome(), ack.GetMessage(), want)
				}
				return
			}
			h.accept(t, tr)
			h.wantResult(t, id, logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
			if got, want := h.ingest.Texts(id), []string{tr.Params + "|2|5|" + id}; !slices.Equal(got, want) {
				t.Fatalf("output: got %q, want %q", got, want)
			}
		})
	}
}

// TestKillEndsTheWholeProcessGroup: a killed script's children die with it, including one that
// ignores SIGTERM (it gets SIGKILL after the grace period).
func TestKillEndsTheWholeProcessGroup(t *testing.T) {
	t.Parallel()
	h := start(t, nil)
	src := "sleep 1000 &\necho \"child $!\"\nbash -c 'trap \"\" TERM; sleep 1000; :' &\necho \"stubborn $!\"\nwait"
	h.accept(t, script("310-1-0-0", 310, src))
	lines := h.waitLines(t, "310-1-0-0", 2)
	resp, err := h.cli.Kill(ctxFor(t), &executorv1.KillRequest{JobId: 310})
	if err != nil || !resp.GetKilled() {
		t.Fatalf("Kill: got %v %v", resp, err)
	}
	h.wantResult(t, "310-1-0-0", logsv1.RunStatus_RUN_STATUS_KILLED, "killed by request")
	for _, l := range lines {
		_, p, _ := strings.Cut(l, " ")
		pid, err := strconv.Atoi(p)
		if err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		if alive(pid) {
			t.Errorf("%s survived the kill", l)
		}
	}
}

// TestHandlerChangeReplacesWorker: a fire naming another BEAN handler for a job kills the
// running fire of the old handler and runs on a new worker.
func TestHandlerChangeReplacesWorker(t *testing.T) {
	t.Parallel()
	h := start(t, nil)
	h.exec.Handle("other", func(ctx context.Context, job *sdk.Job) error {
		job.Logf("other ran")
		return nil
	})
	h.accept(t, bean("320-1-0-0", 320, "gate", ""))
	h.gates.waitStarted(t, "320-1-0-0")
	h.accept(t, bean("320-2-0-0", 320, "other", ""))
	h.wantResult(t, "320-1-0-0", logsv1.RunStatus_RUN_STATUS_KILLED, "handler changed")
	h.wantResult(t, "320-2-0-0", logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
	if got := h.ingest.Texts("320-2-0-0"); !slices.Equal(got, []string{"other ran"}) {
		t.Fatalf("lines: got %q", got)
	}
}
