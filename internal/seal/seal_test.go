package seal

import (
	"strings"
	"testing"
)

func TestSealChecksEveryPart(t *testing.T) {
	t.Parallel()
	k := New("an internal token of at least thirty-two chars", Delivery)
	s := k.Sum("7", "12-1700000000000-0-0")
	if !k.Valid(s, "7", "12-1700000000000-0-0") {
		t.Fatalf("Valid(own seal) = false")
	}
	for _, tc := range []struct {
		name  string
		key   *Key
		seal  string
		parts []string
	}{
		{"other group", k, s, []string{"8", "12-1700000000000-0-0"}},
		{"other trigger", k, s, []string{"7", "12-1700000000000-0-1"}},
		{"parts moved across the boundary", k, s, []string{"71", "2-1700000000000-0-0"}},
		{"other purpose", New("an internal token of at least thirty-two chars", Registration), s, []string{"7", "12-1700000000000-0-0"}},
		{"other secret", New("another internal token, thirty-two chars", Delivery), s, []string{"7", "12-1700000000000-0-0"}},
		{"empty seal", k, "", []string{"7", "12-1700000000000-0-0"}},
		{"not base64", k, strings.Repeat("*", len(s)), []string{"7", "12-1700000000000-0-0"}},
		{"nil key", nil, s, []string{"7", "12-1700000000000-0-0"}},
	} {
		if tc.key.Valid(tc.seal, tc.parts...) {
			t.Errorf("%s: Valid = true, want false", tc.name)
		}
	}
}

func BenchmarkSum(b *testing.B) {
	k := New("an internal token of at least thirty-two chars", Delivery)
	for b.Loop() {
		k.Sum("7", "12-1700000000000-0-0")
	}
}
