package sentinel

import (
	"testing"
	"time"
)

// A waiter whose registration found the key's row locked re-checks after
// a millisecond, doubling up to WaitRecheck, and never later than the
// holder's expiry; any other wait sleeps at least 10 ms and starts the
// backoff over.
func TestWaitDelay(t *testing.T) {
	const maxRecheck = 250 * time.Millisecond
	recheck := firstRecheck
	var got []time.Duration
	for range 10 {
		var sleep time.Duration
		sleep, recheck = waitDelay(time.Hour, recheck, maxRecheck, true)
		got = append(got, sleep)
	}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 64, 128, 250, 250}
	for i := range want {
		if w := want[i] * time.Millisecond; got[i] != w {
			t.Fatalf("re-check %d after a locked row: %v, want %v (all: %v)", i+1, got[i], w, got)
		}
	}
	if sleep, _ := waitDelay(3*time.Millisecond, 16*time.Millisecond, maxRecheck, true); sleep != 3*time.Millisecond {
		t.Fatalf("the holder's expiry comes first: slept %v, want 3ms", sleep)
	}
	if sleep, _ := waitDelay(0, 16*time.Millisecond, maxRecheck, true); sleep != firstRecheck {
		t.Fatalf("an expiry already past: slept %v, want %v", sleep, firstRecheck)
	}
	sleep, next := waitDelay(time.Millisecond, 64*time.Millisecond, maxRecheck, false)
	if sleep != 10*time.Millisecond || next != firstRecheck {
		t.Fatalf("registered or not held: slept %v (want 10ms), next backoff %v (want %v)", sleep, next, firstRecheck)
	}
	if sleep, _ := waitDelay(time.Second, firstRecheck, maxRecheck, false); sleep != time.Second {
		t.Fatalf("a registered waiter sleeps until its re-check: %v", sleep)
	}
}
