package sdk

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// HTTPHandler is the name of the built-in BEAN handler that makes one HTTP request (XXL-JOB's
// httpJobHandler). Its params are a JSON HTTPRequest. Only hosts in Config.HTTPAllowHosts may be
// called: with none configured every request is refused, so a job cannot reach internal
// services the executor happens to see (XXL-JOB's httpJobHandler SSRF, CVE-2025-7787).
const HTTPHandler = "http"

// HTTPRequest is the params of the "http" handler.
type HTTPRequest struct {
	// URL is an http or https URL whose host is allowed by Config.HTTPAllowHosts. Required.
	URL string `json:"url"`
	// Method defaults to GET, or POST when Body is set.
	Method string `json:"method,omitempty"`
	// Headers are sent as given.
	Headers map[string]string `json:"headers,omitempty"`
	// Body is sent as the request body.
	Body string `json:"body,omitempty"`
	// TimeoutSeconds bounds the request (the fire's own timeout applies too). Default 60.
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
	// ExpectStatus is the status that means success; 0 means any 2xx.
	ExpectStatus int `json:"expect_status,omitempty"`
}

// maxHTTPLog caps how much of a response body goes to the run's log; past it up to maxHTTPDrain
// more is read and discarded, so that the connection can serve the next fire.
const (
	maxHTTPLog   = 64 << 10
	maxHTTPDrain = 256 << 10
)

// DefaultHTTPMaxIdleConnsPerHost is Config.HTTPMaxIdleConnsPerHost's default.
const DefaultHTTPMaxIdleConnsPerHost = 64

// newHTTPClient is the "http" handler's client, one per executor: its fires share one transport,
// so a connection (HTTP/1.1 keep-alive, or HTTP/2 where a TLS target offers it) serves fire after
// fire instead of each fire dialling its own. The allow-list is checked on every request the
// client makes (CheckRedirect: a redirect is a new request) and on every connection it dials,
// so nothing reaches a host the list does not name; the one exception is a proxy the
// environment sets (HTTPS_PROXY, HTTP_PROXY), which the request's own URL was checked for.
func (e *Executor) newHTTPClient() *http.Client {
	allow := e.cfg.HTTPAllowHosts
	var proxies sync.Map // "host:port" of the environment's proxies that requests went through
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy: func(r *http.Request) (*url.URL, error) {
			u, err := http.ProxyFromEnvironment(r)
			if u != nil {
				proxies.Store(canonicalAddr(u), struct{}{})
			}
			return u, err
		},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, fmt.Errorf("http handler: dial %s: %w", addr, err)
			}
			if _, proxy := proxies.Load(addr); !proxy && !hostPortAllowed(allow, host, port) {
				return nil, fmt.Errorf("http handler: dial %s: not in the executor's allowed hosts %q", addr, allow)
			}
			return dialer.DialContext(ctx, network, addr)
		},
		ForceAttemptHTTP2:     true, // a custom DialContext turns HTTP/2 off unless asked for
		MaxIdleConns:          0,    // no overall cap: MaxIdleConnsPerHost bounds each target
		MaxIdleConnsPerHost:   max(e.cfg.HTTPMaxIdleConnsPerHost, 1),
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	return &http.Client{
		Transport: tr,
		// A redirect is a new request: it must be allowed too.
		CheckRedirect: func(r *http.Request, via []*http.Request) error {
			if len(via) >= 10 {
				return errors.New("stopped after 10 redirects")
			}
			return e.checkHTTPURL(r.URL)
		},
	}
}

// canonicalAddr is u's "host:port", with the scheme's port when u names none (as the transport
// dials it).
func canonicalAddr(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443", "socks5": "1080", "socks5h": "1080"}[u.Scheme]
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// hostAllowed says whether host[:port] of u matches an allow-list entry: "host" (any port),
// "host:port", or "*.domain" (any subdomain, any port). Hosts compare case-insensitively.
func hostAllowed(allow []string, u *url.URL) bool {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return hostPortAllowed(allow, u.Hostname(), port)
}

// hostPortAllowed is hostAllowed for a host (without brackets) and a port.
func hostPortAllowed(allow []string, host, port string) bool {
	host = strings.ToLower(host)
	for _, a := range allow {
		a = strings.ToLower(strings.TrimSpace(a))
		if a == "" {
			continue
		}
		h, p, err := net.SplitHostPort(a)
		if err != nil {
			h, p = strings.Trim(a, "[]"), ""
		}
		if p != "" && p != port {
			continue
		}
		if suffix, ok := strings.CutPrefix(h, "*."); ok {
			if strings.HasSuffix(host, "."+suffix) {
				return true
			}
			continue
		}
		if h == host {
			return true
		}
	}
	return false
}

// checkHTTPURL refuses what the "http" handler may not call.
func (e *Executor) checkHTTPURL(u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("http handler: scheme %q: want http or https", u.Scheme)
	}
	if u.Host == "" {
		return errors.New("http handler: url has no host")
	}
	if !hostAllowed(e.cfg.HTTPAllowHosts, u) {
		if len(e.cfg.HTTPAllowHosts) == 0 {
			return fmt.Errorf("http handler: host %s is not allowed: this executor allows no hosts (set HTTPAllowHosts / --http-allow-hosts; deny by default against SSRF, CVE-2025-7787)", u.Host)
		}
		return fmt.Errorf("http handler: host %s is not in the executor's allowed hosts %q", u.Host, e.cfg.HTTPAllowHosts)
	}
	return nil
}

// Headers the built-in "http" handler sends with every request.
const (
	// HeaderTriggerID carries the fire's trigger id (Job.TriggerID).
	HeaderTriggerID = "X-Jobmesh-Trigger-Id"
	// HeaderJobID carries the job id.
	HeaderJobID = "X-Jobmesh-Job-Id"
)

// httpHandler is the built-in "http" handler.
func (e *Executor) httpHandler(ctx context.Context, job *Job) error {
	var req HTTPRequest
	dec := json.NewDecoder(strings.NewReader(job.Params))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return fmt.Errorf(`http handler params: want JSON {"url", "method", "headers", "body", "timeout_seconds", "expect_status"}: %w`, err)
	}
	u, err := url.Parse(req.URL)
	if err != nil {
		return fmt.Errorf("http handler: url: %w", err)
	}
	if err := e.checkHTTPURL(u); err != nil {
		return err
	}
	method := strings.ToUpper(req.Method)
	if method == "" {
		method = http.MethodGet
		if req.Body != "" {
			method = http.MethodPost
		}
	}
	timeout := time.Duration(req.TimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var body io.Reader
	if req.Body != "" {
		body = strings.NewReader(req.Body)
	}
	hr, err := http.NewRequestWithContext(rctx, method, u.String(), body)
	if err != nil {
		return fmt.Errorf("http handler: %w", err)
	}
	// The fire's identity, so that the receiver can tell fires apart and drop a repeat: a retry
	// is another attempt with its own id, a fire sent twice has the same one. The job's own
	// headers may override them.
	hr.Header.Set(HeaderTriggerID, job.TriggerID)
	hr.Header.Set(HeaderJobID, strconv.FormatInt(job.ID, 10))
	for k, v := range req.Headers {
		if strings.EqualFold(k, "Host") {
			hr.Host = v // still checked: the allow-list applies to where we connect, u.Host
			continue
		}
		hr.Header.Set(k, v)
	}
	job.Logf("%s %s", method, u.Redacted())
	resp, err := e.httpClient.Do(hr)
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("http handler: no response within %v: %w", timeout, err)
		}
		return fmt.Errorf("http handler: %w", err)
	}
	defer func() {
		// Read what is left (up to a bound) so the connection goes back to the pool.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxHTTPDrain))
		resp.Body.Close()
	}()
	job.Logf("status %s", resp.Status)
	br := bufio.NewReader(io.LimitReader(resp.Body, maxHTTPLog))
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			job.Logf("%s", strings.TrimSuffix(line, "\n"))
		}
		if err != nil {
			break
		}
	}
	ok := resp.StatusCode >= 200 && resp.StatusCode < 300
	want := "2xx"
	if req.ExpectStatus != 0 {
		ok, want = resp.StatusCode == req.ExpectStatus, fmt.Sprint(req.ExpectStatus)
	}
	if !ok {
		return fmt.Errorf("http handler: got status %d, want %s", resp.StatusCode, want)
	}
	job.SetMessage("HTTP " + resp.Status)
	return nil
}
