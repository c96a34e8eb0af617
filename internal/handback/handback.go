// Package handback lets package idempotency give a key back while fn is
// still running, without widening package sentinel's API: a handler that
// switched protocols (101, then Hijack) is not protected by its key, yet
// runs its session inside fn. idempotency puts a Slot in the ctx of its
// Once or OnceTx call (WithSlot); package sentinel takes it from there,
// keeps it out of fn's ctx (so that a call fn makes does not fill it) and,
// once the key is claimed, sets its GiveBack. No registration: both
// packages call this one explicitly.
package handback

import "context"

// Slot receives, for one Once or OnceTx call, the function that gives the
// claimed key back before fn returns.
type Slot struct {
	// GiveBack hands the key back now, guarded by the claim's token, as
	// a Retryable outcome does (in a re-run, WithRerun, the key stays for
	// the next re-run), and ends the claim's lease as released without
	// cancelling fn's ctx: fn goes on, unbounded by the lease. reason is
	// recorded in the key's history. It reports whether the hand-back
	// landed; when it did not (the key moved on, or the database could
	// not be reached), the hand-back made when fn returns tries again.
	// nil until the key is claimed.
	GiveBack func(reason string) (landed bool)
}

type slotKey struct{}

// WithSlot returns ctx carrying s for the call it is passed to (nil:
// none).
func WithSlot(ctx context.Context, s *Slot) context.Context {
	return context.WithValue(ctx, slotKey{}, s)
}

// From returns the Slot ctx carries, nil if none.
func From(ctx context.Context) *Slot {
	s, _ := ctx.Value(slotKey{}).(*Slot)
	return s
}
