package main

import (
	"bytes"
	"strings"
	"testing"
)

// The demo end to end: it fails unless every key books exactly one order.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"(Idempotent-Replayed: true)", "connection dropped", "Idempotency-Key reused", "Idempotency-Key required", "orders booked: 3"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
