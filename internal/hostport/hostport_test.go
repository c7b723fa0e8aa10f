package hostport

import (
	"net"
	"testing"
)

func TestValid(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:9999", true},
		{"[::1]:80", true},
		{"agent-1.example.com:443", true},
		{"agent_1:8080", true},
		{"host.:1", true},
		{"host:65535", true},
		{"host", false},
		{":80", false},
		{"host:", false},
		{"host:0", false},
		{"host:65536", false},
		{"host:+80", false},
		{"host:080", false},
		{"host:http", false},
		{"a b:80", false},
		{"a/b:80", false},
		{"http://host:80", false},
		{"host:80/path", false},
		{"-host:80", false},
		{"a..b:80", false},
		{"[fe80::1%eth0]:80", false},
		{"h\x00:80", false},
		{"x,y:80", false},
		{"ä.example:80", false},
	} {
		if got := Valid(tt.addr); got != tt.want {
			t.Errorf("Valid(%q) = %v, want %v", tt.addr, got, tt.want)
		}
	}
}

func TestAdvertised(t *testing.T) {
	for _, tt := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9010}, "127.0.0.1:9010"},
		{&net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 9010}, "10.1.2.3:9010"},
		{&net.TCPAddr{IP: net.IPv4zero, Port: 9010}, ""},
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 9010}, ""},
		{&net.TCPAddr{Port: 9010}, ""}, // no IP: every interface
		{&net.TCPAddr{IP: net.ParseIP("fd00::1"), Port: 9010}, "[fd00::1]:9010"},
	} {
		if got := Advertised(tt.addr); got != tt.want {
			t.Errorf("Advertised(%v) = %q, want %q", tt.addr, got, tt.want)
		}
	}
}

func TestXxlURL(t *testing.T) {
	for _, tt := range []struct {
		addr, want string // want "" for refused
	}{
		{"http://127.0.0.1:9999/", "http://127.0.0.1:9999/"},
		{"http://127.0.0.1:9999", "http://127.0.0.1:9999/"},
		{"https://exec.example.com/", "https://exec.example.com/"},
		{"http://exec-1.example.com:8081/xxl-executor", "http://exec-1.example.com:8081/xxl-executor/"},
		{"http://[fd00::1]:9999/", "http://[fd00::1]:9999/"},
		{"127.0.0.1:9999", ""},
		{"ftp://127.0.0.1:9999/", ""},
		{"http://user:pw@127.0.0.1:9999/", ""},
		{"http://127.0.0.1:9999/?x=1", ""},
		{"http://127.0.0.1:9999/#f", ""},
		{"http://127.0.0.1:0/", ""},
		{"http://127.0.0.1:99999/", ""},
		{"http://-bad-/", ""},
		{"http:///", ""},
		{"http://[fe80::1%25eth0]:80/", ""},
	} {
		got, ok := XxlURL(tt.addr)
		if ok != (tt.want != "") || got != tt.want {
			t.Errorf("XxlURL(%q) = %q, %v, want %q", tt.addr, got, ok, tt.want)
		}
	}
	for a, want := range map[string]bool{"127.0.0.1:9999": true, "http://127.0.0.1:9999/": true, "http://127.0.0.1:9999": false, "nope": false} {
		if got := Executor(a); got != want {
			t.Errorf("Executor(%q) = %v, want %v", a, got, want)
		}
	}
}

func TestListenLoopback(t *testing.T) {
	ln, err := ListenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a := ln.Addr().(*net.TCPAddr)
	if !a.IP.IsLoopback() || a.Port < lowPortMin || a.Port >= lowPortMax {
		t.Errorf("ListenLoopback on %v, want a loopback port in [%d, %d)", a, lowPortMin, lowPortMax)
	}
}
