package sdk

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Bounds of what one fire publishes (RunResult.outputs), as logsvc checks them: a result over
// them would be refused, so the executor never sends one.
const (
	// MaxOutputKeys is how many keys a fire may publish.
	MaxOutputKeys = 64
	// MaxOutputKeyBytes is the longest output key, in bytes.
	MaxOutputKeyBytes = 128
	// MaxOutputBytes bounds a fire's output keys and values together, in bytes.
	MaxOutputBytes = 16 << 10
)

// outputs is what a fire published so far, guarded by its run's mu.
type outputs struct {
	m    map[string]string
	size int   // bytes of keys and values
	err  error // the first output a script published that was refused (marker or file)
}

// set adds or replaces one output within the bounds.
func (o *outputs) set(key, value string) error {
	switch n := len(key); {
	case n < 1 || n > MaxOutputKeyBytes:
		return fmt.Errorf("output key %q: want 1-%d bytes, got %d", key, MaxOutputKeyBytes, n)
	case !utf8.ValidString(key):
		return fmt.Errorf("output key %q: not valid UTF-8", key)
	case !utf8.ValidString(value):
		return fmt.Errorf("output %q: value is not valid UTF-8", key)
	}
	old, had := o.m[key]
	if !had && len(o.m) >= MaxOutputKeys {
		return fmt.Errorf("output %q: a fire publishes at most %d keys", key, MaxOutputKeys)
	}
	size := o.size + len(key) + len(value)
	if had {
		size -= len(key) + len(old)
	}
	if size > MaxOutputBytes {
		return fmt.Errorf("output %q: a fire publishes at most %d bytes of keys and values, this makes %d", key, MaxOutputBytes, size)
	}
	if o.m == nil {
		o.m = make(map[string]string)
	}
	o.m[key], o.size = value, size
	return nil
}

// SetOutput publishes a small result of the fire for the workflow nodes downstream of it
// (docs/workflows.md): they receive it in their Job.Context. A fire publishes at most
// MaxOutputKeys keys of 1 to MaxOutputKeyBytes bytes and MaxOutputBytes of keys and values in
// all, valid UTF-8; SetOutput refuses one over the bounds with an error naming the key, and
// keeps what was published before. Setting a key again replaces its value. The outputs go with
// the fire's final result, whatever its status; a call after the handler returned (or the fire
// was killed) is refused.
func (j *Job) SetOutput(key, value string) error {
	if j.run == nil {
		return errors.New("SetOutput: the job is not a fire of an executor")
	}
	return j.run.setOutput(key, value)
}

// Outputs returns a copy of what the fire has published so far.
func (j *Job) Outputs() map[string]string {
	if j.run == nil {
		return nil
	}
	j.run.mu.Lock()
	defer j.run.mu.Unlock()
	return maps.Clone(j.run.outs.m)
}

func (r *run) setOutput(key, value string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.returned || r.finished {
		return fmt.Errorf("output %q: the fire has ended", key)
	}
	return r.outs.set(key, value)
}

// takeOutputs returns what the fire published, once it has ended.
func (r *run) takeOutputs() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.outs.m
}

// outputMarker starts a line of a script's output that publishes an output:
// "::jobmesh-output key=value".
const outputMarker = "::jobmesh-output "

// markerOutput publishes the output of a marker line (the text after outputMarker). A bad one
// is remembered to fail the fire (scriptOutputErr), as a refused SetOutput would be reported.
func (r *run) markerOutput(lineNo int64, text string) {
	key, value, ok := strings.Cut(text, "=")
	var err error
	if !ok {
		err = fmt.Errorf("output line %d %q: want %skey=value", lineNo, outputMarker+text, outputMarker)
	} else {
		err = r.setOutput(strings.TrimSpace(key), value)
	}
	if err != nil {
		r.mu.Lock()
		if r.outs.err == nil {
			r.outs.err = err
		}
		r.mu.Unlock()
	}
}

// scriptOutputErr is the first output a script published that was refused.
func (r *run) scriptOutputErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.outs.err
}

// maxOutputFile bounds the output file read: far over MaxOutputBytes, for JSON's escapes.
const maxOutputFile = 1 << 20

// readOutputFile publishes what a process wrote to its output file (JOBMESH_OUTPUT_FILE): a
// JSON object (its first non-blank byte is "{"; a value that is not a string is kept as its
// JSON text), or lines key=value (blank lines skipped). A missing file publishes nothing.
func (r *run) readOutputFile(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("output file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxOutputFile+1))
	if err != nil {
		return fmt.Errorf("output file: %w", err)
	}
	if len(data) > maxOutputFile {
		return fmt.Errorf("output file: larger than %d bytes", maxOutputFile)
	}
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(t, &obj); err != nil {
			return fmt.Errorf("output file: not a JSON object: %w", err)
		}
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			v := string(obj[k])
			var s string
			if json.Unmarshal(obj[k], &s) == nil {
				v = s
			} else if c := new(bytes.Buffer); json.Compact(c, obj[k]) == nil {
				v = c.String()
			}
			if err := r.setOutput(k, v); err != nil {
				return fmt.Errorf("output file: %w", err)
			}
		}
		return nil
	}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSuffix(line, "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			return fmt.Errorf("output file line %d: want key=value or a JSON object", i+1)
		}
		if err := r.setOutput(strings.TrimSpace(key), value); err != nil {
			return fmt.Errorf("output file line %d: %w", i+1, err)
		}
	}
	return nil
}

// maxContextEnv bounds the bytes of JOBMESH_CTX_* variables a process gets; the context file
// holds every key whatever its size.
const maxContextEnv = 256 << 10

// fireFiles are the files a fire's process exchanges data through, in LogDir/fires: the
// context it reads (written only when the fire has one) and the outputs it may write.
type fireFiles struct {
	context, output string
}

// prepareFiles writes a fire's context file and names its output file.
func (e *Executor) prepareFiles(job *Job) (fireFiles, error) {
	dir := filepath.Join(e.cfg.LogDir, "fires")
	ff := fireFiles{output: filepath.Join(dir, job.TriggerID+".out")}
	if len(job.Context) == 0 {
		return ff, nil
	}
	data, err := json.Marshal(job.Context)
	if err != nil {
		return ff, fmt.Errorf("context file: %w", err)
	}
	ff.context = filepath.Join(dir, job.TriggerID+".context.json")
	if err := os.WriteFile(ff.context, data, 0o600); err != nil {
		return fireFiles{}, fmt.Errorf("context file: %w", err)
	}
	return ff, nil
}

// remove deletes a fire's files.
func (ff fireFiles) remove() {
	for _, p := range []string{ff.context, ff.output} {
		if p != "" {
			_ = os.Remove(p)
		}
	}
}

// contextEnv is the environment a fire's process gets for its workflow node: the instance
// and node, the files, and each context key as JOBMESH_CTX_<KEY> (envName). Keys are taken in
// byte order: of keys with the same name the first is set, and a key whose value holds a NUL
// byte, or past maxContextEnv, is left to the context file; left says how many were.
func contextEnv(job *Job, ff fireFiles) (env []string, left int) {
	env = append(env, "JOBMESH_OUTPUT_FILE="+ff.output)
	if job.WorkflowInstanceID != "" {
		env = append(env, "JOBMESH_WORKFLOW_INSTANCE_ID="+job.WorkflowInstanceID, "JOBMESH_WORKFLOW_NODE_ID="+job.WorkflowNodeID)
	}
	if len(job.Context) == 0 {
		return env, 0
	}
	env = append(env, "JOBMESH_CONTEXT_FILE="+ff.context)
	keys := make([]string, 0, len(job.Context))
	for k := range job.Context {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	seen := make(map[string]bool, len(keys))
	size := 0
	for _, k := range keys {
		name := envName(k)
		v := job.Context[k]
		if seen[name] || strings.IndexByte(v, 0) >= 0 || size+len(name)+len(v)+1 > maxContextEnv {
			left++
			continue
		}
		seen[name] = true
		size += len(name) + len(v) + 1
		env = append(env, name+"="+v)
	}
	return env, left
}

// envName is a context key's variable: JOBMESH_CTX_ and the key upper-cased, with every byte
// other than A-Z, 0-9 and _ made _ ("extract.rows" is JOBMESH_CTX_EXTRACT_ROWS).
func envName(key string) string {
	b := []byte("JOBMESH_CTX_" + strings.ToUpper(key))
	for i := len("JOBMESH_CTX_"); i < len(b); i++ {
		if c := b[i]; !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

// contextLeftLine is the run log line saying that context keys are only in the file.
func contextLeftLine(left int) string {
	return "[jobmesh] " + strconv.Itoa(left) + " context keys are not in JOBMESH_CTX_* variables (same name as another, a NUL byte, or past " +
		strconv.Itoa(maxContextEnv>>10) + " KiB): read them from JOBMESH_CONTEXT_FILE"
}
