package xxl_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/jobmesh/jobmesh/internal/xxl"
)

// TestUnmarshalCallbacks: both callback bodies (2.x's list, 3.5's wrapped list with logDateTime)
// read alike, leniently as Gson does; a body of neither shape is an error that says where.
func TestUnmarshalCallbacks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		want       []xxl.HandleCallbackParam
		err        string
	}{
		{name: "2.x list", body: `[{"logId":7,"logDateTim":5,"handleCode":200},{"logId":"8","logDateTim":6,"handleCode":500,"handleMsg":"x"}]`,
			want: []xxl.HandleCallbackParam{{LogID: 7, LogDateTim: 5, HandleCode: 200}, {LogID: 8, LogDateTim: 6, HandleCode: 500, HandleMsg: "x"}}},
		{name: "3.5 wrapped", body: ` {"callbackList":[{"logId":9,"logDateTime":5,"handleCode":"502"}]}`,
			want: []xxl.HandleCallbackParam{{LogID: 9, LogDateTim: 5, LogDateTime: 5, HandleCode: 502}}},
		{name: "empty list", body: `[]`, want: []xxl.HandleCallbackParam{}},
		{name: "object without callbackList", body: `{"logId":1}`, err: "callbackList"},
		{name: "null callbackList", body: `{"callbackList":null}`, err: "callbackList"},
		{name: "a log id not a number", body: `[{"logId":"abc"}]`, err: "$[0].logId"},
		{name: "malformed", body: `[{"logId":1,`, err: "$"},
		{name: "data after the value", body: `[] []`, err: "$"},
		{name: "a string", body: `"x"`, err: "$"},
	} {
		got, err := xxl.UnmarshalCallbacks([]byte(tc.body))
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: UnmarshalCallbacks = %v, %v; want an error naming %s", tc.name, got, err, tc.err)
		case tc.err == "" && (err != nil || !reflect.DeepEqual(got, tc.want)):
			t.Errorf("%s: UnmarshalCallbacks = %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}
