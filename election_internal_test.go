package sentinel

import "testing"

// The followers' wake-up payload is what the listener parses, with a kind
// of its own, so its keys never meet a lease's.
func TestElectionPayloadRoundTrip(t *testing.T) {
	for _, tc := range [][2]string{{"default", "scheduler"}, {"a:b", "c"}, {"ns", "grüße:1"}} {
		k, ok := parsePayload(payload(notifyElection, tc[0], tc[1]))
		if !ok || k != (waitKey{kind: notifyElection, ns: tc[0], key: tc[1]}) {
			t.Fatalf("parsePayload(payload(notifyElection, %q, %q)) = %+v, %v", tc[0], tc[1], k, ok)
		}
		if k.kind == notifyLease || k.kind == notifyExecution {
			t.Fatalf("election wake-ups share kind %q with another primitive", k.kind)
		}
	}
}
