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
