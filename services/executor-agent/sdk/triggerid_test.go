package sdk

import (
	"regexp"
	"strings"
	"testing"
)

// TestValidTriggerID checks the loop against the rule it replaced, written as a regexp.
func TestValidTriggerID(t *testing.T) {
	rule := regexp.MustCompile(`^[A-Za-z0-9_:-][A-Za-z0-9_.:-]{0,127}$`)
	ids := []string{"", ".", "a", ".a", "a.", "12-1790000000000-0-0", "job:1_x-y.z", "a/b", "a b", "ä", "a\x00",
		"-", ":", "_", "a\n", strings.Repeat("a", 128), strings.Repeat("a", 129), "." + strings.Repeat("a", 10), "A-Z.0-9"}
	for c := 0; c < 256; c++ {
		ids = append(ids, string([]byte{byte(c)}), "x"+string([]byte{byte(c)}))
	}
	for _, id := range ids {
		if got, want := validTriggerID(id), rule.MatchString(id); got != want {
			t.Errorf("validTriggerID(%q) = %v, want %v", id, got, want)
		}
	}
}
