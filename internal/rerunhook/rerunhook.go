// Package rerunhook lets package idempotency approve a re-run (Once with
// WithRerun) before it happens, without widening package sentinel's API:
// package sentinel sets Option at init; idempotency calls it.
package rerunhook

import "context"

// Guard is asked, before a caller with WithRerun re-runs key after the
// attempt that holds token stopped without an outcome, whether this
// caller may run it again. false: the caller does not re-run the key and
// gets ErrUncertain, as without WithRerun. It costs nothing on the fresh
// path: it is called only for a key that would be re-run.
type Guard = func(ctx context.Context, namespace, key string, token int64) (bool, error)

// Option returns a sentinel.Option (as any: this package cannot import
// sentinel) that installs g on a Once call. Set by package sentinel.
var Option func(g Guard) any
