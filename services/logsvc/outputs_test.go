package logsvc

import (
	"maps"
	"strconv"
	"strings"
	"testing"
)

func TestCheckOutputs(t *testing.T) {
	t.Parallel()
	many := map[string]string{}
	for i := range maxOutputKeys + 1 {
		many["k"+strconv.Itoa(i)] = "v"
	}
	tests := []struct {
		name string
		outs map[string]string
		want string // "" for valid
	}{
		{"none", nil, ""},
		{"some", map[string]string{"rows": "42", "file": "s3://b/k"}, ""},
		{"too many keys", many, "results[0].outputs: at most 64 keys, got 65"},
		{"empty key", map[string]string{"": "x"}, `results[0].outputs: key "": want 1-128 bytes, got 0`},
		{"long key", map[string]string{strings.Repeat("k", 129): "x"}, "want 1-128 bytes, got 129"},
		{"too big", map[string]string{"a": strings.Repeat("x", 16<<10)}, "results[0].outputs: at most 16384 bytes of keys and values, got 16385"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := checkOutputs("results[0].outputs", tt.outs)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("checkOutputs() = %v; want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("checkOutputs() = %v; want %q", err, tt.want)
			}
		})
	}
	in := map[string]string{"a": "1", "b": "é"}
	if got := decodeOutputs(encodeOutputs(in)); !maps.Equal(got, in) {
		t.Errorf("outputs round trip: %v; want %v", got, in)
	}
	if encodeOutputs(nil) != "" || decodeOutputs("") != nil {
		t.Error("no outputs should store as the empty string")
	}
}
