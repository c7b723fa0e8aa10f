package devstack_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"
)

// TestFiftyMegabyteLineOverREST: a script writes 50 MiB without a newline; over REST its run's
// tail streams them all and its lines read page after page to the end, where both answered
// "message larger than max" before.
func TestFiftyMegabyteLineOverREST(t *testing.T) {
	t.Parallel()
	st := startStack(t, "")
	base := "http://" + st.HTTPAddr + "/api/v1"
	const size = 50 << 20
	id := createJob(t, base, map[string]any{"name": "long", "group_id": st.GroupID, "glue_type": "GLUE_TYPE_GLUE_SHELL",
		"glue_source": "head -c " + strconv.Itoa(size) + " /dev/zero | tr '\\0' x", "schedule": map[string]any{"type": "SCHEDULE_TYPE_NONE"}})
	var trig struct {
		TriggerIDs []string `json:"trigger_ids"`
	}
	if code := call(t, "POST", base+"/jobs/"+id+":trigger", map[string]any{}, &trig); code != http.StatusOK || len(trig.TriggerIDs) != 1 {
		t.Fatalf("trigger = %d %+v", code, trig)
	}
	run := trig.TriggerIDs[0]
	waitRuns(t, base, id, func(rs []fullRun) bool { return len(rs) == 1 })

	// The tail follows the run to its end (the agent delivers 50 MiB in 64 KiB lines meanwhile).
	type lines struct {
		Lines []struct {
			Text string `json:"text"`
		} `json:"lines"`
		NextLine string `json:"next_line"`
		IsEnd    bool   `json:"is_end"`
	}
	tok, _ := tokens.Load(st.HTTPAddr)
	req, err := http.NewRequest("GET", base+"/logs/"+run+"/lines:tail", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok.(string))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	tailed := 0
	dec := json.NewDecoder(resp.Body)
	for {
		var msg struct {
			Result *lines          `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err := dec.Decode(&msg); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("tail: %v", err)
		}
		if msg.Error != nil {
			t.Fatalf("tail: %s", msg.Error)
		}
		for _, x := range msg.Result.Lines {
			tailed += len(x.Text)
		}
	}
	if resp.StatusCode != http.StatusOK || tailed != size {
		t.Errorf("tail = %d with %d bytes of lines, want 200 with %d", resp.StatusCode, tailed, size)
	}
	// The tail ended with the run: every line is stored.
	listed, from := 0, "1"
	for page := 0; ; page++ {
		var l lines
		if code := call(t, "GET", base+"/logs/"+run+"/lines?limit=10000&from_line="+from, nil, &l); code != http.StatusOK {
			t.Fatalf("GET lines from %s = %d", from, code)
		}
		for _, x := range l.Lines {
			listed += len(x.Text)
		}
		if l.IsEnd {
			break
		}
		if page > 1000 || l.NextLine == from {
			t.Fatalf("GET lines from %s: next %s, not moving on", from, l.NextLine)
		}
		from = l.NextLine
	}
	if listed != size {
		t.Errorf("lines listed hold %d bytes, want %d", listed, size)
	}
}
