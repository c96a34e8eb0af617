package sentinel

import (
	"testing"
	"time"
)

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

// Deadline is zero whenever IsLeader is false: past the term's local
// deadline, before the timer that ends its lease fired, it returned that
// past time while IsLeader said false.
func TestElectorDeadlineZeroPastTheTermsDeadline(t *testing.T) {
	l := &Lease{token: 7}
	e := &Elector{term: &term{lease: l, resign: make(chan struct{}), ended: make(chan struct{})}}
	l.deadline = time.Now().Add(time.Minute)
	if !e.IsLeader() || e.Deadline() != l.deadline {
		t.Fatalf("leading: IsLeader %v, Deadline %v, want true, %v", e.IsLeader(), e.Deadline(), l.deadline)
	}
	l.deadline = time.Now().Add(-time.Millisecond) // passed; the lease not ended yet
	if e.IsLeader() {
		t.Fatal("IsLeader true past the term's deadline")
	}
	if d := e.Deadline(); !d.IsZero() {
		t.Fatalf("Deadline = %v past the term's deadline while IsLeader is false, want zero", d)
	}
}
