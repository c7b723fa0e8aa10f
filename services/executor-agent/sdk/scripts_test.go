package sdk_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

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
		if !diesWithin(pid, 5*time.Second) {
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

// TestGlueScriptFilePerVersion: a GLUE version's script file is written once, at the first fire
// of its worker, serves the fires after it, and is deleted when a new version replaces it.
func TestGlueScriptFilePerVersion(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := start(t, func(cfg *sdk.Config) { cfg.LogDir = dir })
	glueFiles := func() []string {
		ents, err := os.ReadDir(filepath.Join(dir, "glue"))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return names
	}
	var paths []string
	for i, version := range []int64{1, 1, 2} {
		id := fmt.Sprintf("350-%d-0-0", i+1)
		tr := script(id, 350, fmt.Sprintf(`echo "%d $0"`, version))
		tr.GlueUpdatedUnixMs = version
		h.accept(t, tr)
		h.wantResult(t, id, logsv1.RunStatus_RUN_STATUS_SUCCESS, "")
		lines := h.ingest.Texts(id)
		v, path, _ := strings.Cut(lines[0], " ")
		if v != strconv.FormatInt(version, 10) {
			t.Fatalf("fire %s ran %q, want version %d", id, lines[0], version)
		}
		paths = append(paths, path)
	}
	if paths[0] != paths[1] || paths[1] == paths[2] {
		t.Fatalf("script files: got %q, want one for version 1's two fires and another for version 2", paths)
	}
	want := []string{filepath.Base(paths[2])}
	for deadline := time.Now().Add(wait); !slices.Equal(glueFiles(), want); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("glue directory: got %q, want only %q (version 1's file deleted with its worker)", glueFiles(), want)
		}
	}
}
