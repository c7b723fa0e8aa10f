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
	"strings"
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

// maxHTTPLog caps how much of a response body goes to the run's log.
const maxHTTPLog = 64 << 10

// hostAllowed says whether host[:port] of u matches an allow-list entry: "host" (any port),
// "host:port", or "*.domain" (any subdomain, any port). Hosts compare case-insensitively.
func hostAllowed(allow []string, u *url.URL) bool {
	host := strings.ToLower(u.Hostname())
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
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
	for k, v := range req.Headers {
		if strings.EqualFold(k, "Host") {
			hr.Host = v // still checked: the allow-list applies to where we connect, u.Host
			continue
		}
		hr.Header.Set(k, v)
	}
	client := &http.Client{
		// A redirect is a new request: it must be allowed too.
		CheckRedirect: func(r *http.Request, via []*http.Request) error {
			if len(via) >= 10 {
				return errors.New("stopped after 10 redirects")
			}
			return e.checkHTTPURL(r.URL)
		},
	}
	job.Logf("%s %s", method, u.Redacted())
	resp, err := client.Do(hr)
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("http handler: no response within %v: %w", timeout, err)
		}
		return fmt.Errorf("http handler: %w", err)
	}
	defer resp.Body.Close()
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
