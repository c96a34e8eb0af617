package main

import (
	"strconv"
	"strings"
)

// eventTypes are the execution event types this version of the library
// records (Event.Type). follow --type warns about any other: a typo
// ("complete") would otherwise follow nothing, silently, until interrupted.
// It still follows such a type, which a newer library may record.
var eventTypes = []string{
	"claimed", "started", "completed", "failed", "retryable", "rolled_back",
	"released", "completion_refused", "replayed", "rejected", "crashed",
	"rerun", "reconciling", "force_completed", "reset", "result_set",
}

// unknownTypeNote returns the warning for an event type this version never
// records, with the nearest known type when one is close; "" for a known
// type.
func unknownTypeNote(t string) string {
	best, bestD := "", len(t)/2+2
	for _, k := range eventTypes {
		if k == t {
			return ""
		}
		if d := editDistance(strings.ToLower(t), k); d < bestD {
			best, bestD = k, d
		}
	}
	note := "warning: this version of Sentinel records no event of type " + strconv.Quote(t)
	if best != "" {
		note += "; did you mean " + strconv.Quote(best) + "?"
	}
	return note + " (following it anyway; the types: " + strings.Join(eventTypes, ", ") + ")"
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
