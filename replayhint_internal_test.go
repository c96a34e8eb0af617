package sentinel

import (
	"fmt"
	"testing"
)

// The hints are bounded: the oldest keys are forgotten first.
func TestReplayHintsBounded(t *testing.T) {
	var h replayHints
	n := maxReplayHints + 100
	for i := range n {
		h.add("ns", fmt.Sprint(i))
	}
	if len(h.keys) != maxReplayHints || len(h.fifo) != maxReplayHints {
		t.Fatalf("%d keys, %d slots; want %d", len(h.keys), len(h.fifo), maxReplayHints)
	}
	for _, c := range []struct {
		key  int
		want bool
	}{{0, false}, {99, false}, {100, true}, {n - 1, true}} {
		if got := h.has("ns", fmt.Sprint(c.key)); got != c.want {
			t.Errorf("key %d remembered: %v, want %v", c.key, got, c.want)
		}
	}
	if h.has("other", fmt.Sprint(n-1)) {
		t.Error("a key is remembered per namespace")
	}
	h.drop("ns", fmt.Sprint(n-1))
	if h.has("ns", fmt.Sprint(n-1)) {
		t.Error("dropped key still remembered")
	}
}
