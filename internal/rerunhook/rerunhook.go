// Package rerunhook lets package idempotency approve a re-run (Once with
// WithRerun) before it happens, without widening package sentinel's API:
// idempotency puts a Guard in the ctx of its Once call (WithGuard), and
// package sentinel's Once reads it from there (From) and keeps it out of
// fn's ctx, so it applies to that one call only. No registration: both
// packages call this one explicitly.
package rerunhook

import "context"

// Guard is asked, before a caller with WithRerun re-runs key after the
// attempt that holds token stopped without an outcome, whether this
// caller may run it again. false: the caller does not re-run the key and
// gets ErrUncertain, as without WithRerun. It costs nothing on the fresh
// path: it is called only for a key that would be re-run.
type Guard = func(ctx context.Context, namespace, key string, token int64) (bool, error)

type guardKey struct{}

// WithGuard returns ctx carrying g for the Once call it is passed to (nil:
// none).
func WithGuard(ctx context.Context, g Guard) context.Context {
	return context.WithValue(ctx, guardKey{}, g)
}

// From returns the Guard ctx carries, nil if none.
func From(ctx context.Context) Guard {
	g, _ := ctx.Value(guardKey{}).(Guard)
	return g
}
