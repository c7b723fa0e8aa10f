// Package xxl speaks XXL-JOB's executor protocol (xxl-job-core 2.4.x): the JSON bodies both sides
// exchange, encoded as Gson writes them and decoded as leniently as Gson reads them, and an HTTP
// client for the admin → executor calls (beat, idleBeat, run, kill, log). The scheduler drives
// XXL-JOB executors with it, the gateway's admin API parses executor calls with it, and the test
// executor (internal/xxltest) serves it.
package xxl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// TokenHeader carries the access token on every request in both directions.
const TokenHeader = "XXL-JOB-ACCESS-TOKEN"

// Codes of ReturnT and of a callback's handleCode.
const (
	CodeSuccess = 200
	CodeFail    = 500
	CodeTimeout = 502
)

// Messages the executor answers with, verbatim (xxl-job-core 2.4.2).
const (
	MsgTokenWrong      = "The access token is wrong."
	MsgMethodNotAllow  = "invalid request, HttpMethod not support."
	MsgRepeatTrigger   = "repeate trigger job, logId:"
	MsgIdleBusy        = "job thread is running or has trigger queue."
	MsgAlreadyKilled   = "job thread already killed."
	MsgKillReason      = "scheduling center kill job."
	MsgDestroyReason   = "web container destroy and kill the job."
	MsgKilledRunning   = " [job running, killed]"
	MsgKilledQueued    = " [job not executed, in the job queue, killed.]"
	MsgTimeout         = "job execute timeout "
	MsgDiscardLater    = "block strategy effect：Discard Later"
	MsgCoverEarly      = "block strategy effect：Cover Early"
	MsgChangeHandler   = "change jobhandler or glue type, and terminate the old job thread."
	MsgChangeSource    = "change job source or glue type, and terminate the old job thread."
	MsgResultLost      = "job handle result lost."
	MsgLogFileNotExist = "readLog fail, logFile not exists"
)

// KilledMessage reports whether a callback's handleMsg says the run was killed (by /kill, by a
// COVER_EARLY trigger, by a replaced handler or by the executor's shutdown) rather than failed.
func KilledMessage(msg string) bool {
	return strings.HasSuffix(msg, MsgKilledRunning) || strings.HasSuffix(msg, MsgKilledQueued)
}

// ReturnT is the envelope of every response: only Code decides success, Msg says why.
type ReturnT struct {
	Code    int             `json:"code"`
	Msg     string          `json:"msg,omitempty"`
	Content json.RawMessage `json:"content,omitempty"`
}

// TriggerParam is the body of /run. Ids and times are 64-bit here; XXL-JOB's jobId, timeout and
// broadcast fields are Java ints, so a job id above 2^31-1 cannot reach a Java executor.
type TriggerParam struct {
	JobID                 int64  `json:"jobId"`
	ExecutorHandler       string `json:"executorHandler"`
	ExecutorParams        string `json:"executorParams"`
	ExecutorBlockStrategy string `json:"executorBlockStrategy"`
	ExecutorTimeout       int64  `json:"executorTimeout"`
	LogID                 int64  `json:"logId"`
	LogDateTime           int64  `json:"logDateTime"`
	GlueType              string `json:"glueType"`
	GlueSource            string `json:"glueSource"`
	GlueUpdatetime        int64  `json:"glueUpdatetime"`
	BroadcastIndex        int64  `json:"broadcastIndex"`
	BroadcastTotal        int64  `json:"broadcastTotal"`
}

// IdleBeatParam is the body of /idleBeat.
type IdleBeatParam struct {
	JobID int64 `json:"jobId"`
}

// KillParam is the body of /kill: XXL-JOB kills by job, not by run.
type KillParam struct {
	JobID int64 `json:"jobId"`
}

// LogParam is the body of /log. Note the spelling logDateTim.
type LogParam struct {
	LogDateTim  int64 `json:"logDateTim"`
	LogID       int64 `json:"logId"`
	FromLineNum int64 `json:"fromLineNum"`
}

// LogResult is the content of a /log answer: lines FromLineNum..ToLineNum (1-based, each ending
// in "\n"); IsEnd is true only for a log the executor does not have.
type LogResult struct {
	FromLineNum int64  `json:"fromLineNum"`
	ToLineNum   int64  `json:"toLineNum"`
	LogContent  string `json:"logContent"`
	IsEnd       bool   `json:"isEnd"`
}

// HandleCallbackParam is one item of an executor's callback list. XXL-JOB 2.x spells the run's
// log time logDateTim; XXL-JOB 3.x logDateTime, which is read and written only when set.
type HandleCallbackParam struct {
	LogID       int64  `json:"logId"`
	LogDateTim  int64  `json:"logDateTim"`
	LogDateTime int64  `json:"logDateTime,omitempty"`
	HandleCode  int64  `json:"handleCode"`
	HandleMsg   string `json:"handleMsg,omitempty"`
}

// CallbackRequest is XXL-JOB 3.5's api/callback body: the list wrapped in an object.
type CallbackRequest struct {
	CallbackList []HandleCallbackParam `json:"callbackList"`
}

// UnmarshalCallbacks reads an api/callback body: XXL-JOB 2.x's list, or 3.5's CallbackRequest
// ({"callbackList":[…]}). An item that has only logDateTime gets it as LogDateTim too.
func UnmarshalCallbacks(body []byte) ([]HandleCallbackParam, error) {
	var list []HandleCallbackParam
	if b := bytes.TrimSpace(body); len(b) > 0 && b[0] == '{' {
		var req CallbackRequest
		if err := Unmarshal(b, &req); err != nil {
			return nil, err
		}
		if req.CallbackList == nil {
			return nil, errors.New("$: want a list of callbacks, or an object with callbackList")
		}
		list = req.CallbackList
	} else if err := Unmarshal(b, &list); err != nil {
		return nil, err
	}
	for i := range list {
		if list[i].LogDateTim == 0 {
			list[i].LogDateTim = list[i].LogDateTime
		}
	}
	return list, nil
}

// RegistryParam is the body of /api/registry and /api/registryRemove.
type RegistryParam struct {
	RegistryGroup string `json:"registryGroup"`
	RegistryKey   string `json:"registryKey"`
	RegistryValue string `json:"registryValue"`
}

// Marshal encodes v as Gson does by default: empty optional strings left out (the struct tags
// say which), and HTML characters in strings escaped (<, >, &, = and ').
func Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(true)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	out := bytes.TrimRight(b.Bytes(), "\n")
	// '=' and '\'' can only occur inside JSON strings, so replacing them everywhere is safe.
	out = bytes.ReplaceAll(out, []byte("="), []byte(`\u003d`))
	out = bytes.ReplaceAll(out, []byte("'"), []byte(`\u0027`))
	return out, nil
}

// Unmarshal decodes data into v (a pointer to a struct, or to a slice of structs) as leniently as
// Gson: unknown fields are ignored, missing or null ones keep their zero value, and a number may
// come as a string ({"jobId":"79"}). An error names the field it could not read.
func Unmarshal(data []byte, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("xxl: Unmarshal needs a non-nil pointer, got %T", v)
	}
	return decodeValue(bytes.TrimSpace(data), rv.Elem(), "$")
}

func decodeValue(raw []byte, v reflect.Value, path string) error {
	if len(raw) == 0 {
		return fmt.Errorf("%s: empty input", path)
	}
	if string(raw) == "null" {
		v.SetZero()
		return nil
	}
	switch v.Kind() {
	case reflect.Struct:
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(raw, &fields); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		t := v.Type()
		for i := range t.NumField() {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			fr, ok := fields[name]
			if !ok {
				continue
			}
			if err := decodeValue(fr, v.Field(i), path+"."+name); err != nil {
				return err
			}
		}
		return nil
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 { // json.RawMessage
			v.SetBytes(append([]byte(nil), raw...))
			return nil
		}
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		s := reflect.MakeSlice(v.Type(), len(items), len(items))
		for i, it := range items {
			if err := decodeValue(it, s.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		v.Set(s)
		return nil
	case reflect.Int, reflect.Int32, reflect.Int64:
		s := string(raw)
		if raw[0] == '"' {
			if err := json.Unmarshal(raw, &s); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			s = strings.TrimSpace(s)
		}
		n, err := strconv.ParseInt(s, 10, v.Type().Bits())
		if err != nil {
			// Gson reads 79.0 as 79 for an int as well.
			f, ferr := strconv.ParseFloat(s, 64)
			if ferr != nil || f != float64(int64(f)) {
				return fmt.Errorf("%s: not an integer: %s", path, raw)
			}
			n = int64(f)
		}
		v.SetInt(n)
		return nil
	case reflect.Bool:
		s := string(raw)
		if raw[0] == '"' {
			_ = json.Unmarshal(raw, &s)
		}
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("%s: not a boolean: %s", path, raw)
		}
		v.SetBool(b)
		return nil
	case reflect.String:
		if raw[0] != '"' { // Gson reads a bare number or boolean into a String field
			var x any
			if err := json.Unmarshal(raw, &x); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			if _, scalar := x.(map[string]any); scalar {
				return fmt.Errorf("%s: not a string: %s", path, raw)
			}
			if _, arr := x.([]any); arr {
				return fmt.Errorf("%s: not a string: %s", path, raw)
			}
			v.SetString(string(raw))
			return nil
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		v.SetString(s)
		return nil
	default:
		if err := json.Unmarshal(raw, v.Addr().Interface()); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		return nil
	}
}
