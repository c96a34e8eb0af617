package idempotency

// This file: The problem responses: the Problem types (RFC 9457 problem+json), writeProblem, and the 422 of a reused key.

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/sentinel-coordination/sentinel"
)

// Problem types: the "type" member of the RFC 9457 problem details the
// middleware writes. Each URI resolves to this documentation.
const (
	problemBase = "https://pkg.go.dev/github.com/sentinel-coordination/sentinel/idempotency#"

	// ProblemKeyMissing (400): the route requires an Idempotency-Key and the
	// request has none.
	ProblemKeyMissing = problemBase + "ProblemKeyMissing"
	// ProblemKeyInvalid (400): the Idempotency-Key is malformed, too long, or
	// sent more than once.
	ProblemKeyInvalid = problemBase + "ProblemKeyInvalid"
	// ProblemBodyTooLarge (413): the request body is over Options.MaxBodyBytes.
	ProblemBodyTooLarge = problemBase + "ProblemBodyTooLarge"
	// ProblemNoScope (403): Options.Scope returned "" for the request: the
	// server could not tell whom it acts for. The handler did not run.
	ProblemNoScope = problemBase + "ProblemNoScope"
	// ProblemInProgress (409): a request with this key is being processed;
	// retry after the Retry-After delay.
	ProblemInProgress = problemBase + "ProblemInProgress"
	// ProblemKeyReused (422): the key was used by a different request
	// (method, path and query, or body differ).
	ProblemKeyReused = problemBase + "ProblemKeyReused"
	// ProblemUncertain (500): the first request with this key did not finish
	// (crash, panic, lost lease) or its handler called Uncertain, and it may
	// or may not have taken effect. It is never run again by itself: an
	// operator resolves the key (the detail names the `sentinel
	// idempotency inspect` command line that shows it; see also the
	// sentinel console). With Options.Rerun a repeat runs it again
	// instead (after Uncertain too), until its attempts are used up.
	ProblemUncertain = problemBase + "ProblemUncertain"
	// ProblemRerun (503): with Options.Rerun, this request's handler did not
	// finish with a known outcome (it called Uncertain: say, its call to
	// the provider ended with its context, when its lease was lost or at
	// HardTTL; a handler that answers instead has that answer sent, as
	// without the option) and may or may not have taken effect, and
	// attempts remain; its
	// effect is deduplicated downstream, so repeating the same request with
	// the same key runs it again. Retry after the Retry-After delay. A
	// server whose Options.Rerun does not allow another attempt (none, or
	// a lower bound: a rolling deploy that adds or removes it) answers it
	// too for a request another server left for a re-run, and does not run
	// it: the key is not uncertain, a repeat to a server whose Rerun allows
	// it runs it, and the detail names the command that shows the key in
	// case none does.
	ProblemRerun = problemBase + "ProblemRerun"
	// ProblemReconciling (503): an operator is reconciling the key; retry
	// later.
	ProblemReconciling = problemBase + "ProblemReconciling"
	// ProblemResponseTooLarge (500): the handler's response is over
	// Options.MaxResponseBytes (or its headers make it too large for the
	// client's Config.MaxResultSize), so it could not be stored. Without
	// Options.Transactional the request was processed, and its repeats get
	// the same, unless the handler said it changed nothing (NoEffect,
	// Options.Store); with it, nothing was committed. The detail says
	// which: whether retrying with the key runs the request again.
	ProblemResponseTooLarge = problemBase + "ProblemResponseTooLarge"
	// ProblemNotStored (500): the request was processed but its response
	// was not stored, so it cannot be replayed; it is never run again
	// (the detail names the `sentinel idempotency inspect` command line;
	// Sentinel's error goes to the client's Config.Logger).
	ProblemNotStored = problemBase + "ProblemNotStored"
	// ProblemUnreplayable (500): the key is completed, but its stored
	// result is not a response the middleware can replay (an operator
	// resolved it with a generic tool, or it ended with an error instead of
	// a response). The request's outcome is recorded but cannot be sent;
	// an operator must look at it (sentinel idempotency inspect). The key
	// is never run again.
	ProblemUnreplayable = problemBase + "ProblemUnreplayable"
	// ProblemNotCommitted (500): with Options.Transactional, a statement
	// of the handler failed and its transaction could not commit (it was
	// aborted: SQLSTATE 25P02 for everything after), yet the handler
	// answered with a success status. Nothing was committed and nothing
	// recorded for the key: repeating the request with the same key runs
	// the handler again. (An error status the handler wrote after its
	// statement failed, a 409 for a unique violation say, is sent as
	// written, not stored.) Roll back to a savepoint in the handler to
	// keep a transaction usable after a statement that may fail. The same
	// holds when the commit is refused for the handler's writes (a
	// deferred constraint or a constraint trigger's error, whatever its
	// SQLSTATE: 23505, P0001, a code of the handler's own); a failure of
	// the store at the commit (a connection lost, a serialization failure,
	// a shutdown: SQLSTATE classes 08, 40, 53, 57, 58, 72, F0, XX; a lock
	// not available, 55P03; a read-only transaction after a failover,
	// 25006) is ProblemUnavailable.
	ProblemNotCommitted = problemBase + "ProblemNotCommitted"
	// ProblemUnavailable (503): the idempotency store could not be reached
	// or refused the completion; nothing was recorded as done. Retry. The
	// store's error, which names the database, is not in the detail: it
	// goes to the client's Config.Logger. With Options.Transactional it
	// also answers a request whose commit failed (its connection cut) when
	// whether it landed could not be read back: the retry, after the
	// Retry-After delay (the key's TTL), gets the response if it landed,
	// and runs the request again if not. It also answers a request whose
	// claim or wait the client's Close ended before its handler ran (the
	// server is shutting down, titled so, and logged at Info): nothing ran
	// and nothing was recorded for it; retry with the same key. With
	// Options.Transactional, so is a request that Close ended while its
	// handler ran (or after it returned, before the commit): its
	// transaction was rolled back, and the retry runs the handler afresh.
	ProblemUnavailable = problemBase + "ProblemUnavailable"
)

// Problem is an RFC 9457 problem details object, as written by the
// middleware with Content-Type application/problem+json.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Extension members.
	Key   string `json:"idempotency_key,omitempty"` // the key concerned
	State string `json:"state,omitempty"`           // the key's execution state, when known
	Token int64  `json:"token,omitempty"`           // the execution's fencing token, when known
}

func writeProblem(w http.ResponseWriter, p Problem, retryAfter int) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retryAfter))
	}
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

func (m *middleware) reused(w http.ResponseWriter, key string, ee *sentinel.ExecutionError) {
	p := Problem{Type: ProblemKeyReused, Title: "Idempotency-Key reused", Status: http.StatusUnprocessableEntity, Key: key,
		Detail: "this Idempotency-Key was already used for a different request (method, path, query or body differ); use a new key for a new request"}
	if ee != nil {
		// The first request's outcome is not known yet: a client that
		// meant to retry it must not be sent to a new key.
		p.State, p.Token = string(ee.State), ee.Token
		p.Detail = "this Idempotency-Key belongs to a different request (method, path, query or body differ) whose outcome is not known yet; " +
			"if this is a retry of that request, send it exactly as the first time: a new key would perform it again"
	}
	writeProblem(w, p, 0)
}
