package sentinel

// This file: Observer: the hooks a Client calls (Once and lease outcomes, losses, heartbeats, fencing refusals, queue grants, term changes) and their event types.

import (
	"context"
	"errors"
	"time"
)

// Observer receives what a Client does, for metrics and tracing (package
// otelsentinel implements one with OpenTelemetry; the core never imports
// it). Set it in Config.Observer. Every field is optional: a nil Observer or
// a nil func costs one nil check on the hot paths and allocates nothing.
//
// The funcs are called synchronously on the goroutine doing the work (the
// heartbeat's, for Heartbeat and most LeaseLost calls): they must be fast
// and must not call back into the Client. They may be called concurrently.
type Observer struct {
	// OnceStart is called when a Once or OnceTx call begins, before any
	// statement. The context it returns is used for the rest of the call
	// and is the parent of fn's context, so a tracer can start a span here.
	OnceStart func(ctx context.Context, namespace, key string) context.Context

	// OnceEnd is called when a Once or OnceTx call returns, with the
	// context OnceStart returned.
	OnceEnd func(ctx context.Context, e OnceEvent)

	// LeaseStart is called when Client.Lease or Client.AdoptHandle
	// begins; like OnceStart, its context is used for the rest of the
	// call.
	LeaseStart func(ctx context.Context, namespace, key string) context.Context

	// LeaseEnd is called when Client.Lease or Client.AdoptHandle
	// returns, acquired (adopted) or not; LeaseEvent.Adopted tells
	// the two apart.
	LeaseEnd func(ctx context.Context, e LeaseEvent)

	// LeaseLost is called when a held lease or a running Once's execution
	// lease is lost (renewal deadline passed, taken over, hard TTL) or
	// ended by Client.Close while it ran (its Err matches ErrClosed), not
	// when it is released or handed on (Lease.Detach), nor when its
	// release failed (ReleaseFailed).
	// A lease or turn whose deadline passes while its Release is in
	// flight is reported when that Release returns, and only if Err then
	// still reports the loss (a release that freed the live row makes it
	// ErrReleased); Done closes at the deadline all the same. So is a
	// running Once's execution lease whose deadline passes while its
	// completion is in flight: no loss when the completion committed (the
	// caller gets fn's result), the loss when it was refused; and an
	// elector's term whose deadline passes while its release (on Resign,
	// Run's ctx ended, Client.Close) is in flight: no loss when the
	// release found the term live, the loss when it had expired first.
	LeaseLost func(e LeaseLoss)

	// ReleaseFailed is called when a release statement failed (database
	// unreachable, statement cancelled), ending a lease or turn its holder
	// was done with: Lease.Release, Turn.Release, Client.Close's release,
	// a waiting ticket given up, the release of a term an elector
	// stepped down from (Kind LossLeader; see Elector.Resign), or the
	// give-back of a lease, ticket or term granted as its caller's ctx
	// ended or as the client closed, or to a waiter that gave up (retried after a dropped connection first,
	// within Config.ReleaseTimeout), or of the ticket of a draw cut off as
	// its caller's ctx ended (see Client.Turn; Token 0 when looking for
	// it failed, its number unknown). It is no loss: the row still carried
	// the holder's token, and the key frees when the row expires, within
	// one TTL (at once if the statement committed before its reply was
	// lost). A lease lost before its release is reported once, to
	// LeaseLost.
	ReleaseFailed func(e ReleaseFailure)

	// Heartbeat is called after each renewal statement, except one
	// aborted by Client.Close or by the ctx of Lease.Heartbeat's caller
	// (no renewal failed).
	Heartbeat func(e HeartbeatEvent)

	// FencingRefused is called when VerifyToken, VerifyExecutionToken,
	// VerifyTerm or VerifyTurn refuses a stale token, term or ticket.
	FencingRefused func(ctx context.Context, e FencingRefusal)

	// QueueGranted is called when a queue ticket is granted (Client.Turn).
	QueueGranted func(e QueueGrant)

	// TermChanged is called when an elector sees a new term: it was
	// elected, stopped leading (lost the term, or stepped down: see
	// TermChange.Err), or saw another node lead.
	TermChanged func(e TermChange)
}

// OnceOutcome classifies how a Once or OnceTx call ended.
type OnceOutcome string

// Once outcomes.
const (
	OutcomeRan         OnceOutcome = "ran"         // fn ran and the key completed
	OutcomeCached      OnceOutcome = "cached"      // a stored result was replayed; fn did not run
	OutcomeFinal       OnceOutcome = "final"       // a final error (fn's, or replayed)
	OutcomeInProgress  OnceOutcome = "in_progress" // another worker holds the key
	OutcomeUncertain   OnceOutcome = "uncertain"   // the outcome is unknown: reconcile the key
	OutcomeReconciling OnceOutcome = "reconciling" // an operator is reconciling the key
	// OutcomeRetryable: fn said nothing happened (Retryable); the key is
	// free again, except in a WithRerun re-run (attempt 2 on), where an
	// earlier attempt may have had its effect: the key is left for the
	// next re-run (rerun pending, not free: a caller without WithRerun
	// gets ErrUncertain), and in the last attempt the call ends
	// OutcomeUncertain instead.
	OutcomeRetryable OnceOutcome = "retryable"
	OutcomeError     OnceOutcome = "error" // bad input, a database error, a result codec failure (but see OutcomeResultLost)
	// OutcomeResultLost: fn succeeded and the key completed, but its value
	// could not be stored (ErrResultLost): this call and every replay of
	// the key fail with ErrResult until an operator stores the value
	// (Client.SetResult). Alert on it: it needs a person.
	OutcomeResultLost OnceOutcome = "result_lost"
	// OutcomeRerunPending: the outcome is unknown (ErrUncertain), but the
	// key was started with WithRerun and attempts remain, so the next Once
	// call for it with WithRerun runs fn again: no operator is needed yet
	// (ExecutionError.Rerun).
	OutcomeRerunPending OnceOutcome = "rerun_pending"
	// OutcomeCommitUnknown: an OnceTx or OnceSQLTx whose commit was not
	// confirmed and whose key could not be read back (ErrUncertain with
	// ExecutionError.Settles): the outcome is unknown to this call, but
	// the key settles without an operator (completed if the commit
	// landed, else free once its lease expires). Not a case for a person;
	// a burst of them says the database was unreachable at commits.
	OutcomeCommitUnknown OnceOutcome = "commit_unknown"
	// OutcomeCanceled: the caller's ctx ended (cancelled, or its deadline
	// passed) and the call failed without an outcome of the key: fn did
	// not run (a claim in flight was given back: the key is claimable; a
	// re-run's claim leaves it for the next re-run, see WithRerun), or
	// OnceTx's transaction rolled back. The caller gave up; nothing failed.
	// A ctx that ends while fn runs makes the key's outcome fn's (uncertain
	// when fn had crossed its boundary); one that ends while WithWait waits
	// for another worker's run leaves OutcomeInProgress. Only OnceEvent
	// carries it: OnceOutcomeOf, which sees no ctx, says OutcomeError.
	OutcomeCanceled OnceOutcome = "canceled"
	// OutcomeClosed: the call failed with ErrClosed: the client was
	// closed before fn ran (the call came after Client.Close, or Close
	// ended its wait or its claim in flight, which was given back). The
	// process is shutting down; nothing failed. (A Once whose fn was
	// running when Close cancelled its ctx has fn's outcome.)
	OutcomeClosed OnceOutcome = "closed"
)

// OnceOutcomeOf classifies a Once call's result: cached is Result.Cached,
// err the call's error.
func OnceOutcomeOf(cached bool, err error) OnceOutcome {
	switch {
	case err == nil && cached:
		return OutcomeCached
	case err == nil:
		return OutcomeRan
	case errors.Is(err, ErrFinal):
		return OutcomeFinal
	case errors.Is(err, ErrUncertain):
		if ee := (*ExecutionError)(nil); errors.As(err, &ee) && ee.Settles {
			return OutcomeCommitUnknown
		} else if ee != nil && ee.Rerun {
			return OutcomeRerunPending
		}
		return OutcomeUncertain
	case errors.Is(err, ErrInProgress):
		return OutcomeInProgress
	case errors.Is(err, ErrReconciling):
		return OutcomeReconciling
	case IsRetryable(err):
		return OutcomeRetryable
	case errors.Is(err, ErrResultLost):
		return OutcomeResultLost
	case errors.Is(err, ErrClosed):
		return OutcomeClosed
	}
	return OutcomeError
}

// OnceEvent describes a finished Once or OnceTx call.
type OnceEvent struct {
	Namespace string
	Key       string
	Outcome   OnceOutcome
	Token     int64 // the execution's fencing token; 0 when none was seen
	Duration  time.Duration
	Err       error
}

// LeaseEvent describes a finished Client.Lease or Client.AdoptHandle
// call.
type LeaseEvent struct {
	Namespace string
	Key       string
	Wait      bool  // WithWait: Duration includes the wait for the holder
	Acquired  bool  // the lease was granted (adopted, for AdoptHandle)
	Token     int64 // the granted token; 0 when not acquired
	Duration  time.Duration
	// Err is the call's error, nil when acquired: a *HeldError when held
	// elsewhere (Client.Lease), ctx's error, ErrClosed, ... For
	// AdoptHandle: ErrStaleToken when the handle was no longer the
	// current grant, or a *LostError matching ErrHardTTL (and
	// ErrLeaseLost) when the lease's hard expiry was within the margin
	// of the TTL asked, so it was given back (no LeaseLost is reported
	// for it).
	Err error
	// Adopted: the call was Client.AdoptHandle, which takes a lease
	// handed on over (Acquired when it did), rather than Client.Lease.
	Adopted bool
}

// LeaseLoss describes a lost lease.
type LeaseLoss struct {
	Namespace string
	Key       string // the lease's key; the group for a term or member row, the resource for a ticket
	Token     int64  // the token; the term for a term, the ticket for a ticket
	Execution bool   // the execution lease of a running Once (Kind is LossExecution)
	Kind      LossKind
	Err       error // matches ErrLeaseLost; ErrHardTTL when that was the reason
}

// ReleaseFailure describes a release statement that failed, ending a lease
// its holder was done with (Observer.ReleaseFailed).
type ReleaseFailure struct {
	Namespace string
	Key       string // as in LeaseLoss
	Token     int64  // as in LeaseLoss
	Kind      LossKind
	Err       error // what the lease's Err returns: matches ErrLeaseLost, its cause the statement's error (ErrClosed from Client.Close)
}

// LossKind names what a lost lease held.
type LossKind string

// Lease loss kinds.
const (
	LossLease     LossKind = "lease"     // a lease from Client.Lease (or Do)
	LossExecution LossKind = "execution" // the execution lease of a running Once
	LossLeader    LossKind = "leader"    // an elector's term: it is demoted
	LossMember    LossKind = "member"    // an elector's member row
	LossTicket    LossKind = "ticket"    // a queue ticket (Client.Turn), waiting or granted
)

// lossKind returns what l holds, for LeaseLoss.Kind.
func (l *Lease) lossKind() LossKind {
	switch l.kind {
	case kindExecution:
		return LossExecution
	case kindLeader:
		return LossLeader
	case kindMember:
		return LossMember
	case kindTicket:
		return LossTicket
	}
	return LossLease
}

// HeartbeatEvent describes one renewal statement.
type HeartbeatEvent struct {
	Rows     int           // rows sent for renewal in the statement (the batch size)
	Duration time.Duration // the statement's latency
	Err      error         // the statement failed (rows keep their deadlines)
}

// FencingRefusal describes a stale token refused by a fencing check.
type FencingRefusal struct {
	Namespace string
	Key       string
	Token     int64 // the token checked
	Current   int64 // the current token; 0 when none is live, and always from VerifyTurn
}

// QueueGrant describes a granted queue ticket.
type QueueGrant struct {
	Namespace string
	Resource  string
	Ticket    int64
	Wait      time.Duration // from drawing the ticket to the grant
	Ahead     int           // live tickets ahead of it when it was drawn (the queue's depth); -1 when unknown
}

// TermChange describes a change of leadership seen by an elector.
type TermChange struct {
	Namespace string
	Group     string
	Term      int64
	Leader    string // the leader's owner identity
	Self      bool   // this node is the leader of Term
	Demoted   bool   // this node stopped leading Term
	// Err, for a demotion, is why the term ended against this node's
	// will: a *LostError matching ErrLeaseLost (renewal deadline passed,
	// taken over, hard TTL; also reported to LeaseLost, Kind LossLeader)
	// or the panic of one of its callbacks (what Run returns). It is nil
	// when the node stepped down itself: Resign, Run's ctx ended, or
	// Client.Close; but a term found expired by its own release (its
	// deadline passed while the release waited) was lost, and Err says so.
	Err error
}

// observer returns the client's observer, nil when none (or c is nil).
func (c *Client) observer() *Observer {
	if c == nil {
		return nil
	}
	return c.cfg.Observer
}

// namespaceOf returns the namespace a call's options select, without
// validating anything (the call itself validates).
func (c *Client) namespaceOf(opts []Option) string {
	o := callOptions{namespace: c.cfg.Namespace}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o.namespace
}

// onceStart calls OnceStart; o is not nil.
func (o *Observer) onceStart(ctx context.Context, c *Client, key string, opts []Option) context.Context {
	if o.OnceStart == nil || ctx == nil { // a nil ctx is refused by the call itself
		return ctx
	}
	return o.OnceStart(ctx, c.namespaceOf(opts), key)
}

// onceEnd calls OnceEnd with the call's named results; deferred by Once.
func (o *Observer) onceEnd(ctx context.Context, c *Client, key string, opts []Option, start time.Time, cached *bool, token *int64, err *error) {
	if o.OnceEnd == nil || ctx == nil {
		return
	}
	e := OnceEvent{Namespace: c.namespaceOf(opts), Key: key, Outcome: OnceOutcomeOf(*cached, *err),
		Token: *token, Duration: time.Since(start), Err: *err}
	if e.Outcome == OutcomeError && ctx.Err() != nil {
		e.Outcome = OutcomeCanceled // the caller gave up
	}
	var ee *ExecutionError
	if e.Token == 0 && errors.As(e.Err, &ee) {
		e.Token = ee.Token // a rejection: the token of the execution that holds the key
	}
	o.OnceEnd(ctx, e)
}

// leaseStart calls LeaseStart; o is not nil.
func (o *Observer) leaseStart(ctx context.Context, c *Client, key string, opts []Option) context.Context {
	if o.LeaseStart == nil {
		return ctx
	}
	return o.LeaseStart(ctx, c.namespaceOf(opts), key)
}

// leaseEnd calls LeaseEnd with Client.Lease's named results.
func (o *Observer) leaseEnd(ctx context.Context, c *Client, key string, opts []Option, start time.Time, l **Lease, err *error) {
	if o.LeaseEnd == nil {
		return
	}
	co := callOptions{namespace: c.cfg.Namespace}
	for _, opt := range opts {
		if opt != nil {
			opt(&co)
		}
	}
	e := LeaseEvent{Namespace: co.namespace, Key: key, Wait: co.wait, Duration: time.Since(start), Err: *err}
	if *l != nil {
		e.Acquired, e.Token = true, (*l).token
	}
	o.LeaseEnd(ctx, e)
}

// adoptStart calls LeaseStart for Client.AdoptHandle; o is not nil.
func (o *Observer) adoptStart(ctx context.Context, h LeaseHandle) context.Context {
	if o.LeaseStart == nil {
		return ctx
	}
	return o.LeaseStart(ctx, h.Namespace, h.Key)
}

// adoptEnd calls LeaseEnd with Client.AdoptHandle's named results.
func (o *Observer) adoptEnd(ctx context.Context, h LeaseHandle, start time.Time, l **Lease, err *error) {
	if o.LeaseEnd == nil {
		return
	}
	e := LeaseEvent{Namespace: h.Namespace, Key: h.Key, Adopted: true, Duration: time.Since(start), Err: *err}
	if *l != nil {
		e.Acquired, e.Token = true, (*l).token
	}
	o.LeaseEnd(ctx, e)
}

// lost reports a lease loss; a release or a detach is not a loss.
func (o *Observer) lost(l *Lease, err error) {
	if o == nil || o.LeaseLost == nil || errors.Is(err, ErrReleased) || errors.Is(err, ErrDetached) {
		return
	}
	o.LeaseLost(LeaseLoss{Namespace: l.ns, Key: l.key, Token: l.token, Execution: l.kind == kindExecution,
		Kind: l.lossKind(), Err: err})
}

// releaseFailed reports a failed release statement.
func (o *Observer) releaseFailed(l *Lease, err error) {
	if o == nil || o.ReleaseFailed == nil {
		return
	}
	o.ReleaseFailed(ReleaseFailure{Namespace: l.ns, Key: l.key, Token: l.token, Kind: l.lossKind(), Err: err})
}

// heartbeat reports one renewal statement.
func (o *Observer) heartbeat(rows int, d time.Duration, err error) {
	if o.Heartbeat == nil {
		return
	}
	o.Heartbeat(HeartbeatEvent{Rows: rows, Duration: d, Err: err})
}

// fencingRefused reports err when it is a stale token, and returns it.
func (c *Client) fencingRefused(ctx context.Context, err error) error {
	o := c.observer()
	if o == nil || o.FencingRefused == nil {
		return err
	}
	var st *StaleTokenError
	if errors.As(err, &st) {
		o.FencingRefused(ctx, FencingRefusal{Namespace: st.Namespace, Key: st.Key, Token: st.Token, Current: st.Current})
	}
	return err
}
