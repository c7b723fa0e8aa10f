package devstack_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestListFiltersAreLiteralAndBounded: over REST, % and _ in a list filter match only
// themselves, and a filter longer than 256 characters is a 400 naming it (a 100,000-character
// one used to be a 500).
func TestListFiltersAreLiteralAndBounded(t *testing.T) {
	t.Parallel()
	st := startStack(t, "")
	base := "http://" + st.HTTPAddr + "/api/v1"
	for _, title := range []string{"half 50% off", "half 500 off"} {
		if code := call(t, "POST", base+"/executor-groups", map[string]any{"app_name": strings.ReplaceAll(title[5:8], "%", "p") + "-app",
			"title": title, "address_type": "ADDRESS_TYPE_MANUAL", "manual_addresses": []string{"127.0.0.1:1"}}, nil); code != http.StatusOK {
			t.Fatalf("create group %q = %d", title, code)
		}
	}
	var groups struct {
		Groups []struct {
			Title string `json:"title"`
		} `json:"groups"`
	}
	if code := call(t, "GET", base+"/executor-groups?title="+url.QueryEscape("50%"), nil, &groups); code != http.StatusOK ||
		len(groups.Groups) != 1 || groups.Groups[0].Title != "half 50% off" {
		t.Errorf("groups titled like 50%% = %d %+v, want only %q", code, groups.Groups, "half 50% off")
	}
	long := strings.Repeat("x", 100000)
	for _, tt := range []struct{ path, field string }{
		{"/jobs?name=", "name"}, {"/jobs?handler=", "handler"}, {"/jobs?author=", "author"},
		{"/executor-groups?app_name=", "app_name"}, {"/executor-groups?title=", "title"}, {"/users?username=", "username"},
	} {
		var e struct {
			Message string `json:"message"`
		}
		if code := call(t, "GET", base+tt.path+long, nil, &e); code != http.StatusBadRequest || !strings.HasPrefix(e.Message, tt.field+":") {
			t.Errorf("GET %s<100,000 chars> = %d %q, want 400 naming %s", tt.path, code, e.Message, tt.field)
		}
		if code := call(t, "GET", base+tt.path+long[:256], nil, nil); code != http.StatusOK {
			t.Errorf("GET %s<256 chars> = %d, want 200", tt.path, code)
		}
	}
}
