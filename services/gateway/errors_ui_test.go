package gateway_test

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/jobmesh/jobmesh/internal/apierr"
)

// jsString matches a double-quoted JavaScript string literal.
const jsString = `"(?:[^"\\]|\\.)*"`

var (
	reasonEntry = regexp.MustCompile(`^\s*([A-Z][A-Z_]*): (` + jsString + `),$`)
	jsStrings   = regexp.MustCompile(jsString)
	zhKey       = regexp.MustCompile(`(?m)^\s*(` + jsString + `): ` + jsString + `,$`)
	tCall       = regexp.MustCompile(`\bt\((` + jsString + `)`)
)

// TestConsoleWordsEveryReason: the console's error table (ui/js/errors.js REASONS) words every
// reason the server sends, apierr.Reasons and each gRPC code's name, and none it never sends;
// each text, and every other text errors.js shows, has a Chinese translation in ui/js/zh.js; and
// its CODE_NAMES name the codes as apierr does.
func TestConsoleWordsEveryReason(t *testing.T) {
	t.Parallel()
	src := readUI(t, "ui/js/errors.js")

	sent := map[string]bool{}
	for _, r := range apierr.Reasons {
		sent[r] = true
	}
	for c := codes.Canceled; c <= codes.Unauthenticated; c++ {
		sent[apierr.CodeReason(c)] = true
	}
	worded := map[string]string{}
	for _, line := range jsBlock(t, src, "export const REASONS = {", "};") {
		m := reasonEntry.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("errors.js REASONS: cannot read line %q (want one `REASON: \"text\",` a line)", line)
		}
		if _, dup := worded[m[1]]; dup {
			t.Errorf("errors.js REASONS: %s twice", m[1])
		}
		worded[m[1]] = unquote(t, m[2])
	}
	for r := range sent {
		if worded[r] == "" {
			t.Errorf("errors.js REASONS has no text for %s, which the server sends", r)
		}
	}
	for r := range worded {
		if !sent[r] {
			t.Errorf("errors.js REASONS words %s, which the server never sends (not in apierr.Reasons nor a code name)", r)
		}
	}

	var names []string
	for _, line := range jsBlock(t, src, "export const CODE_NAMES = [", "];") {
		for _, q := range jsStrings.FindAllString(line, -1) {
			names = append(names, unquote(t, q))
		}
	}
	if len(names) != int(codes.Unauthenticated)+1 || names[codes.OK] != "OK" {
		t.Fatalf("errors.js CODE_NAMES = %q, want OK and the %d codes after it", names, codes.Unauthenticated)
	}
	for c := codes.Canceled; c <= codes.Unauthenticated; c++ {
		if got, want := names[c], apierr.CodeReason(c); got != want {
			t.Errorf("errors.js CODE_NAMES[%d] = %s, want %s", c, got, want)
		}
	}

	zh := map[string]bool{}
	for _, m := range zhKey.FindAllStringSubmatch(readUI(t, "ui/js/zh.js"), -1) {
		k := unquote(t, m[1])
		if zh[k] {
			t.Errorf("zh.js has %q twice; the later one wins", k)
		}
		zh[k] = true
	}
	texts := map[string]bool{}
	for _, s := range worded {
		texts[s] = true
	}
	for _, m := range tCall.FindAllStringSubmatch(src, -1) {
		texts[unquote(t, m[1])] = true
	}
	for _, v := range fieldLabels(t, src) {
		texts[v] = true
	}
	for s := range texts {
		if !zh[s] {
			t.Errorf("zh.js has no Chinese for %q (errors.js)", s)
		}
	}
}

// fieldLabels returns the labels errors.js names fields by.
func fieldLabels(t *testing.T, src string) []string {
	t.Helper()
	var labels []string
	for _, line := range jsBlock(t, src, "const FIELDS = {", "};") {
		for _, m := range regexp.MustCompile(`: (`+jsString+`)`).FindAllStringSubmatch(line, -1) {
			labels = append(labels, unquote(t, m[1]))
		}
	}
	if len(labels) == 0 {
		t.Fatal("errors.js FIELDS: no labels read")
	}
	return labels
}

func readUI(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// jsBlock returns the lines between the line starting with open and the next line that is
// close, without blank lines and comments.
func jsBlock(t *testing.T, src, open, close string) []string {
	t.Helper()
	i := strings.Index(src, "\n"+open+"\n")
	if i < 0 {
		t.Fatalf("errors.js has no line %q", open)
	}
	rest := src[i+len(open)+2:]
	j := strings.Index(rest, "\n"+close+"\n")
	if j < 0 {
		t.Fatalf("errors.js: %q is not closed by a line %q", open, close)
	}
	var lines []string
	for _, l := range strings.Split(rest[:j], "\n") {
		if s := strings.TrimSpace(l); s != "" && !strings.HasPrefix(s, "//") {
			lines = append(lines, l)
		}
	}
	return lines
}

// unquote reads a JavaScript string literal; the console's strings use only the escapes Go's
// share (\" and \\).
func unquote(t *testing.T, q string) string {
	t.Helper()
	s, err := strconv.Unquote(q)
	if err != nil {
		t.Fatalf("cannot read the string %s: %v", q, err)
	}
	return s
}
