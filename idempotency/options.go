package idempotency

// This file: Options, their defaults and the namespace check Middleware applies to them.

import (
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/sentinel-coordination/sentinel"
)

// Defaults for Options.
const (
	DefaultMaxBodyBytes     = 1 << 20
	DefaultMaxResponseBytes = 1 << 20
	maxScopeLen             = 512
)

// Options configure Middleware. Scope is required; every other field has
// a default: keys optional, the client's namespace and TTL.
type Options struct {
	// Required makes a request without an Idempotency-Key fail with 400.
	// Otherwise such a request passes through to the handler unprotected.
	Required bool

	// Scope returns the principal a request acts for (an account or API
	// key id, never something the client can choose freely); keys are
	// unique per scope, so one client's key never replays another's
	// response. At most 512 bytes. Required: Middleware panics without
	// one; a service with a single principal passes SingleTenant. A
	// request for which Scope returns "" gets 403 (ProblemNoScope) and the
	// handler does not run. Scope is called before the body is read (a
	// request refused for want of a principal is refused unread): it must
	// not read r.Body.
	Scope func(r *http.Request) string

	// Namespace is the Sentinel namespace the keys live in. Default: the
	// client's namespace.
	Namespace string

	// TTL is the lease of a running request, renewed by heartbeats while
	// the handler runs. A repeat after a crash sees the key uncertain once
	// it expires. Default: the client's DefaultTTL; at least
	// sentinel.MinTTL (Middleware panics otherwise).
	TTL time.Duration

	// HardTTL caps how long a handler may run. When it passes, the
	// handler's context is cancelled and its outcome is not stored (the
	// key becomes uncertain, unless the handler calls NoEffect, which
	// gives it back; in transactional mode nothing is committed),
	// unless the handler returns within the lease's safety margin, before
	// the claim ended on the database clock: its response is then stored
	// as usual. Without Transactional, a handler that answers after that
	// has its response sent to the request that ran it (it says what
	// happened), not stored: repeats get the uncertain problem until an
	// operator resolves the key (resolve --refused gives them that
	// response).
	// Default: the client's Config.OnceHardTTL (10 minutes unless set), or
	// the TTL when it is longer (as sentinel.Once's default).
	HardTTL time.Duration

	// Wait is how long a repeat that arrives while the first request runs
	// waits for its stored response before giving up with 409 (with
	// sentinel.WithWait: woken once the statement that completes the first
	// request commits, not by polling). If the first request gives the key back (a
	// response Store rejects, a rolled-back transaction), the waiter runs
	// the handler itself, and Wait no longer bounds it; so does a waiter,
	// with Rerun, whose first request stopped without an outcome (it
	// re-runs the handler, as a repeat would, and neither Wait nor the
	// client leaving ends that re-run). Zero answers 409 at once.
	Wait time.Duration

	// MaxBodyBytes bounds the request body read to fingerprint it (over it:
	// 413, as over a bound the server set before the middleware with
	// http.MaxBytesReader). Default 1 MiB.
	MaxBodyBytes int64

	// MaxResponseBytes bounds the stored response body. A handler writing
	// more gets an error from Write; the request then answers 500
	// (ProblemResponseTooLarge) and so do its repeats, unless the response
	// is one that is not stored (NoEffect, or a status Store refuses): then
	// the key is given back and a retry runs the handler again. Default 1 MiB. The
	// client's Config.MaxResultSize must hold the stored form (about 4/3 of
	// this, JSON with a base64 body, and 64 KiB for headers; Middleware
	// panics otherwise). A response whose headers and trailers push its
	// stored form over MaxResultSize all the same is too large too: it is
	// sent to the request that ran the handler, and its repeats get
	// ProblemResponseTooLarge (with Transactional, nothing is committed and
	// the request gets ProblemResponseTooLarge).
	MaxResponseBytes int

	// CanonicalJSON fingerprints a JSON request body (Content-Type
	// application/json or any +json type) by its canonical form rather
	// than its bytes: insignificant whitespace, object member order and
	// string escapes do not make a repeat "a different request" (422).
	// The canonical form is the body decoded as encoding/json decodes it
	// (numbers kept as written) and re-encoded with sorted members. Use it
	// when your handler reads the body with encoding/json, so that two
	// bodies with the same canonical form mean the same to it; leave it off
	// when the handler reads the raw bytes (a signature over the body, a
	// stored document). A body that is not valid JSON, or has an object
	// with two member names equal under case folding (at any depth:
	// {"amount":1,"Amount":2}, or a name given twice), is fingerprinted
	// byte for byte: encoding/json matches struct fields in any case and
	// the last such member wins, so the order of those members decides
	// what the handler reads. Changing it
	// changes the fingerprint of JSON requests: repeats of requests made
	// before the change get 422.
	CanonicalJSON bool

	// Transactional runs the handler inside a transaction (Tx) that commits
	// with the stored response. A new key then costs five round trips
	// besides the handler's own statements: sentinel.OnceTx's four (the
	// claim, BEGIN, the completion, COMMIT) and one that sets the
	// handler's SET LOCAL timeouts back (see Tx); a repeat costs one, as
	// without it.
	Transactional bool

	// Rerun, above 1, declares that the handler's effect is deduplicated
	// downstream: the handler passes sentinel.EffectKey(r.Context()) to the
	// service it calls, as that service's idempotency key. Set Required
	// with it: a request without an Idempotency-Key passes through to the
	// handler unprotected, where EffectKey is "", a reference every such
	// request would share at the service. A repeat of a
	// request whose handler stopped without a response (a crash, a panic, a
	// lost lease) then runs the handler again, at most Rerun attempts in
	// all (sentinel.WithRerun; sentinel.Attempt(r.Context()) tells the
	// handler its attempt), instead of answering the uncertain problem;
	// only a repeat with the same fingerprint does. 0 or 1: never re-run
	// (the default). Not with Transactional, which needs no re-run (a
	// crash rolls the handler's writes back and the repeat runs it): set
	// both and Middleware panics.
	Rerun int

	// Store decides whether a response is stored and replayed (true), or
	// sent once without being stored, freeing the key so that a retry runs
	// the handler again (false). Without Transactional, return false only
	// for responses after which the handler changed nothing (a validation
	// error, 429): the key is released as if by sentinel.Retryable. With
	// Transactional, false also rolls the transaction back, so it is safe
	// for any status. Default: with Transactional, status < 500 but 429
	// (Too Many Requests: the client is told to send it again later, and
	// a stored 429 would answer that retry for ever); without, every
	// response is stored, errors included (a 500 may follow a side
	// effect), as Stripe does: refuse 429 here when your handler answers
	// it before any effect, as rate limiting does. A stored response's
	// Retry-After is never replayed (see StoredHeader).
	Store func(status int) bool
}

// validNamespace holds for a namespace the library accepts (what
// sentinel.WithNamespace checks on every call): valid UTF-8, 1 to
// MaxNamespaceLen bytes, no control character (C0 or DEL).
func validNamespace(ns string) bool {
	if ns == "" || len(ns) > sentinel.MaxNamespaceLen || !utf8.ValidString(ns) {
		return false
	}
	for _, r := range ns {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}
