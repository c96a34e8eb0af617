// Package idempotency is HTTP Idempotency-Key middleware for net/http,
// built on sentinel.Once and sentinel.OnceTx.
//
// It follows draft-ietf-httpapi-idempotency-key-header-06 and Stripe's
// documented behaviour where they agree:
//
//   - The first request with a key runs the handler once, to the end even if
//     the client disconnects. Its status, headers, body and trailers are
//     stored and replayed to every repeat, with Idempotent-Replayed: true. Error
//     responses are stored too (as Stripe does), unless Options.Store says
//     the handler changed nothing. A replay goes without Retry-After: it
//     cannot change, so it must not invite the client to wait and send
//     the request again (see "Errors that changed nothing").
//   - A repeat while the first request runs gets 409 with Retry-After, or,
//     with Options.Wait, waits up to that long for the stored response.
//   - The same key with a different request (method, path and query, or
//     body digest) gets 422.
//   - A missing key where Options.Required gets 400; a malformed or too long
//     key (over 255 bytes) gets 400.
//   - A first request that crashed or panicked leaves the key uncertain: it
//     may or may not have taken effect, so a repeat gets a 500 problem naming
//     the key and the command that inspects it, and is never silently run
//     again (unless Options.Rerun says the handler's effect is deduplicated
//     downstream: then the repeat runs it again, see "Re-running after a
//     crash"). A handler that cannot tell whether its effect happened (the
//     provider timed out after the request was sent) says so with
//     Uncertain(w, cause): the same follows. An operator resolves it with
//     an HTTP response (`sentinel idempotency inspect` and `resolve`, or
//     Inspect and Resolve here), which repeats of the same request then get;
//     or reconciles and resets it (sentinel.Client.Reconcile, ResetToClaimed) so
//     the next repeat runs.
//   - Every error is an RFC 9457 problem+json response (see Problem).
//   - The handler's writer buffers the response (up to
//     Options.MaxResponseBytes) until it is stored, then sends it whole: a
//     stream or server-sent events cannot pass through, and its Flush
//     sends nothing early. Informational responses (103 Early Hints) go
//     out when written and are never stored.
//   - A handler that switches protocols (WriteHeader(101), then Hijack)
//     is not protected by the key: what follows the 101 is not HTTP and
//     can be neither stored nor replayed. The 101 goes out when written,
//     Hijack works after it (and only then), nothing is stored, and the
//     key is given back as with NoEffect, at the 101 when the request
//     asked to switch (it has an Upgrade header), else when the handler
//     returns (in transactional mode, the handler's writes in Tx are
//     rolled back when it returns): a repeat with the key runs the
//     handler and switches again, while the first session goes on.
//     HardTTL still bounds the handler, its session included: its
//     context ends then, with an error matching sentinel.ErrHardTTL.
//
// Safe methods (GET, HEAD, OPTIONS, TRACE) pass through untouched. Keys are
// scoped per principal by Options.Scope, which is required: two principals
// sending the same key do not collide, and no response crosses principals.
// Credentials are never stored nor replayed: Set-Cookie, Set-Cookie2,
// Authorization, Proxy-Authorization, Authentication-Info and
// Proxy-Authentication-Info go out with the first response only (see
// StoredHeader), as do the handler's Connection header and the headers it
// names. The other per-connection headers a handler sets (Keep-Alive,
// Proxy-Connection, TE, Upgrade, Transfer-Encoding, Trailer,
// Content-Length, Date) go out as set with no response, the first
// included: net/http frames and dates each response itself (a 101 goes
// out with its header as written).
//
// # Errors that changed nothing
//
// A stored 5xx is replayed to every repeat (as Stripe does), because a
// handler that failed may have had an effect first. A handler that knows
// nothing happened (the card network was unreachable) calls NoEffect(w)
// before answering: that one response is sent without being stored and the
// key is given back, so the client's retry with the same key runs again.
// Options.Store decides the same by status for every response.
//
// A response that asks the client to try later (429 or 503, with
// Retry-After) is such a response when the handler answered it before
// any effect: call NoEffect, or refuse its status in Options.Store, and
// the retry runs the handler. Stored, its replays cannot change, so they
// go without Retry-After (nor is it stored): a client told to wait and
// retry would get the same answer for ever. The draft leaves other
// errors to the server's documentation; Stripe saves no result for a
// request refused before its endpoint runs (rate limited, invalid), and
// saves every other, 5xx included. Transactional mode refuses 429 by
// default (a rollback undoes whatever the handler wrote).
//
// # Transactional mode
//
// With Options.Transactional the handler runs inside a database
// transaction, Tx(r.Context()), that commits together with the stored
// response (sentinel.OnceTx). A database-local effect then happens exactly
// once: a crash, panic or lost lease before the commit leaves nothing behind
// (no writes, no uncertain key), and the next repeat runs the handler
// afresh. A 5xx or 429 response (by default, see Options.Store) rolls back too and
// is sent without being stored. So is any error response (4xx, 5xx) of a
// handler one of whose statements failed, which aborts its transaction; a
// success response of such a handler, which nothing backs, is answered
// with ProblemNotCommitted. A commit refused for the handler's writes (a
// deferred constraint, or a constraint trigger's error whatever its
// SQLSTATE) is answered the same way; only a failure of the store after
// which a retry is right (a connection refused or cut, a lost lease, a
// serialization failure or deadlock, an administrator's shutdown, a
// read-only transaction after a failover, SQLSTATE classes 08, 40, 53, 57,
// 58, 72, F0, XX, and 55P03, 25006) is 503 ProblemUnavailable. A request
// that sentinel.Client.Close ends while its handler runs (the server
// shutting down) is rolled back the same way and answered 503
// ProblemUnavailable, "Server shutting down", logged at Info: the retry,
// on another server, runs the handler afresh.
//
// # Re-running after a crash
//
// When the handler's effect is deduplicated by the service it calls (a
// card network that takes an idempotency key), set Options.Rerun and pass
// sentinel.EffectKey(r.Context()) to that service as its reference: then a
// repeat of a request whose handler crashed, froze past its lease or
// panicked runs the handler again (sentinel.WithRerun), and the service
// returns the first attempt's outcome instead of acting twice; the client
// gets a real response instead of an uncertain problem, and nobody has to
// resolve the key. The reference is the same on every attempt of a request
// and differs between keys, scopes and namespaces. Only a repeat of the
// same request (method, path, query and body) re-runs it; another request
// with the key gets 422. After Options.Rerun attempts the key is uncertain
// as without the option. Leave it off when the handler's effect is not
// deduplicated (an email or SMS sent by a plain API): a re-run would send
// it again.
//
// # Retention
//
// Stored responses are Sentinel executions in the Options.Namespace
// namespace and live until pruned: call client.Prune(ctx, olderThan,
// sentinel.WithNamespace(ns)) periodically. After a key is pruned a repeat
// runs the handler again, so keep olderThan above the longest time your
// clients retry (Stripe keeps keys for 24 hours). Uncertain keys are never
// pruned. Publish the retention period to your API's clients, as the draft
// asks.
package idempotency

// This file: Middleware and its ServeHTTP: a request read, fingerprinted and run or replayed under its key (attempt: Once or OnceTx, and the answer for each outcome), and Tx.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/internal/handback"
	"github.com/sentinel-coordination/sentinel/internal/rerunhook"
)

// Header names.
const (
	HeaderKey      = "Idempotency-Key"
	HeaderReplayed = "Idempotent-Replayed"
)

type txKey struct{}

// Tx returns the transaction of a request handled in transactional mode,
// from the handler's r.Context(); nil otherwise. Do the request's database
// writes in it: they commit together with the stored response. Do not
// commit or roll it back yourself. Timeouts the handler sets in it with
// SET LOCAL (statement_timeout, lock_timeout,
// idle_in_transaction_session_timeout) bound its own statements only: the
// middleware puts them back to the connection's configured values before
// it stores the response and commits. Set session state only with SET
// LOCAL (or set_config(name, value, true)): tx is on a connection of the
// client's pool, and a plain SET (or set_config(..., false)) commits with
// the response and stays on that connection for whatever runs on it next,
// another request's handler and the client's own statements included (a
// SET statement_timeout = '1ms' fails them; a SET ROLE or a tenant set
// for row-level security acts for the wrong principal). The middleware
// does not reset the pool's sessions: that is the pool owner's choice
// (pgxpool.Config.AfterRelease, PrepareConn). A nil ctx carries no
// transaction: Tx returns nil.
func Tx(ctx context.Context) pgx.Tx {
	if ctx == nil {
		return nil
	}
	tx, _ := ctx.Value(txKey{}).(pgx.Tx)
	return tx
}

// Middleware returns middleware that makes POST, PUT, PATCH, DELETE (every
// method but GET, HEAD, OPTIONS and TRACE) handlers idempotent under the
// Idempotency-Key header, using client to store keys and responses.
//
//	mw := idempotency.Middleware(client, idempotency.Options{Required: true, Scope: accountID})
//	mux.Handle("POST /charges", mw(chargeHandler))
//
// Middleware panics on a nil client or inconsistent Options (negative
// sizes or durations, HardTTL below TTL, a Namespace the library refuses):
// a programming error, caught at start-up rather than on the first request.
func Middleware(client *sentinel.Client, opts Options) func(http.Handler) http.Handler {
	if client == nil {
		panic("idempotency: Middleware needs a *sentinel.Client")
	}
	if opts.Scope == nil {
		panic("idempotency: Middleware needs Options.Scope, the principal each request acts for (an account or API key id), " +
			"so that one client's key never replays another's response; a service with one principal passes idempotency.SingleTenant")
	}
	if opts.TTL < 0 || opts.HardTTL < 0 || opts.Wait < 0 || opts.MaxBodyBytes < 0 || opts.MaxResponseBytes < 0 || opts.Rerun < 0 {
		panic(fmt.Sprintf("idempotency: negative Options: TTL %s, HardTTL %s, Wait %s, MaxBodyBytes %d, MaxResponseBytes %d, Rerun %d",
			opts.TTL, opts.HardTTL, opts.Wait, opts.MaxBodyBytes, opts.MaxResponseBytes, opts.Rerun))
	}
	if opts.TTL > 0 && opts.TTL < sentinel.MinTTL {
		panic(fmt.Sprintf("idempotency: Options.TTL %s is below sentinel.MinTTL (%s): every request would be refused", opts.TTL, sentinel.MinTTL))
	}
	if opts.Rerun > math.MaxInt32 {
		panic(fmt.Sprintf("idempotency: Options.Rerun %d is beyond the attempts a key can count (%d)", opts.Rerun, math.MaxInt32))
	}
	if opts.Namespace != "" && !validNamespace(opts.Namespace) {
		panic(fmt.Sprintf("idempotency: Options.Namespace %q is not a namespace (valid UTF-8, at most %d bytes, no control characters): every request would be refused",
			opts.Namespace, sentinel.MaxNamespaceLen))
	}
	if opts.Rerun > 1 && opts.Transactional {
		panic("idempotency: Options.Rerun does not apply with Transactional: a crash there rolls the handler's writes back, and the repeat runs it anyway")
	}
	ttl := opts.TTL
	if ttl == 0 {
		ttl = client.Config().DefaultTTL
	}
	if opts.HardTTL > 0 && opts.HardTTL < ttl {
		panic(fmt.Sprintf("idempotency: Options.HardTTL %s is below the TTL %s", opts.HardTTL, ttl))
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	// The body is read up to one byte more, to tell a body over the limit.
	opts.MaxBodyBytes = min(opts.MaxBodyBytes, math.MaxInt64-1)
	if opts.MaxResponseBytes <= 0 {
		opts.MaxResponseBytes = DefaultMaxResponseBytes
	}
	// The stored form: JSON with a base64 body, plus headers; a size
	// whose stored form is beyond an int is beyond every MaxResultSize.
	need := math.MaxInt
	if opts.MaxResponseBytes < (math.MaxInt-64<<10)/4*3 {
		need = opts.MaxResponseBytes/3*4 + 64<<10
	}
	if need > client.Config().MaxResultSize {
		panic(fmt.Sprintf("idempotency: Options.MaxResponseBytes %d needs a client Config.MaxResultSize of at least %d, it is %d",
			opts.MaxResponseBytes, need, client.Config().MaxResultSize))
	}
	if opts.Store == nil {
		if opts.Transactional {
			opts.Store = func(status int) bool { return status < 500 && status != http.StatusTooManyRequests }
		} else {
			opts.Store = func(int) bool { return true }
		}
	}
	return func(next http.Handler) http.Handler {
		return &middleware{c: client, o: opts, ttl: ttl, single: isSingleTenant(opts.Scope), next: next}
	}
}

type middleware struct {
	c      *sentinel.Client
	o      Options
	ttl    time.Duration // Options.TTL, or the client's DefaultTTL
	single bool          // Options.Scope is SingleTenant
	next   http.Handler
}

func (m *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		m.next.ServeHTTP(w, r)
		return
	}
	vals := r.Header.Values(HeaderKey)
	switch {
	case len(vals) == 0 && !m.o.Required:
		m.next.ServeHTTP(w, r)
		return
	case len(vals) == 0:
		writeProblem(w, Problem{Type: ProblemKeyMissing, Title: "Idempotency-Key required", Status: http.StatusBadRequest,
			Detail: "this endpoint requires an Idempotency-Key header and the request has none: send a unique value (for example a UUID) and reuse it when retrying the same request " +
				"(a header with an empty value is refused as empty; some clients drop it instead, as curl -H 'Idempotency-Key:' does)"}, 0)
		return
	case len(vals) > 1:
		writeProblem(w, Problem{Type: ProblemKeyInvalid, Title: "Invalid Idempotency-Key", Status: http.StatusBadRequest,
			Detail: "send exactly one Idempotency-Key header"}, 0)
		return
	}
	key, err := ParseKey(vals[0])
	if err != nil {
		writeProblem(w, Problem{Type: ProblemKeyInvalid, Title: "Invalid Idempotency-Key", Status: http.StatusBadRequest, Detail: err.Error()}, 0)
		return
	}

	// The principal first: a request without one is refused without
	// reading its body (an over-large one would get 413, not the 403 it
	// needs).
	var scope string
	if !m.single {
		scope = m.o.Scope(r)
		if scope == "" {
			// No principal: storing the response under a shared scope could
			// replay it to someone else.
			writeProblem(w, Problem{Type: ProblemNoScope, Title: "No principal for the Idempotency-Key", Status: http.StatusForbidden, Key: key,
				Detail: "the server could not tell whom this request acts for, so it cannot keep its Idempotency-Key apart from other clients' keys; nothing was run: authenticate and retry with the same key"}, 0)
			return
		}
	}
	if len(scope) > maxScopeLen {
		writeProblem(w, Problem{Type: "about:blank", Title: "Internal Server Error", Status: http.StatusInternalServerError,
			Detail: fmt.Sprintf("idempotency: the server's Scope function returned %d bytes; at most %d are allowed", len(scope), maxScopeLen)}, 0)
		return
	}

	body, err := io.ReadAll(io.LimitReader(r.Body, m.o.MaxBodyBytes+1))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		// The server's own bound, before the middleware
		// (http.MaxBytesReader): the body is too large, not malformed.
		writeProblem(w, Problem{Type: ProblemBodyTooLarge, Title: "Request body too large", Status: http.StatusRequestEntityTooLarge, Key: key,
			Detail: fmt.Sprintf("an idempotent request body may be at most %d bytes", min(mbe.Limit, m.o.MaxBodyBytes))}, 0)
		return
	}
	if err != nil {
		writeProblem(w, Problem{Type: "about:blank", Title: "Bad Request", Status: http.StatusBadRequest, Key: key,
			Detail: "reading the request body failed (" + err.Error() + "); nothing was run: send the request again with the same Idempotency-Key"}, 0)
		return
	}
	if int64(len(body)) > m.o.MaxBodyBytes {
		writeProblem(w, Problem{Type: ProblemBodyTooLarge, Title: "Request body too large", Status: http.StatusRequestEntityTooLarge, Key: key,
			Detail: fmt.Sprintf("an idempotent request body may be at most %d bytes", m.o.MaxBodyBytes)}, 0)
		return
	}
	fp := fingerprint(r, body, m.o.CanonicalJSON)

	onceKey := ExecutionKey(scope, key)

	if !m.attempt(w, r, scope, key, onceKey, fp, body, tryFirst, 0) || m.o.Wait <= 0 {
		return
	}
	for waitUntil := time.Now().Add(m.o.Wait); ; {
		if !m.attempt(w, r, scope, key, onceKey, fp, body, tryWait, time.Until(waitUntil)) {
			return
		}
		// Left for a re-run of this request while it waited: re-run here,
		// on the request's own ctx, which the wait's deadline does not
		// end (see errRerunAfterWait). Another repeat may have re-run it
		// first: then wait for that one, until the same deadline.
		if !m.attempt(w, r, scope, key, onceKey, fp, body, tryRerun, 0) {
			return
		}
	}
}

// try is what attempt does with a key in progress.
type try int

const (
	// tryFirst: the key in progress for this same request with
	// Options.Wait set, attempt returns true, having written nothing (the
	// caller waits, tryWait); otherwise 409.
	tryFirst try = iota
	// tryWait waits up to Options.Wait for the outcome (sentinel.WithWait),
	// and returns true, having written nothing, when the key was left for
	// a re-run of this same request meanwhile (the caller re-runs it,
	// tryRerun).
	tryWait
	// tryRerun re-runs the key left for it (after tryWait); the key in
	// progress (another repeat re-ran it first), attempt returns true,
	// having written nothing (the caller waits again, tryWait).
	tryRerun
)

// attempt runs or replays the request once (see try); with tryWait it
// waits up to waitFor.
func (m *middleware) attempt(w http.ResponseWriter, r *http.Request, scope, key, onceKey, fp string, body []byte, mode try, waitFor time.Duration) bool {
	wait := mode == tryWait
	// The handler runs to the end even if the client goes away, so that its
	// retry finds the real outcome; HardTTL bounds it, and a lost lease
	// still cancels it.
	ctx := context.WithoutCancel(r.Context())
	// gate lets the handler start; it refuses once a wait has timed out.
	gate := func(context.Context) error { return nil }
	if wait {
		// Bound the wait, but not a handler this request ends up running
		// (the key was given back while it waited): the timeout cancels ctx
		// only before the handler started.
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		var mu sync.Mutex
		started := false
		stopWaiting := func(cause error) func() {
			return func() {
				mu.Lock()
				defer mu.Unlock()
				if !started {
					cancel(cause)
				}
			}
		}
		timer := time.AfterFunc(waitFor, stopWaiting(errWaitOver))
		defer timer.Stop()
		defer context.AfterFunc(r.Context(), stopWaiting(errClientLeft))()
		gate = func(ctx context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			if ctx.Err() != nil {
				return sentinel.Retryable(errWaitOver)
			}
			started = true
			return nil
		}
	}
	opts := []sentinel.Option{sentinel.WithMetadata(map[string]any{
		"fingerprint": fp, "method": r.Method, "path": requestPath(r.URL),
	})}
	if m.o.Namespace != "" {
		opts = append(opts, sentinel.WithNamespace(m.o.Namespace))
	}
	if m.o.TTL > 0 {
		opts = append(opts, sentinel.WithTTL(m.o.TTL))
	}
	if m.o.HardTTL > 0 {
		opts = append(opts, sentinel.WithHardTTL(m.o.HardTTL))
	}
	if wait {
		opts = append(opts, sentinel.WithWait())
	}
	onceCtx := ctx // the ctx of the Once call (not OnceTx: Rerun does not apply with Transactional)
	if m.o.Rerun > 1 {
		// Only a repeat of the same request re-runs the handler: the guard
		// compares its fingerprint with the stopped attempt's, and only then
		// is that very attempt (its token) taken over. Once takes the guard
		// from onceCtx (internal/rerunhook) and keeps it out of fn's ctx.
		opts = append(opts, sentinel.WithRerun(m.o.Rerun))
		onceCtx = rerunhook.WithGuard(ctx, m.rerunGuard(fp, wait))
	}

	txCtx := ctx // the ctx of the OnceTx call
	var slot *handback.Slot
	if r.Header.Get("Upgrade") != "" {
		// The client asks to switch protocols, which the handler may do
		// (a 101 answers only such a request): the key is then given back
		// at the 101, not when the session ends (recorder.switchProtocols).
		// Once takes the slot from its ctx (internal/handback) and keeps
		// it out of fn's.
		slot = new(handback.Slot)
		onceCtx = handback.WithSlot(onceCtx, slot)
		txCtx = handback.WithSlot(txCtx, slot)
	}

	var handled bool // this call ran the handler (Once or OnceTx)
	run := func(ctx context.Context) (*recorder, *http.Request) {
		handled = true
		rec := &recorder{header: make(http.Header), max: m.o.MaxResponseBytes, under: w}
		if slot != nil {
			// Given back at the 101, the key's lease no longer bounds the
			// handler: HardTTL does, from now, as it would have (Once's
			// default: Config.OnceHardTTL, or the TTL when longer).
			hardTTL := m.o.HardTTL
			if hardTTL == 0 {
				hardTTL = max(m.c.Config().OnceHardTTL, m.ttl)
			}
			hardBy := time.Now().Add(hardTTL)
			var cancel context.CancelCauseFunc
			ctx, cancel = context.WithCancelCause(ctx)
			defer cancel(nil)
			var timer *time.Timer
			defer func() {
				if timer != nil {
					timer.Stop()
				}
			}()
			rec.onSwitch = func() {
				if slot.GiveBack != nil {
					rec.givenBack = slot.GiveBack("idempotency: the handler switched protocols (101 Switching Protocols); what follows is not protected by the key")
				}
				timer = time.AfterFunc(time.Until(hardBy), func() { cancel(errSessionHardTTL) })
			}
		}
		req := r.WithContext(ctx)
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		m.next.ServeHTTP(rec, req)
		return rec, req
	}

	var res sentinel.Result[json.RawMessage]
	var err error
	var unstored *recorder // a response sent without being stored
	var first *recorder    // this call ran the handler, and this is its response
	var ran bool           // this call ran the handler (Once)
	if m.o.Transactional {
		res, err = sentinel.OnceTx(txCtx, m.c, onceKey, func(ctx context.Context, tx pgx.Tx) (json.RawMessage, error) {
			if err := gate(ctx); err != nil {
				return nil, err
			}
			rec, _ := run(context.WithValue(ctx, txKey{}, tx))
			if rec.uncertain != nil {
				// Undo the handler's database writes; a transaction fn
				// closed itself leaves the key uncertain (OnceTx), which
				// is what the effect outside the database is.
				_ = tx.Rollback(ctx)
				return nil, rec.uncertain
			}
			if rec.switched {
				// Protocols switched: nothing to store; rolled back.
				unstored = rec
				return nil, errNotStored
			}
			if rec.overflow {
				return nil, errResponseTooLarge
			}
			if tx.Conn().PgConn().TxStatus() == 'E' {
				// A statement of the handler failed: its transaction is
				// aborted and can commit nothing, the key's record
				// included. An error response is sent as written, not
				// stored; a success response nothing backs is not sent.
				if rec.statusCode() >= 400 {
					unstored = rec
					return nil, errNotStored
				}
				m.c.Config().Logger.Warn("idempotency: the handler answered with a success status, but a statement of its transaction failed; nothing was committed, answered 500 ProblemNotCommitted, and a repeat runs it again: "+
					"fix the handler to answer an error when a statement of Tx fails",
					"idempotency_key", key, "scope", scope, "status", rec.statusCode())
				return nil, errNotCommitted
			}
			if rec.noEffect || !m.o.Store(rec.statusCode()) {
				unstored = rec
				return nil, errNotStored
			}
			data := rec.stored(fp).encode()
			if len(data) > m.c.Config().MaxResultSize {
				// Its headers make it too large (MaxResponseBytes bounds
				// the body): rolled back, as for a body too large.
				return nil, errResponseTooLarge
			}
			if err := storeSettings(ctx, tx); err != nil {
				return nil, err
			}
			first = rec
			return data, nil
		}, opts...)
	} else {
		res, err = sentinel.Once(onceCtx, m.c, onceKey, func(ctx context.Context) (json.RawMessage, error) {
			if err := gate(ctx); err != nil {
				return nil, err
			}
			ran = true
			rec, _ := run(ctx)
			if rec.uncertain != nil {
				// The key stays executing, its lease ended: uncertain.
				return nil, rec.uncertain
			}
			if rec.switched {
				// Protocols switched: nothing to store, the key is given
				// back (switchProtocols).
				unstored = rec
				return nil, sentinel.Retryable(errNotStored)
			}
			if rec.overflow {
				if rec.noEffect || !m.o.Store(rec.statusCode()) {
					// Nothing happened, says the handler: the key is given
					// back, as for any response sent without being stored.
					return nil, sentinel.Retryable(errResponseTooLarge)
				}
				// The request was processed: store the failure, so every
				// repeat learns the same and nothing runs twice.
				return Response{Fingerprint: fp, Status: statusTooLarge}.encode(), nil
			}
			if rec.noEffect || !m.o.Store(rec.statusCode()) {
				unstored = rec
				return nil, sentinel.Retryable(errNotStored)
			}
			first = rec
			data := rec.stored(fp).encode()
			if len(data) > m.c.Config().MaxResultSize {
				// Its headers make it too large to store (MaxResponseBytes
				// bounds the body). The request was processed: this
				// request gets its response, and the key stores the
				// failure, as for a body too large, so that every repeat
				// learns it and nothing runs twice.
				return Response{Fingerprint: fp, Status: statusTooLarge}.encode(), nil
			}
			return data, nil
		}, opts...)
	}

	if unstored != nil && unstored.switched {
		// The connection is the handler's now (101 sent, maybe
		// hijacked): nothing more is written on it.
		if !unstored.givenBack && (!errors.Is(err, errNotStored) || errors.Is(err, sentinel.ErrUncertain)) {
			m.c.Config().Logger.Warn("idempotency: the handler switched protocols (101), but its key was not given back (err says why): its repeats may get the uncertain problem instead of switching again; "+
				"inspect the key with the command, and reconcile and reset it (sentinel.Client.Reconcile, ResetToClaimed) so that a repeat switches again",
				"idempotency_key", key, "scope", scope, "command", Command("inspect", key, scope, m.namespace(), m.c.Config().Schema), "err", err)
		}
		return false
	}

	var resp Response
	var respErr error
	if err == nil {
		resp, respErr = DecodeResponse(res.Value)
	}
	// left: the wait ended with the request's own context (its client
	// left, or a server timeout cancelled it), not a failure of the store.
	left := wait && err != nil && errors.Is(context.Cause(ctx), errClientLeft)
	if left {
		m.c.Config().Logger.Debug("idempotency: a repeat's request ended (its client left) while it waited for the first request with its key; nothing was run for it, and the first request runs on",
			"idempotency_key", key, "scope", scope, "err", err)
	}
	switch {
	case errors.Is(err, errRerunAfterWait):
		return true
	case err == nil && respErr != nil:
		writeProblem(w, Problem{Type: ProblemUnreplayable, Title: "Stored outcome cannot be replayed", Status: http.StatusInternalServerError, Key: key,
			State: string(sentinel.StateCompleted), Token: res.Token,
			Detail: fmt.Sprintf("the request with Idempotency-Key %q was resolved (by an operator or the server) without an HTTP response that can be sent back; "+
				"it will not run again, and its outcome is recorded on the server: ask the service's operators for it, and do not repeat it with another key, "+
				"which could perform it twice", key)}, 0)
	case err == nil && res.Cached && resp.Fingerprint != fp:
		m.reused(w, key, nil)
	case err == nil && first != nil && !res.Cached:
		// The first response goes out in full, credentials included; only
		// replays go without them. (One too large to store, for its
		// headers, too: its repeats get the problem below.)
		first.sentResponse().write(w, false)
	case err == nil && resp.Status == statusTooLarge:
		writeProblem(w, Problem{Type: ProblemResponseTooLarge, Title: "Response too large to store", Status: http.StatusInternalServerError, Key: key,
			Detail: fmt.Sprintf("the request was processed, but its response was too large to be stored (a body over %d bytes, or headers too large with it); it will not run again with this key: "+
				"ask the service's operators for its outcome, and do not repeat it with another key, which would perform it again", m.o.MaxResponseBytes)}, 0)
	case err == nil:
		resp.write(w, res.Cached)
	case errors.Is(err, errNotStored) && !errors.Is(err, sentinel.ErrUncertain):
		// (Uncertain too: a re-run's last attempt, given back, leaves the
		// key uncertain, and so does every retry: see below.)
		unstored.sentResponse().write(w, false)
	case errors.Is(err, errResponseTooLarge) && !errors.Is(err, sentinel.ErrUncertain):
		// (Uncertain: a re-run's last attempt, given back, as below.)
		what := "so nothing was committed"
		if !m.o.Transactional {
			what = "and the server reported that nothing took effect"
		}
		writeProblem(w, Problem{Type: ProblemResponseTooLarge, Title: "Response too large to store", Status: http.StatusInternalServerError, Key: key,
			Detail: fmt.Sprintf("the response was too large to be stored (a body over %d bytes, or headers too large with it), %s; retrying with this key runs the request again", m.o.MaxResponseBytes, what)}, 0)
	case errors.Is(err, errNotCommitted):
		writeProblem(w, Problem{Type: ProblemNotCommitted, Title: "Request not committed", Status: http.StatusInternalServerError, Key: key,
			Detail: fmt.Sprintf("the request with Idempotency-Key %q failed: a statement of its database transaction failed, so nothing was committed and nothing was recorded for the key; "+
				"repeating it with the same key runs it again", key)}, 0)
	case first != nil && m.o.Transactional && commitRefusedForHandler(err):
		// The commit was refused for the handler's own writes (a
		// deferred constraint or constraint trigger), not for an outage:
		// nothing was committed, the key is free. As for a statement of
		// the handler that failed: its error response as written, or
		// ProblemNotCommitted for a success nothing backs.
		if first.statusCode() >= 400 {
			first.sentResponse().write(w, false)
			return false
		}
		m.c.Config().Logger.Warn("idempotency: the handler answered with a success status, but its transaction's commit was refused (a deferred constraint or trigger); nothing was committed, answered 500 ProblemNotCommitted, and a repeat runs it again: "+
			"fix the handler's writes (err names the constraint), or have it check them before it answers",
			"idempotency_key", key, "scope", scope, "status", first.statusCode(), "err", err)
		writeProblem(w, Problem{Type: ProblemNotCommitted, Title: "Request not committed", Status: http.StatusInternalServerError, Key: key,
			Detail: fmt.Sprintf("the request with Idempotency-Key %q failed: the database refused to commit its transaction (a constraint checked at the commit), so nothing was committed and nothing was recorded for the key; "+
				"repeating it with the same key runs it again", key)}, 0)
	case errors.Is(err, sentinel.ErrInProgress), errors.Is(err, errWaitOver) && !errors.Is(err, sentinel.ErrUncertain):
		var ee *sentinel.ExecutionError
		if errors.As(err, &ee) && m.differs(context.WithoutCancel(ctx), ee, fp) {
			m.reused(w, key, ee)
			return false
		}
		if mode == tryRerun || mode == tryFirst && m.o.Wait > 0 {
			return true
		}
		p := Problem{Type: ProblemInProgress, Title: "Request in progress", Status: http.StatusConflict, Key: key,
			Detail: "a request with this Idempotency-Key is being processed; retry after the Retry-After delay to get its response"}
		if ee != nil {
			p.State, p.Token = string(ee.State), ee.Token
		}
		writeProblem(w, p, 1)
	case errors.Is(err, sentinel.ErrUncertain) && first != nil && !m.o.Transactional:
		// The handler answered, but its completion was refused (it ran
		// past HardTTL, or its lease was lost): the key is uncertain for
		// its repeats, but this request's outcome is known, it is the
		// handler's response. Sent as written, not the uncertain
		// problem; an operator resolves the key with it (resolve
		// --refused). (With Transactional an unknown commit may or may
		// not have landed: the problem below.)
		// With Options.Rerun and attempts left the key is not uncertain:
		// a repeat runs the handler again (no operator, so no Warn).
		if ee := (*sentinel.ExecutionError)(nil); errors.As(err, &ee) && ee.Rerun {
			m.c.Config().Logger.Info("idempotency: the handler answered, but its completion was refused; its response was sent to the request that ran it, and a repeat of the request runs the handler again (Options.Rerun)",
				"idempotency_key", key, "scope", scope, "status", first.statusCode(), "err", err)
		} else {
			m.c.Config().Logger.Warn("idempotency: the handler answered, but its completion was refused; its response was sent to the request that ran it, and the key is uncertain for its repeats until an operator resolves it: "+
				"inspect it with the command, then resolve it with that response (resolve --refused)",
				"idempotency_key", key, "scope", scope, "status", first.statusCode(), "command", Command("inspect", key, scope, m.namespace(), m.c.Config().Schema), "err", err)
		}
		first.sentResponse().write(w, false)
	case errors.Is(err, sentinel.ErrUncertain):
		ee := execErr(err, onceKey)
		if m.differs(context.WithoutCancel(ctx), ee, fp) {
			m.reused(w, key, ee)
			return false
		}
		if ee.Settles {
			// OnceTx could not establish whether the commit landed (the
			// commit failed, as when its connection is cut, and the key
			// could not be read back): the key is completed if it did,
			// else still this attempt's until its lease expires, then
			// free. No operator is needed: the repeat gets the response,
			// or runs the request again.
			ttl := m.o.TTL
			if ttl <= 0 {
				ttl = m.c.Config().DefaultTTL
			}
			m.c.Config().Logger.Error("idempotency: whether a request's transaction committed could not be established; answered 503 ProblemUnavailable, and its repeat gets its response or runs it again: "+
				"no key needs an operator, but check the database connection (err)",
				"idempotency_key", key, "scope", scope, "err", err)
			writeProblem(w, Problem{Type: ProblemUnavailable, Title: "Idempotency store unavailable", Status: http.StatusServiceUnavailable, Key: key,
				State: string(ee.State), Token: ee.Token,
				Detail: fmt.Sprintf("the database did not confirm the commit of the request with Idempotency-Key %q (its connection was cut, say), and whether it committed could not be read back; "+
					"retry with the same key after the Retry-After delay: if it committed the retry gets its response, if not it runs again. "+
					"Do not send it with a new key, which could perform it twice", key)}, int(math.Ceil(ttl.Seconds())))
			return false
		}
		if ex, rerun := m.rerunnable(context.WithoutCancel(ctx), ee, ran); rerun {
			// This request's own attempt stopped (its handler called
			// Uncertain): the repeat runs the handler again.
			p := Problem{Type: ProblemRerun, Title: "Request did not finish; repeat it", Status: http.StatusServiceUnavailable,
				Key: key, State: string(ee.State), Token: ee.Token,
				Detail: fmt.Sprintf("the request with Idempotency-Key %q did not finish and may or may not have taken effect; "+
					"repeat it exactly, with the same key: it runs again while attempts are left, and its effect is deduplicated. "+
					"Do not send it with a new key, which could perform it twice", key)}
			if ex != nil {
				p.State, p.Token = string(ex.State), ex.Token
				p.Detail = fmt.Sprintf("the request with Idempotency-Key %q did not finish and may or may not have taken effect; "+
					"repeat it exactly, with the same key: it runs again (attempt %d of at most %d), and its effect is deduplicated. "+
					"Do not send it with a new key, which could perform it twice", key, ex.Attempt+1, min(ex.MaxAttempts, m.o.Rerun))
			}
			writeProblem(w, p, 1)
			return false
		}
		ns := ee.Namespace
		if ns == "" {
			ns = m.namespace()
		}
		if ee.Rerun {
			// Left for a re-run that this server's Options.Rerun does not
			// allow (none, or a bound the key's attempts reached: a rolling
			// deploy that adds or removes it). The key is not uncertain:
			// the operator's tools leave it out, and a server whose Rerun
			// allows another attempt runs it for the repeat. Not "it will
			// not be run again: an operator resolves it".
			m.c.Config().Logger.Info("idempotency: a request left for a re-run came to a server whose Options.Rerun does not allow another attempt; answered 503 ProblemRerun, and a repeat to a server whose Rerun allows one runs it",
				"idempotency_key", key, "scope", scope, "rerun", m.o.Rerun, "err", err)
			writeProblem(w, Problem{Type: ProblemRerun, Title: "Request did not finish; repeat it", Status: http.StatusServiceUnavailable, Key: key,
				State: string(ee.State), Token: ee.Token,
				Detail: fmt.Sprintf("the request with Idempotency-Key %q did not finish and may or may not have taken effect; "+
					"it is run again by a server of this service whose Options.Rerun allows another attempt, and this request did not run it: "+
					"repeat it exactly, with the same key, after the Retry-After delay. If no server runs it again, an operator resolves it (%s), "+
					"after which repeating it gets its outcome. Do not send it with a new key, which could perform it twice",
					key, Command("inspect", key, scope, ns, m.c.Config().Schema))}, 1)
			return false
		}
		writeProblem(w, Problem{Type: ProblemUncertain, Title: "Outcome of the original request unknown", Status: http.StatusInternalServerError, Key: key,
			State: string(ee.State), Token: ee.Token,
			Detail: fmt.Sprintf("the request with Idempotency-Key %q did not finish with a known outcome (a crash, a lost lease, or a dependency that did not answer) "+
				"and may or may not have taken effect; it will not be run again: an operator resolves it (%s), after which repeating this same request gets its outcome. "+
				"Do not send it with a new key, which could perform it twice", key, Command("inspect", key, scope, ns, m.c.Config().Schema))}, 0)
	case errors.Is(err, sentinel.ErrReconciling):
		ee := execErr(err, onceKey)
		if m.differs(context.WithoutCancel(ctx), ee, fp) {
			m.reused(w, key, ee)
			return false
		}
		writeProblem(w, Problem{Type: ProblemReconciling, Title: "Request being reconciled", Status: http.StatusServiceUnavailable, Key: key,
			State: string(ee.State), Token: ee.Token,
			Detail: "an operator is establishing the outcome of the request with this Idempotency-Key; retry later"}, 5)
	case errors.Is(err, sentinel.ErrResult):
		// Sentinel's error is for the operators (it names the execution
		// key and SetResult): logged, not sent.
		m.c.Config().Logger.Error("idempotency: a request's handler ran, but its response was not stored; answered 500 ProblemNotStored, and so is every repeat until an operator stores its outcome: "+
			"inspect the key with the command, then store the response it should replay (the command's resolve line, sentinel idempotency resolve, or idempotency.Resolve)", "idempotency_key", key, "scope", scope,
			"command", Command("inspect", key, scope, m.namespace(), m.c.Config().Schema), "err", err)
		writeProblem(w, Problem{Type: ProblemNotStored, Title: "Response not stored", Status: http.StatusInternalServerError, Key: key,
			Detail: fmt.Sprintf("the request with Idempotency-Key %q was processed, but its response was not stored and cannot be sent again; it will not run again with this key: "+
				"ask the service's operators for its outcome (%s), and do not repeat it with another key, which would perform it again",
				key, Command("inspect", key, scope, m.namespace(), m.c.Config().Schema))}, 0)
	case errors.Is(err, sentinel.ErrFinal):
		// The middleware never completes a key with an error; an operator
		// tool did. The outcome is recorded, not a response.
		writeProblem(w, Problem{Type: ProblemUnreplayable, Title: "Stored outcome cannot be replayed", Status: http.StatusInternalServerError, Key: key,
			Detail: fmt.Sprintf("the request with Idempotency-Key %q was completed with an error instead of an HTTP response; "+
				"it will not run again: ask the service's operators for its outcome, and do not repeat it with another key, which could perform it twice", key)}, 0)
	case errors.Is(err, sentinel.ErrInvalid):
		writeProblem(w, Problem{Type: "about:blank", Title: "Internal Server Error", Status: http.StatusInternalServerError, Key: key,
			Detail: "idempotency: the middleware is misconfigured: " + err.Error()}, 0)
	case wait && ctx.Err() != nil:
		// The wait ended (Options.Wait ran out, or the request's context:
		// its client left) while a claim or a read of the key was in
		// flight, or before it was sent, which the end of ctx cut: not a
		// failure of the store, and the key is as the first request
		// leaves it. What a wait that ran out gets: 409 with Retry-After.
		writeProblem(w, Problem{Type: ProblemInProgress, Title: "Request in progress", Status: http.StatusConflict, Key: key,
			Detail: "a request with this Idempotency-Key is being processed; retry after the Retry-After delay to get its response"}, 1)
	case errors.Is(err, sentinel.ErrClosed) && !handled:
		// Client.Close ended this request's claim or wait before its
		// handler ran: the server is shutting down (a deploy), not a
		// failure of the store. Nothing ran for the request and no
		// response was stored for it: a wait leaves the key to the first
		// request, and a claim made as Close began is given back (or, if
		// that failed, which Sentinel logs, its lease expires within the
		// TTL). The client retries, on another server.
		m.c.Config().Logger.Info("idempotency: the server is shutting down (sentinel.Client.Close) and ended a request's claim or wait before its handler ran; answered 503 ProblemUnavailable with Retry-After: "+
			"nothing ran for it and nothing was recorded for it, and the client retries with its key",
			"idempotency_key", key, "scope", scope, "err", err)
		writeProblem(w, Problem{Type: ProblemUnavailable, Title: "Server shutting down", Status: http.StatusServiceUnavailable, Key: key,
			Detail: "the server is shutting down and stopped this request before it ran: nothing was recorded for this request; retry with the same Idempotency-Key after the Retry-After delay"}, 1)
	case errors.Is(err, sentinel.ErrClosed) && m.o.Transactional:
		// Client.Close ended the key's lease while the handler ran (or
		// after it returned, before the commit): the handler's ctx ended,
		// and the statements after it (the timeouts' reset, the
		// completion) were refused with the lease lost by Close
		// (sentinel.LostError, Cause ErrClosed). The server is shutting
		// down, not a failure of the store: OnceTx rolled the transaction
		// back, the handler's writes and the key's completion together,
		// and gave the key back (or, if that failed, which Sentinel logs,
		// its lease expires within the TTL). Nothing was recorded; the
		// client retries, on another server, where the handler runs
		// afresh. (A commit whose outcome is unknown matches ErrUncertain,
		// answered above.)
		m.c.Config().Logger.Info("idempotency: the server is shutting down (sentinel.Client.Close) and ended a transactional request while its handler ran, before its commit; answered 503 ProblemUnavailable with Retry-After: "+
			"the handler's transaction was rolled back, its writes and the key's completion with it, nothing was recorded for the request, and the client retries with its key, which runs the handler again. "+
			"Nothing needs doing; to let such requests finish in a deploy, stop the HTTP server (http.Server.Shutdown waits for running handlers) before closing the Sentinel client",
			"idempotency_key", key, "scope", scope, "err", err)
		writeProblem(w, Problem{Type: ProblemUnavailable, Title: "Server shutting down", Status: http.StatusServiceUnavailable, Key: key,
			Detail: "the server is shutting down and stopped this request before it could complete: its database transaction was rolled back, so none of its writes were kept and nothing was recorded for this request; " +
				"retry with the same Idempotency-Key after the Retry-After delay, and it runs again"}, 1)
	default:
		// The store failed before the handler ran, or (transactional) the
		// completion was refused and everything was rolled back. Its
		// error names the database (user, name, host) and the execution
		// key: logged for the operators, never sent to the client.
		m.c.Config().Logger.Error("idempotency: the request could not be recorded (nothing was); answered 503 ProblemUnavailable, and the client retries with its key: "+
			"check the database and the Sentinel schema (err says what failed)", "idempotency_key", key, "scope", scope, "err", err)
		writeProblem(w, Problem{Type: ProblemUnavailable, Title: "Idempotency store unavailable", Status: http.StatusServiceUnavailable, Key: key,
			Detail: "the server's idempotency store failed or refused to record this request, and nothing was recorded for it; retry with the same Idempotency-Key after the Retry-After delay"}, 1)
	}
	return false
}

var (
	errNotStored = errors.New("idempotency: response not stored")
	errWaitOver  = errors.New("idempotency: Options.Wait passed while the first request ran")
	// errClientLeft ends a wait whose request's context ended (the client
	// left): a cancellation, no failure of the store.
	errClientLeft       = fmt.Errorf("idempotency: the request's context ended (its client left) while it waited for the first request with its key: %w", context.Canceled)
	errResponseTooLarge = errors.New("idempotency: response too large to store")
	errNotCommitted     = errors.New("idempotency: a statement of the handler failed; its transaction committed nothing")
	errSessionHardTTL   = fmt.Errorf("idempotency: Options.HardTTL passed during the session that followed 101 Switching Protocols: %w", sentinel.ErrHardTTL)
	// errRerunAfterWait is the rerun guard's answer to a request waiting
	// (Options.Wait) for an attempt of its own key that stopped: the
	// request re-runs the key after the wait, not within it. A re-run
	// claimed within the wait has the wait's ctx, which its deadline (or
	// the client leaving) ends: a claim made as it ends is given back
	// without running the handler and counts as an attempt (in the last
	// one the key is left uncertain, for an operator, though nothing ran).
	errRerunAfterWait = errors.New("idempotency: the key was left for a re-run of this request while it waited")
)
