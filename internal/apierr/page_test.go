package apierr_test

import (
	"errors"
	"testing"

	"github.com/jobmesh/jobmesh/internal/apierr"
)

// TestSkip: a skip from 0 to MaxSkip passes; one below or above is a field error naming it.
func TestSkip(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		skip int32
		bad  bool
	}{{0, false}, {1, false}, {apierr.MaxSkip, false}, {-1, true}, {apierr.MaxSkip + 1, true}} {
		var fs apierr.Fields
		fs.Skip("skip", tt.skip)
		err := fs.Err()
		var got apierr.Fields
		if (err != nil) != tt.bad || (err != nil && (!errors.As(err, &got) || got[0].Field != "skip")) {
			t.Errorf("Skip(%d) = %v, want an error naming skip: %v", tt.skip, err, tt.bad)
		}
	}
}
