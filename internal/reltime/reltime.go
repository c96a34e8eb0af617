// Package reltime writes how far a time is from now, for people: the one
// wording of the sentinel command (cmd/sentinel) and of the console's
// pages (console), whose script (console/static/live.js, function ago)
// counts it on in the browser and writes the same, rule for rule; the
// console's tests check the two against each other.
//
// The wording: "in 3.1s" ahead, "3.1s ago" behind; tenths of a second
// below 10s, whole seconds below a minute, then "1m05s", "2h03m" (below
// 48 hours) and "3d"; each unit truncated, never rounded up (a lease with
// 0.99s left is "in 0.9s", not "in 1s"); "just now" within 100ms.
package reltime

import (
	"fmt"
	"strings"
	"time"
)

// Text says how far t is from now: "in 2.5s", "42s ago", "in 1m05s".
func Text(t, now time.Time) string {
	return Millis(now.Sub(t).Milliseconds())
}

// Millis is Text for a time ms milliseconds before now (negative: ahead
// of now).
func Millis(ms int64) string {
	pre, suf := "", " ago"
	if ms < 0 {
		ms, pre, suf = -ms, "in ", ""
	}
	if ms < 100 {
		return "just now"
	}
	tenths, s := ms/100, ms/1000
	m, h := s/60, s/3600
	var x string
	switch {
	case tenths < 100:
		x = fmt.Sprintf("%d.%ds", tenths/10, tenths%10)
	case s < 60:
		x = fmt.Sprintf("%ds", s)
	case m < 60:
		x = fmt.Sprintf("%dm%02ds", m, s%60)
	case h < 48:
		x = fmt.Sprintf("%dh%02dm", h, m%60)
	default:
		x = fmt.Sprintf("%dd", h/24)
	}
	return pre + x + suf
}

// Duration is d as an operator types it, for a command line or a
// threshold a person reads (10m, 1h30m, 1m30s, 500ms): time.Duration's
// String without its zero units (10m0s, 1h0m0s), which
// time.ParseDuration reads back as d.
func Duration(d time.Duration) string {
	s := d.String() // every unit from the largest present: 1h0m5s, 10m0s
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return strings.Replace(s, "h0m", "h", 1)
}
