// Package hostport checks executor addresses typed by people ("host:port"), so that a list of
// them never stores something that is not an address the scheduler could dial, and names the
// address a listener can advertise to other machines.
package hostport

import (
	"math/rand/v2"
	"net"
	"net/netip"
	"net/url"
	"strconv"
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

// XxlURL checks the address of an XXL-JOB executor (its registryValue, or one typed into a
// MANUAL group): an http or https URL with a valid host, an optional port, and an optional path,
// without user info, query or fragment. It returns the address as the scheduler calls it, with
// the trailing "/" XXL-JOB's admin adds before appending an endpoint ("run", "beat", ...).
func XxlURL(a string) (string, bool) {
	u, err := url.Parse(a)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.User != nil || u.RawQuery != "" || u.ForceQuery ||
		u.Fragment != "" || strings.Contains(a, "#") || u.Opaque != "" {
		return "", false
	}
	host, port := u.Hostname(), u.Port()
	if port != "" && !validPort(port) || strings.Contains(host, "%") {
		return "", false
	}
	if _, err := netip.ParseAddr(host); err != nil && !validName(host) {
		return "", false
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
		u.RawPath = ""
	}
	return u.String(), true
}

// Executor reports whether a is an executor address: a jobmesh agent's host:port (Valid) or an
// XXL-JOB executor's URL as XxlURL returns it.
func Executor(a string) bool {
	if Valid(a) {
		return true
	}
	n, ok := XxlURL(a)
	return ok && n == a
}

// ListenLoopback listens on a free loopback port below Linux's ephemeral range (32768–60999),
// for a test or tool that must know an address before it starts what serves it there: a port
// the kernel picks (":0"), once closed, is soon the source port of some outgoing connection, and
// the later bind fails. It falls back to a port the kernel picks when it finds none free.
func ListenLoopback() (net.Listener, error) {
	for range 50 {
		port := lowPortMin + rand.IntN(lowPortMax-lowPortMin)
		if ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
			return ln, nil
		}
	}
	return net.Listen("tcp", "127.0.0.1:0")
}

// The ports ListenLoopback picks from: registered ports below the ephemeral range.
const (
	lowPortMin = 20000
	lowPortMax = 32768
)
