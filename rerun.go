package sentinel

// This file: WithRerun, the re-run option of Once, and what fn's ctx carries (TokenFromContext, Attempt, EffectKey).

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math"
)

// WithRerun declares that fn's effect is deduplicated downstream: fn passes
// EffectKey(ctx) to the provider it calls (a card network's idempotency
// key, a ledger's unique reference), so running fn again for the key has
// the effect of running it once. Then, when an executor of the key stops
// without an outcome (it crashed, froze past its lease, lost its lease,
// reached its hard TTL, returned an error or panicked), the next Once
// caller for the key runs fn again instead of getting ErrUncertain, and so
// does a WithWait waiter, at most maxAttempts attempts in all (the first
// run included); after that the key is uncertain as without the option.
// Attempt(ctx) tells fn which attempt it is.
//
// Never two attempts at once: a re-run is a takeover in one guarded
// statement that requires the executor's lease to have expired on the
// database clock, and mints a new fencing token (TokenFromContext); the
// executor stops trusting its lease, and fn's ctx is cancelled, before
// that expiry (see Lease). fn must stop when its ctx ends, and guard its
// database writes with VerifyExecutionToken, as without the option. The
// history records each re-run as a "rerun" event whose metadata holds the
// attempt, the bound, and the previous attempt's token and owner.
//
// The rule for callers that disagree: a key is re-run only when the caller
// that finds it gives WithRerun and the attempt that stopped was started by
// a caller that gave it too (the bound is recorded with each attempt), and
// only while its attempts are below both bounds; each re-run lowers the
// recorded bound to its caller's when that is smaller. A caller without
// WithRerun gets ErrUncertain for a key that stopped; a key whose stopped
// attempt ran without WithRerun is uncertain for every caller. So neither
// side can re-run an effect the other did not declare idempotent. A key
// left for a re-run waits for a caller with WithRerun: when none comes
// (a deploy removed the option, or nobody calls the key again), its
// callers get ErrUncertain with ExecutionError.Rerun and nothing counts
// it uncertain; find such keys with ExecutionCounts (RerunPending) or
// `sentinel status`, and reconcile them.
//
// In a re-run (Attempt above 1) an earlier attempt may have had its effect,
// so the key is not handed back as claimed, which would let a caller
// without WithRerun run it: fn's Retryable error, or a re-run claim given
// back before fn ran (its caller's ctx ended, the client closed), leaves
// the key as the stopped attempt left it, executing with its lease ended,
// for the next re-run (this counts as an attempt); Retryable in attempt 1
// hands the key back as usual. In the last attempt the bound allows there
// is no next re-run: the key is then uncertain, and the call returns
// ErrUncertain (wrapping fn's error, or its ctx's).
//
// Use it only when the effect really is deduplicated downstream by the
// reference fn passes: a card charge sent with EffectKey as its
// idempotency key is; an email or SMS sent by a plain API is not (a re-run
// sends it again): there, leave the option off, and an uncertain key waits
// for an operator. maxAttempts must be 1 (no re-run, the default) to
// math.MaxInt32 (the attempts a key can count). Once only (and OnceRetry,
// which passes it to each Once, and retries an attempt that stopped only
// while this bound leaves the retry a re-run): OnceTx needs no re-run (a crash rolls
// fn's writes back and the next caller runs it), and other calls refuse
// it with ErrInvalid.
func WithRerun(maxAttempts int) Option {
	return func(o *callOptions) { o.rerun, o.rerunSet = maxAttempts, true }
}

// runInfo is what fn's context carries about its run.
type runInfo struct {
	token       int64
	attempt     int
	maxAttempts int // the key's bound, recorded by this attempt's claim
	ns, key     string
}

type runKey struct{}

// runOf returns what ctx carries about fn's run; a nil ctx carries nothing.
func runOf(ctx context.Context) (*runInfo, bool) {
	if ctx == nil {
		return nil, false
	}
	ri, ok := ctx.Value(runKey{}).(*runInfo)
	return ri, ok
}

// TokenFromContext returns the fencing token of the Once execution running
// fn, from the ctx passed to fn. Guard fn's own writes with it (see
// VerifyExecutionToken). Each attempt of a key (WithRerun) has its own.
// Outside fn, a nil ctx included, it returns 0, false.
func TokenFromContext(ctx context.Context) (int64, bool) {
	if ri, ok := runOf(ctx); ok {
		return ri.token, true
	}
	return 0, false
}

// Attempt returns fn's attempt from the ctx passed to fn by Once: 1 for the
// first run of a key, 2 for its first re-run after a crash (WithRerun), and
// so on. A run after a first attempt handed the key back with Retryable is
// attempt 1 again, and so is the run after an operator reset the key
// (ResetToClaimed): the count starts again where the key was last safe to
// run from scratch; EffectKey stays the same. 0 outside fn (a nil ctx
// included).
func Attempt(ctx context.Context) int {
	if ri, ok := runOf(ctx); ok {
		return ri.attempt
	}
	return 0
}

// EffectKey returns the reference fn passes downstream so that the
// provider deduplicates fn's effect (a card network's idempotency key),
// from the ctx passed to fn by Once or OnceTx (or a ctx derived from it);
// "" outside fn (a nil ctx included). "" is the same for every call: a
// ctx that is not fn's (the caller's ctx captured by fn's closure,
// context.Background in a goroutine, a request behind package
// idempotency without an Idempotency-Key) would give every such payment
// the same reference at the provider, so check for "" and do not send it.
//
// It is the same on every attempt of a key, and differs between keys and
// namespaces (and, behind package idempotency, between scopes, which are
// part of the key). Its form is "se1-" followed by 32 lowercase hex
// digits: the first 128 bits of SHA-256 over "sentinel effect key v1",
// the namespace and the key, each ended by a NUL byte (neither may hold
// one). It depends on nothing else (not the schema, database, token or
// attempt), so two deployments that share a provider account must use
// different namespaces. 36 ASCII letters, digits and a dash: within the
// length and alphabet of common providers' idempotency keys.
func EffectKey(ctx context.Context) string {
	if ri, ok := runOf(ctx); ok {
		return effectKey(ri.ns, ri.key)
	}
	return ""
}

func effectKey(ns, key string) string {
	h := sha256.New()
	h.Write([]byte("sentinel effect key v1\x00"))
	h.Write([]byte(ns))
	h.Write([]byte{0})
	h.Write([]byte(key))
	h.Write([]byte{0})
	var sum [sha256.Size]byte
	return "se1-" + hex.EncodeToString(h.Sum(sum[:0])[:16])
}

// rerunApplies refuses WithRerun for a call in state (Once: executing;
// OnceTx: claimed) that does not take it.
func (o callOptions) rerunApplies(state State) error {
	if o.rerunSet && state != StateExecuting {
		return invalid("option", "WithRerun does not apply to OnceTx or OnceSQLTx (use Once for an effect outside the database): a crash rolls fn's writes back and the next caller runs it anyway")
	}
	return nil
}

// checkRerun validates the bound of WithRerun (rerunApplies refused it
// already for a call that does not take it) and returns the caller's bound
// (1 without the option).
func (o *callOptions) checkRerun() (int, error) {
	switch {
	case !o.rerunSet:
		return 1, nil
	case o.rerun < 1 || o.rerun > math.MaxInt32:
		return 0, invalid("WithRerun", "maxAttempts must be 1 to %d (1: no re-run; 3: the first run and up to 2 re-runs), got %d",
			math.MaxInt32, o.rerun)
	}
	return o.rerun, nil
}
