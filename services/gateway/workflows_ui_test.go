package gateway_test

import (
	"regexp"
	"strings"
	"testing"

	schedulerv1 "github.com/jobmesh/jobmesh/gen/jobmesh/scheduler/v1"
)

// kvCall matches the label of a detail row (kv("Label", …)), which the page translates.
var kvCall = regexp.MustCompile(`\bkv\((` + jsString + `)`)

// TestConsoleWordsWorkflows: every text the workflows page shows (ui/js/views/workflows.js and
// the graph and schedule modules it draws with) has its Chinese in ui/js/zh.js; every instance
// and node status the API sends is worded in Chinese and has a badge colour (ui/app.css), and
// every node status a colour in the drawn graph.
func TestConsoleWordsWorkflows(t *testing.T) {
	t.Parallel()
	zh := map[string]bool{}
	for _, m := range zhKey.FindAllStringSubmatch(readUI(t, "ui/js/zh.js"), -1) {
		zh[unquote(t, m[1])] = true
	}
	for _, f := range []string{"ui/js/views/workflows.js", "ui/js/graph.js", "ui/js/schedule.js"} {
		src := readUI(t, f)
		n := 0
		for _, re := range []*regexp.Regexp{tCall, kvCall} {
			for _, m := range re.FindAllStringSubmatch(src, -1) {
				n++
				if s := unquote(t, m[1]); !zh[s] {
					t.Errorf("zh.js has no Chinese for %q (%s)", s, f)
				}
			}
		}
		if n == 0 {
			t.Errorf("%s: no translated text found", f)
		}
	}
	if !zh["Workflows"] || !strings.Contains(readUI(t, "ui/app.js"), `["workflows", "Workflows"]`) {
		t.Error("app.js should have a Workflows entry in its navigation, worded in zh.js")
	}

	css := readUI(t, "ui/app.css")
	word := func(name, prefix string) string {
		w := strings.TrimPrefix(name, prefix)
		if !zh[w] {
			t.Errorf("zh.js has no Chinese for the status %s", w)
		}
		if !regexp.MustCompile(`\.badge\.` + w + `\b`).MatchString(css) {
			t.Errorf("app.css has no badge colour for the status %s", w)
		}
		return w
	}
	for v, name := range schedulerv1.WorkflowInstanceStatus_name {
		if v != 0 {
			word(name, "WORKFLOW_INSTANCE_STATUS_")
		}
	}
	for v, name := range schedulerv1.WorkflowNodeStatus_name {
		if v == 0 {
			continue
		}
		w := word(name, "WORKFLOW_NODE_STATUS_")
		if !regexp.MustCompile(`\.node\.st-` + w + ` \.box\b`).MatchString(css) {
			t.Errorf("app.css does not colour a graph node of status %s (.node.st-%s .box)", w, w)
		}
	}
}
