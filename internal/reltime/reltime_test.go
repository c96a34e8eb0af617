package reltime

import (
	"testing"
	"time"
)

// Cases is the wording, as the console's browser test also checks live.js
// against it (see console's TestBrowserRelativeTimesWordedAsTheCommand).
var Cases = map[int64]string{
	0: "just now", 99: "just now", -99: "just now",
	100: "0.1s ago", -100: "in 0.1s", 990: "0.9s ago", -990: "in 0.9s",
	3100: "3.1s ago", -3100: "in 3.1s", 9999: "9.9s ago", 10000: "10s ago", -42500: "in 42s",
	59999: "59s ago", 60000: "1m00s ago", -65000: "in 1m05s", 3599999: "59m59s ago",
	3600000: "1h00m ago", -7380000: "in 2h03m", 47*3600000 + 59*60000: "47h59m ago",
	48 * 3600000: "2d ago", -75 * 3600000: "in 3d",
}

func TestMillis(t *testing.T) {
	for ms, want := range Cases {
		if got := Millis(ms); got != want {
			t.Errorf("Millis(%d) = %q, want %q", ms, got, want)
		}
	}
	now := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	if got := Text(now.Add(2500*time.Millisecond), now); got != "in 2.5s" {
		t.Errorf("Text 2.5s ahead = %q", got)
	}
	if got := Text(now.Add(-90*time.Second), now); got != "1m30s ago" {
		t.Errorf("Text 90s behind = %q", got)
	}
}
