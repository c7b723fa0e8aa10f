package logsvc

import (
	"encoding/json"
	"sort"

	"github.com/jobmesh/jobmesh/internal/apierr"
)

// Bounds of a run's outputs (RunResult.outputs): the small results a workflow node's handler
// publishes for the nodes downstream of it.
const (
	maxOutputKeys   = 64
	maxOutputKeyLen = 128
	maxOutputBytes  = 16 << 10
)

// checkOutputs refuses outputs over their bounds, naming field and the key.
func checkOutputs(field string, outs map[string]string) error {
	if len(outs) > maxOutputKeys {
		return apierr.Field(field, "at most %d keys, got %d", maxOutputKeys, len(outs))
	}
	keys := make([]string, 0, len(outs))
	for k := range outs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	size := 0
	for _, k := range keys {
		if n := len(k); n < 1 || n > maxOutputKeyLen {
			return apierr.Field(field, "key %q: want 1-%d bytes, got %d", k, maxOutputKeyLen, n)
		}
		size += len(k) + len(outs[k])
	}
	if size > maxOutputBytes {
		return apierr.Field(field, "at most %d bytes of keys and values, got %d", maxOutputBytes, size)
	}
	return nil
}

// encodeOutputs stores outputs as JSON; "" for none.
func encodeOutputs(outs map[string]string) string {
	if len(outs) == 0 {
		return ""
	}
	b, err := json.Marshal(outs)
	if err != nil { // a map of strings always marshals
		return ""
	}
	return string(b)
}

// decodeOutputs reads what encodeOutputs stored; nil for none.
func decodeOutputs(s string) map[string]string {
	if s == "" {
		return nil
	}
	var outs map[string]string
	if json.Unmarshal([]byte(s), &outs) != nil {
		return nil
	}
	return outs
}
