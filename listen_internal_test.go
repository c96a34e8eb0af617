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
	f.Add("zahlungen-über-€", "rechnung-ä")
	f.Add("日本", "キー")
	f.Fuzz(func(t *testing.T, ns, key string) {
		for _, kind := range []byte{notifyLease, notifyExecution} {
			payload := string(kind) + strconv.Itoa(len(ns)) + ":" + ns + key
			k, ok := parsePayload(payload)
			if !ok || k.kind != kind || k.ns != ns || k.key != key {
				t.Fatalf("parsePayload(%q) = %+v, %v; want %c %q, %q", payload, k, ok, kind, ns, key)
			}
		}
		// An older client's release has no kind.
		k, ok := parsePayload(strconv.Itoa(len(ns)) + ":" + ns + key)
		if !ok || k.kind != notifyLease || k.ns != ns || k.key != key {
			t.Fatalf("legacy payload: %+v, %v", k, ok)
		}
		_, _ = parsePayload(ns + key) // arbitrary input must not panic
	})
}
