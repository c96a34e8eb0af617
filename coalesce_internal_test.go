package sentinel

import (
	"fmt"
	"strings"
	"testing"
)

func TestNextBatch(t *testing.T) {
	call := func(key string, payload int) *coCall {
		return &coCall{args: []any{"ns", key, strings.Repeat("x", payload)}}
	}
	keys := func(cs []*coCall) string {
		var out []string
		for _, c := range cs {
			out = append(out, c.args[1].(string))
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct {
		name        string
		queue       []*coCall
		shared      bool
		batch, rest string
	}{
		{"distinct keys", []*coCall{call("a", 0), call("b", 0), call("c", 0)}, false, "a,b,c", ""},
		{"a second call on a key waits", []*coCall{call("a", 0), call("b", 0), call("a", 0), call("c", 0)}, false, "a,b,c", "a"},
		{"shared keys ride together", []*coCall{call("a", 0), call("a", 0), call("b", 0)}, true, "a,a,b", ""},
		{"bytes bound", []*coCall{call("a", coMaxBytes/2), call("b", coMaxBytes/2), call("c", 10)}, false, "a,c", "b"},
		{"an oversized call goes alone", []*coCall{call("a", 2*coMaxBytes), call("b", 10)}, false, "a", "b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, r := nextBatch(tc.queue, tc.shared)
			if keys(b) != tc.batch || keys(r) != tc.rest {
				t.Fatalf("batch %q rest %q, want %q and %q", keys(b), keys(r), tc.batch, tc.rest)
			}
		})
	}
	var q []*coCall
	for i := range coMaxBatch + 5 {
		q = append(q, call(fmt.Sprint(i), 0))
	}
	b, r := nextBatch(q, false)
	if len(b) != coMaxBatch || len(r) != 5 || r[0] != q[coMaxBatch] {
		t.Fatalf("count bound: batch %d rest %d", len(b), len(r))
	}
}
