package sentinel

import (
	"strconv"
	"testing"
)

// The release notification payload round-trips any namespace and key,
// including ones containing the separator, and garbage never panics.
func FuzzParsePayload(f *testing.F) {
	f.Add("default", "invoice-123")
	f.Add("a:b", "c")
	f.Add("a", "b:c")
	f.Add("", "")
	f.Add("12:", "x")
	f.Fuzz(func(t *testing.T, ns, key string) {
		payload := strconv.Itoa(len(ns)) + ":" + ns + key
		k, ok := parsePayload(payload)
		if !ok || k.ns != ns || k.key != key {
			t.Fatalf("parsePayload(%q) = %+v, %v; want %q, %q", payload, k, ok, ns, key)
		}
		_, _ = parsePayload(ns + key) // arbitrary input must not panic
	})
}
