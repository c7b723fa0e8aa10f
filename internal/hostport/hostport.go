// Package hostport checks executor addresses typed by people ("host:port"), so that a list of
// them never stores something that is not an address the scheduler could dial, and names the
// address a listener can advertise to other machines.
package hostport

import (
	"net"
	"net/netip"
	"strings"
)

// Valid reports whether a is host:port with a host that is an IP address or a DNS name
// (letters, digits, hyphens and dots, labels of 1-63 characters) and a decimal port 1-65535.
func Valid(a string) bool {
	host, port, err := net.SplitHostPort(a)
	if err != nil || !validPort(port) {
		return false
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return !strings.Contains(host, "%") // no IPv6 zone: it names a local interface
	}
	return validName(host)
}

// Advertised returns the address a listener at a can advertise to other machines: a itself, or
// "" when its host is unspecified (0.0.0.0, ::), which names no machine to dial.
func Advertised(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok && (t.IP == nil || t.IP.IsUnspecified()) {
		return ""
	}
	return a.String()
}

func validPort(p string) bool {
	if len(p) == 0 || len(p) > 5 || p[0] == '0' {
		return false
	}
	n := 0
	for _, c := range p {
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
	}
	return n <= 65535
}

func validName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
