package xxl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// DefaultTimeout bounds one call when the context has no earlier deadline: XXL-JOB's admin and
// executors read with 3 s.
const DefaultTimeout = 3 * time.Second

// maxAnswer bounds the body read from the other side (a /log answer carries log lines).
const maxAnswer = 16 << 20

// Client makes the calls of one side to the other: POST {base}{endpoint} with a JSON body and the
// access token, reading a ReturnT. The zero value is ready (it uses http.DefaultClient).
type Client struct {
	// HTTP sends the requests; nil means http.DefaultClient.
	HTTP *http.Client
}

// ErrBadAnswer is wrapped by Call when the other side answered but not with HTTP 200 and a
// ReturnT body: XXL-JOB counts that as a failed call, like a refused connection.
var ErrBadAnswer = errors.New("xxl: bad answer")

// Endpoint returns base with a trailing "/" and the endpoint appended ("http://h:1/" + "run"),
// as XXL-JOB builds its URLs.
func Endpoint(base, endpoint string) string {
	if !strings.HasSuffix(base, "/") {
		base += "/"
	}
	return base + endpoint
}

// Call POSTs body (Gson-encoded; a string is sent as a JSON string) to Endpoint(base, endpoint)
// with the token (none when empty) and returns the answer. An error means the call failed on the
// wire (no answer, HTTP status not 200, a body that is not a ReturnT); a ReturnT with code 500 is
// an answer, not an error.
func (c *Client) Call(ctx context.Context, base, token, endpoint string, body any) (ReturnT, error) {
	payload, err := Marshal(body)
	if err != nil {
		return ReturnT{}, fmt.Errorf("xxl %s: encode: %w", endpoint, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	url := Endpoint(base, endpoint)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(payload))
	if err != nil {
		return ReturnT{}, fmt.Errorf("xxl %s: %w", url, err)
	}
	req.Header.Set("Content-Type", "application/json;charset=UTF-8")
	req.Header.Set("Accept-Charset", "application/json;charset=UTF-8")
	if token != "" {
		req.Header.Set(TokenHeader, token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return ReturnT{}, fmt.Errorf("xxl %s: %w", url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return ReturnT{}, fmt.Errorf("xxl %s: read answer: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return ReturnT{}, fmt.Errorf("xxl %s: HTTP %d: %w", url, resp.StatusCode, ErrBadAnswer)
	}
	var rt ReturnT
	if err := Unmarshal(data, &rt); err != nil {
		return ReturnT{}, fmt.Errorf("xxl %s: %w: %v", url, ErrBadAnswer, err)
	}
	return rt, nil
}

// Beat asks an executor whether it is alive (FAILOVER routing): nil for code 200.
func (c *Client) Beat(ctx context.Context, addr, token string) (ReturnT, error) {
	return c.Call(ctx, addr, token, "beat", "")
}

// IdleBeat asks an executor whether a job is idle on it (BUSYOVER routing).
func (c *Client) IdleBeat(ctx context.Context, addr, token string, jobID int64) (ReturnT, error) {
	return c.Call(ctx, addr, token, "idleBeat", IdleBeatParam{JobID: jobID})
}

// Run queues one run on an executor.
func (c *Client) Run(ctx context.Context, addr, token string, p TriggerParam) (ReturnT, error) {
	return c.Call(ctx, addr, token, "run", p)
}

// Kill kills a job's thread on an executor: the running run and every queued one.
func (c *Client) Kill(ctx context.Context, addr, token string, jobID int64) (ReturnT, error) {
	return c.Call(ctx, addr, token, "kill", KillParam{JobID: jobID})
}

// Log reads a run's log lines from fromLine (1-based) on.
func (c *Client) Log(ctx context.Context, addr, token string, p LogParam) (LogResult, ReturnT, error) {
	rt, err := c.Call(ctx, addr, token, "log", p)
	if err != nil || rt.Code != CodeSuccess {
		return LogResult{}, rt, err
	}
	var lr LogResult
	if len(rt.Content) > 0 {
		if err := Unmarshal(rt.Content, &lr); err != nil {
			return LogResult{}, rt, fmt.Errorf("xxl log: %w: %v", ErrBadAnswer, err)
		}
	}
	return lr, rt, nil
}

// SplitLines splits a /log answer's logContent into its lines (each ends in "\n").
func SplitLines(content string) []string {
	if content == "" {
		return nil
	}
	lines := strings.Split(strings.TrimSuffix(content, "\n"), "\n")
	return lines
}
