package console

// This file: A running key's state read again when its lease expires as read (lease-state, for live.js).

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/internal/reltime"
)

// leaseState is a key's state as lease-state answers it: what the "state"
// template shows for it (Badge), so that a page whose rows show the key
// running can mark it as a reload would once its lease expired. A lease
// expires without an event: the live view cannot announce it.
type leaseState struct {
	Token int64  `json:"token"`
	State string `json:"state"`
	// Alive: the lease is live on the database clock; LeaseExpiresAt is
	// its expiry now (it moves on with each renewal) and LeaseLeftMS the
	// time it had left at the read, on the database clock, which the page
	// counts down on its own monotonic clock (no clock's offset counts).
	Alive          bool   `json:"alive"`
	LeaseExpiresAt string `json:"lease_expires_at,omitempty"`
	LeaseLeftMS    int64  `json:"lease_left_ms"`
	Uncertain      bool   `json:"uncertain"`
	Badge          badge  `json:"badge"`
	// Note says what the state means, as the key page says it.
	Note string `json:"note,omitempty"`
	At   string `json:"at"` // when it was read (the database clock, as the console knows it: dbNow)
	// Since is when the key entered the state read (Execution.Since):
	// for a key whose lease expired, the lease's end, which the page
	// shows in place of the Since it was read with.
	Since string `json:"since"`
	// HardPast, for a key that keeps the hard expiry of a claim that
	// ended (handed back: execView.HardPast), is what the key page says
	// after "none" in its Hard expiry row (hardPastNote), which the page
	// shows in place of the hard expiry it was read with.
	HardPast string `json:"hard_past,omitempty"`
}

// badge is a state badge: its CSS class, text and title, as the "state"
// template shows it and lease-state answers it.
type badge struct {
	Class string `json:"class"`
	Text  string `json:"text"`
	Title string `json:"title,omitempty"`
}

// rerunNeedsOperator is what the pages call a key rerun pending whose
// lease ended more than Options.RerunPendingAfter ago (RerunStale), in
// the words of every sentinel command that shows it (status, list,
// inspect, idempotency list and inspect): an operator who saw it in one
// finds it in the others.
const rerunNeedsOperator = "rerun pending, needs an operator"

// reconcilingNeedsOperator is what the pages call a key reconciling for
// longer than after (Options.ReconcilingAfter, as the pages write it:
// execView.ReconcilingStale), in the words of sentinel list, inspect and
// the idempotency commands.
func reconcilingNeedsOperator(after string) string {
	return "reconciling (needs an operator: for more than " + after + ")"
}

// stateBadge is the badge the "state" template shows for v (the
// template's badge function).
func stateBadge(v execView) badge {
	switch {
	case v.Uncertain:
		return badge{Class: "badge uncertain", Text: "uncertain"}
	case v.HandedBack:
		return badge{Class: "badge s-handed-back", Text: "handed back, safe to retry", Title: "claimed, no live lease: nothing runs it, the next caller does"}
	case v.ResultLost:
		return badge{Class: "badge s-result-lost", Text: "completed, result not stored", Title: "completed, but fn's result was not stored: callers get ErrResult until an operator stores it"}
	case v.ReconcilingStale:
		return badge{Class: "badge s-reconciling", Text: reconcilingNeedsOperator(v.ReconcilingAfter),
			Title: "an operator began reconciling it more than " + v.ReconcilingAfter + " ago and has not force-completed or reset it: every caller gets ErrReconciling until one does"}
	case v.RerunStale:
		return badge{Class: "badge s-rerun-pending", Text: fmt.Sprintf("%s: attempt %d of %d stopped", rerunNeedsOperator, v.Attempt, v.MaxAttempts),
			Title: "stopped without an outcome with re-runs left (WithRerun), and no caller came back to run the next attempt: find out whether the work happened"}
	case v.RerunPending:
		title := "stopped without an outcome with re-runs left (WithRerun): the next caller with WithRerun runs the next attempt"
		if isHTTPKey(v.Key) {
			title = "stopped without an outcome with re-runs left (Options.Rerun): the client's repeat of the request runs the next attempt"
		}
		return badge{Class: "badge s-rerun-pending", Text: fmt.Sprintf("rerun pending: attempt %d of %d stopped", v.Attempt, v.MaxAttempts),
			Title: title}
	}
	return badge{Class: "badge s-" + string(v.State), Text: string(v.State)}
}

// stateNote is what the key page says after the badge of v (key.html).
func (cs *Console) stateNote(v execView) string {
	switch {
	case v.Uncertain:
		return "executing, and its lease expired: the outcome is unknown"
	case v.ReconcilingStale && isHTTPKey(v.Key):
		return "an operator began reconciling it more than " + v.ReconcilingAfter + " ago and has not resolved it: every caller gets ErrReconciling until it is resolved with the response its retries get"
	case v.ReconcilingStale:
		return "an operator began reconciling it more than " + v.ReconcilingAfter + " ago and has not resolved it: every caller gets ErrReconciling until it is force-completed (the work happened) or reset (it did not)"
	case v.RerunStale && isHTTPKey(v.Key):
		// As sentinel idempotency inspect says it: the middleware's key is
		// re-run by a repeat of the request, and resolved with a response.
		return fmt.Sprintf("executing, %s: attempt %d of %d stopped (its lease expired without an outcome) more than %s ago, and no repeat of the request came back to run attempt %d of %d: "+
			"if none will, find out whether the request took effect, then resolve it with the response its retries get (no repeat re-runs it after that)",
			rerunNeedsOperator, v.Attempt, v.MaxAttempts, reltime.Duration(cs.opts.RerunPendingAfter), v.Attempt+1, v.MaxAttempts)
	case v.RerunStale:
		return fmt.Sprintf("executing, %s: attempt %d of %d stopped (its lease expired without an outcome) more than %s ago, and no caller with WithRerun came back to run attempt %d of %d: "+
			"if none will, find out whether the work happened, then reconcile (no caller re-runs it after that)",
			rerunNeedsOperator, v.Attempt, v.MaxAttempts, reltime.Duration(cs.opts.RerunPendingAfter), v.Attempt+1, v.MaxAttempts)
	case v.RerunPending && isHTTPKey(v.Key):
		// As sentinel list and idempotency inspect say it.
		return fmt.Sprintf("executing, rerun pending: attempt %d of %d stopped (its lease expired without an outcome); the client's repeat of the request runs attempt %d of %d (the effect is deduplicated downstream); no operator is needed unless no repeat comes back for more than %s",
			v.Attempt, v.MaxAttempts, v.Attempt+1, v.MaxAttempts, reltime.Duration(cs.opts.RerunPendingAfter))
	case v.RerunPending:
		return fmt.Sprintf("executing, rerun pending: attempt %d of %d stopped (its lease expired without an outcome); the next call with WithRerun runs attempt %d of %d (the effect is deduplicated downstream); no operator is needed unless no caller with WithRerun comes back for more than %s",
			v.Attempt, v.MaxAttempts, v.Attempt+1, v.MaxAttempts, reltime.Duration(cs.opts.RerunPendingAfter))
	}
	return ""
}

// leaseStateJSON answers GET lease-state?ns=NS&key=KEY: the key's state
// now, read on the database clock (leaseState), for live.js, which asks
// once the lease time a running row had left at its read has run out.
func (cs *Console) leaseStateJSON(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	ex, err := cs.c.Inspect(ctx, q.Get("key"), sentinel.WithNamespace(q.Get("ns")))
	switch {
	case errors.Is(err, sentinel.ErrInvalid):
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	case errors.Is(err, sentinel.ErrNotFound):
		http.Error(w, "not found", http.StatusNotFound)
		return
	case err != nil:
		http.Error(w, err.Error(), errStatus(err))
		return
	}
	v := cs.view(*ex)
	s := leaseState{Token: ex.Token, State: string(ex.State), Alive: ex.LeaseAlive, Uncertain: v.Uncertain,
		Badge: stateBadge(v), Note: cs.stateNote(v), At: cs.dbNow().UTC().Format(time.RFC3339Nano),
		Since: v.Since.UTC().Format(time.RFC3339Nano)}
	if v.HardPast {
		s.HardPast = hardPastNote(ex.HardExpiresAt)
	}
	if !ex.LeaseExpiresAt.IsZero() {
		s.LeaseExpiresAt = ex.LeaseExpiresAt.UTC().Format(time.RFC3339Nano)
		s.LeaseLeftMS = ex.LeaseLeft().Milliseconds()
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(s)
}

// isHTTPKey says whether key is an HTTP request's (the idempotency
// middleware's, idempotency.ExecutionKey).
func isHTTPKey(key string) bool {
	_, _, ok := idempotency.ParseExecutionKey(key)
	return ok
}
