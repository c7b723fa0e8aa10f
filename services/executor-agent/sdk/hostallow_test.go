package sdk

import (
	"net/url"
	"testing"
)

func TestHostAllowed(t *testing.T) {
	t.Parallel()
	allow := []string{"api.example.com", "10.0.0.5:8080", "*.corp.test", "[::1]:9000"}
	for _, tt := range []struct {
		url  string
		want bool
	}{
		{"https://api.example.com/x", true},
		{"http://API.Example.com:81/x", true}, // any port, any case
		{"http://example.com/", false},
		{"http://api.example.com.evil.test/", false},
		{"http://10.0.0.5:8080/", true},
		{"http://10.0.0.5/", false}, // port 80, not 8080
		{"http://a.b.corp.test/", true},
		{"http://corp.test/", false},
		{"http://[::1]:9000/", true},
		{"http://[::1]:9001/", false},
		{"http://169.254.169.254/latest/meta-data", false},
	} {
		u, err := url.Parse(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		if got := hostAllowed(allow, u); got != tt.want {
			t.Errorf("hostAllowed(%s): got %v, want %v", tt.url, got, tt.want)
		}
	}
	u, _ := url.Parse("http://api.example.com/")
	if hostAllowed(nil, u) {
		t.Error("an empty allow-list allowed a host")
	}
}
