package devstack_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// schedulerStatus is GET /api/v1/scheduler/status.
type schedulerStatus struct {
	Leader bool   `json:"leader"`
	Epoch  string `json:"epoch"`
}

// TestStrangersAtTheGateway: what a stranger can do to `jobmesh dev` without a password. 40
// concurrent wrong logins (argon2id at 64 MiB) are answered at once, most with 429 "busy"
// rather than queued, and the scheduler keeps its leadership (same epoch); guesses sent with
// rotated X-Forwarded-For or a forged client address header still count against the stranger's
// real address; and a body over the limit is 413 before any token is asked for.
func TestStrangersAtTheGateway(t *testing.T) {
	st := startStack(t, "")
	base := "http://" + st.HTTPAddr + "/api/v1"
	call(t, "POST", base+"/users", map[string]any{"password": "tom-pass-phrase", "user": map[string]any{"username": "tom", "role": "ROLE_VIEWER"}}, nil)

	var before schedulerStatus
	deadline := time.Now().Add(30 * time.Second)
	for !before.Leader {
		if time.Now().After(deadline) {
			t.Fatal("no scheduler leader within 30 s")
		}
		call(t, "GET", base+"/scheduler/status", nil, &before)
		if !before.Leader {
			time.Sleep(50 * time.Millisecond)
		}
	}

	t.Run("40 concurrent wrong logins", func(t *testing.T) {
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			mu    sync.Mutex
			got   = map[int]int{}
			busy  int
		)
		for i := range 40 {
			wg.Go(func() {
				<-start
				body, _ := json.Marshal(map[string]any{"username": fmt.Sprintf("ghost-%d", i), "password": "wrong-guess"})
				resp, err := http.Post(base+"/auth/login", "application/json", bytes.NewReader(body))
				if err != nil {
					t.Errorf("login: %v", err)
					return
				}
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				mu.Lock()
				got[resp.StatusCode]++
				if strings.Contains(string(raw), "password checks in progress") {
					busy++
				}
				mu.Unlock()
			})
		}
		close(start)
		wg.Wait()
		t.Logf("40 concurrent wrong logins: %v, %d refused as busy", got, busy)
		if busy == 0 || got[http.StatusTooManyRequests]+got[http.StatusUnauthorized] != 40 {
			t.Errorf("40 concurrent wrong logins: %v (%d busy), want only 401 and 429, some 429 busy", got, busy)
		}
		var after schedulerStatus
		call(t, "GET", base+"/scheduler/status", nil, &after)
		if !after.Leader || after.Epoch != before.Epoch {
			t.Errorf("scheduler after the logins: %+v, want the leader of epoch %s still", after, before.Epoch)
		}
	})

	t.Run("forged client addresses", func(t *testing.T) {
		try := func(i int, pw string) int {
			body, _ := json.Marshal(map[string]any{"username": "tom", "password": pw})
			req, _ := http.NewRequest("POST", base+"/auth/login", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i))
			req.Header.Set("Grpc-Metadata-X-Jobmesh-Client-Addr", fmt.Sprintf("203.0.113.%d", i))
			req.Header.Set("Grpc-Metadata-X-Jobmesh-Gateway-Token", st.InternalToken) // even a leaked token is dropped
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("login: %v", err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		for i := range 5 {
			if code := try(i, "wrong-guess"); code != http.StatusUnauthorized {
				t.Fatalf("guess %d = %d, want 401", i+1, code)
			}
		}
		if code := try(99, "tom-pass-phrase"); code != http.StatusTooManyRequests {
			t.Errorf("the right password after 5 guesses from rotated addresses = %d, want 429", code)
		}
	})

	t.Run("errors do not echo a megabyte", func(t *testing.T) {
		long := strings.Repeat("x", 1<<20)
		for _, body := range []map[string]any{
			{"name": "j", "group_id": st.GroupID, "handler": "demo", "schedule": map[string]any{"type": "SCHEDULE_TYPE_CRON", "expression": "0 * * * * ?", "time_zone": long}},
			{"name": "j", "group_id": st.GroupID, "handler": "demo", "route_strategy": long},
		} {
			b, _ := json.Marshal(body)
			req, _ := http.NewRequest("POST", base+"/jobs", bytes.NewReader(b))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+login(t, st, "admin", st.AdminPassword))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("POST: %v", err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || len(raw) > 8<<10 || !strings.Contains(string(raw), "bytes)") {
				t.Errorf("POST with a 1 MB value = %d, %d bytes (%.300s), want 400 under 8 KiB with the value cut", resp.StatusCode, len(raw), raw)
			}
		}
	})

	t.Run("a body over the limit", func(t *testing.T) {
		req, _ := http.NewRequest("POST", base+"/jobs", io.MultiReader(strings.NewReader(`{"job":{"name":"`), io.LimitReader(neverEnding('a'), 200<<20)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("POST 200 MB: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("POST 200 MB without a token = %d, want 413", resp.StatusCode)
		}
	})
}

// neverEnding reads as an endless run of one byte.
type neverEnding byte

func (b neverEnding) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(b)
	}
	return len(p), nil
}
