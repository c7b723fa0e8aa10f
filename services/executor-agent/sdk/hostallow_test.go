package sdk

import (
	"context"
	"net/http"
	"net/url"
	"strings"
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

// TestHTTPDialRefusesUnlistedHosts: the shared transport's dialer checks the allow-list itself,
// whatever made the request.
func TestHTTPDialRefusesUnlistedHosts(t *testing.T) {
	t.Parallel()
	e, err := New(Config{AppName: "a", LogDir: t.TempDir(), Insecure: true, HTTPAllowHosts: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	dial := e.httpClient.Transport.(*http.Transport).DialContext
	for _, addr := range []string{"127.0.0.2:1", "127.0.0.1:2", "169.254.169.254:80"} {
		if c, err := dial(context.Background(), "tcp", addr); err == nil || !strings.Contains(err.Error(), "not in the executor's allowed hosts") {
			if c != nil {
				c.Close()
			}
			t.Errorf("dial %s: got %v, want refused as not allowed", addr, err)
		}
	}
	if got, want := e.httpClient.Transport.(*http.Transport).MaxIdleConnsPerHost, DefaultHTTPMaxIdleConnsPerHost; got != want {
		t.Errorf("MaxIdleConnsPerHost: got %d, want the default %d", got, want)
	}
}
