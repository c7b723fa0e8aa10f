package sdk

import (
	"slices"
	"strings"
	"testing"
)

func TestContextEnv(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		ctx  map[string]string
		want []string
		left int
	}{
		{"no context", nil, []string{"JOBMESH_OUTPUT_FILE=/o"}, 0},
		{"names", map[string]string{"extract.rows": "10", "Rows": "1", "ünï-code": "u"},
			[]string{"JOBMESH_OUTPUT_FILE=/o", "JOBMESH_CONTEXT_FILE=/c", "JOBMESH_CTX_ROWS=1", "JOBMESH_CTX_EXTRACT_ROWS=10", "JOBMESH_CTX___N___CODE=u"}, 0},
		{"first in byte order wins a name", map[string]string{"a.b": "dot", "a_b": "underscore", "A-B": "dash"},
			[]string{"JOBMESH_OUTPUT_FILE=/o", "JOBMESH_CONTEXT_FILE=/c", "JOBMESH_CTX_A_B=dash"}, 2},
		{"NUL and size left to the file", map[string]string{"nul": "a\x00b", "big": strings.Repeat("x", maxContextEnv), "ok": "y"},
			[]string{"JOBMESH_OUTPUT_FILE=/o", "JOBMESH_CONTEXT_FILE=/c", "JOBMESH_CTX_OK=y"}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, left := contextEnv(&Job{Context: c.ctx}, fireFiles{context: "/c", output: "/o"})
			if !slices.Equal(got, c.want) || left != c.left {
				t.Fatalf("got %q left %d, want %q left %d", got, left, c.want, c.left)
			}
		})
	}
}
