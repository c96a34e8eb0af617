package main

import (
	"testing"
	"time"
)

func TestInversions(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	// Sorted by acquisition.
	evs := []holdEvent{
		{req: at(10), acq: at(20)}, // b
		{req: at(0), acq: at(30)},  // a: asked first, overtaken by b
		{req: at(11), acq: at(40)}, // c
		{req: at(9), acq: at(50)},  // d: overtaken by b (1 ms later) and c (2 ms later)
	}
	if got := inversions(evs, 2*time.Millisecond); got != 2 {
		t.Fatalf("inversions(2ms) = %d, want 2 (a by b, d by c)", got)
	}
	if got := inversions(evs, 0); got != 3 {
		t.Fatalf("inversions(0) = %d, want 3 (a by b, d by b, d by c)", got)
	}
	if got := inversions(nil, 0); got != 0 {
		t.Fatalf("inversions(none) = %d", got)
	}
}
