package logsvc

import "testing"

func TestWorkflowInstanceOf(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]string{
		"12-1764331200123-0-1-w7.3": "w7-1764331200123",
		"12-1764331200123-0-0":      "",
		"not-a-trigger-id":          "",
	} {
		if got := workflowInstanceOf(id); got != want {
			t.Errorf("workflowInstanceOf(%q) = %q, want %q", id, got, want)
		}
	}
}
