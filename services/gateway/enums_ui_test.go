package gateway_test

import (
	"regexp"
	"strings"
	"testing"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
)

// TestConsoleWordsEveryRunStatusAndOutcome: every run status logsvc stores is one the console's
// run list filters by (ui/js/enums.js RUN_STATUSES), words in Chinese (ui/js/zh.js) and colours
// with a badge of its own (ui/app.css); every trigger outcome has its badge in the run view
// (ui/js/views/runs.js outcomeBadge).
func TestConsoleWordsEveryRunStatusAndOutcome(t *testing.T) {
	t.Parallel()
	enums, css, runs := readUI(t, "ui/js/enums.js"), readUI(t, "ui/app.css"), readUI(t, "ui/js/views/runs.js")
	line := regexp.MustCompile(`(?m)^export const RUN_STATUSES = .*$`).FindString(enums)
	if line == "" {
		t.Fatal("enums.js has no RUN_STATUSES")
	}
	zh := map[string]bool{}
	for _, m := range zhKey.FindAllStringSubmatch(readUI(t, "ui/js/zh.js"), -1) {
		zh[unquote(t, m[1])] = true
	}
	for v, name := range logsv1.RunStatus_name {
		if v == 0 {
			continue
		}
		word := strings.TrimPrefix(name, "RUN_STATUS_")
		if !strings.Contains(line, `"`+word+`"`) {
			t.Errorf("RUN_STATUSES does not list %s: the run list cannot filter by it", word)
		}
		if !zh[word] {
			t.Errorf("zh.js has no Chinese for the run status %s", word)
		}
		if !regexp.MustCompile(`\.badge\.` + word + `\b`).MatchString(css) {
			t.Errorf("app.css has no badge colour for the run status %s", word)
		}
	}
	for v, name := range logsv1.TriggerOutcome_name {
		if v != 0 && !strings.Contains(runs, `case "`+name+`":`) {
			t.Errorf("runs.js outcomeBadge has no case for %s", name)
		}
	}
}
