package sentinel

// This file: The sentinel errors (ErrInvalid, ErrNotAcquired, ...), the typed errors that carry them (InvalidError, HeldError, LostError, ExecutionError, StaleTokenError, BusyError, FinalError), and how database errors are mapped (wrapErr, mapDBErr, transient).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sentinel-coordination/sentinel/internal/pgcode"
)

// Sentinel errors, for errors.Is. Each is usually wrapped in a struct error
// that carries the facts (holder, state, token, expiry), for errors.As.
var (
	// ErrInvalid reports bad input: an empty or oversized key, a bad
	// namespace, inconsistent timing. Nothing was written.
	ErrInvalid = errors.New("sentinel: invalid argument")

	// ErrNotAcquired reports that a lease is held by another owner. The
	// error is a *HeldError naming the holder.
	ErrNotAcquired = errors.New("sentinel: lease held by another owner")

	// ErrLeaseLost reports that a lease could not be renewed before its local
	// deadline, was taken over, or reached its hard TTL. The holder must stop
	// the work it guards.
	ErrLeaseLost = errors.New("sentinel: lease lost")

	// ErrHardTTL reports that a lease or execution reached its hard TTL. It
	// always comes together with ErrLeaseLost.
	ErrHardTTL = errors.New("sentinel: hard TTL reached")

	// ErrReleased is the reason given by Lease.Err and Turn.Err after
	// Release, or after Client.Close gave the lease or the turn back.
	ErrReleased = errors.New("sentinel: lease released")

	// ErrDetached is the reason given by Lease.Err after Lease.Detach: this
	// client handed the lease on by its LeaseHandle and stopped renewing
	// it. It is neither a release (the key stays held, by the handle's
	// receiver) nor a loss. Lease.Release on a detached lease frees
	// nothing and returns an error matching it.
	ErrDetached = errors.New("sentinel: lease detached")

	// ErrStaleToken reports that a fencing token is no longer the current
	// token for its key (or its lease expired).
	ErrStaleToken = errors.New("sentinel: stale fencing token")

	// ErrClosed reports a call on a closed Client.
	ErrClosed = errors.New("sentinel: client closed")

	// ErrInProgress reports that another worker holds a live claim on a Once
	// key. The error is an *ExecutionError.
	ErrInProgress = errors.New("sentinel: execution in progress")

	// ErrUncertain reports that a Once key crossed the execution boundary and
	// its outcome is unknown (the executor died, failed, or lost its lease).
	// Sentinel never runs it again by itself; see Client.Reconcile. The
	// one exception is declared by the caller: a key started with WithRerun
	// with attempts left is run again by the next Once call with WithRerun
	// (ExecutionError.Rerun says so). The error is an *ExecutionError.
	ErrUncertain = errors.New("sentinel: execution outcome uncertain; reconcile it")

	// ErrReconciling reports that an operator is reconciling a Once key.
	ErrReconciling = errors.New("sentinel: execution is being reconciled")

	// ErrNotFound reports that a key has no execution or lease.
	ErrNotFound = errors.New("sentinel: not found")

	// ErrWrongState reports that a reconciliation step's precondition does
	// not hold. The error is an *ExecutionError with the current state.
	ErrWrongState = errors.New("sentinel: execution is not in the required state")

	// ErrFinal reports that a Once key completed with a final error: its fn
	// returned Final(err). The error is a *FinalError carrying the stored
	// message; fn is not run again.
	ErrFinal = errors.New("sentinel: execution completed with a final error")

	// ErrNotMigrated reports that the client's schema has no Sentinel
	// tables (or is older than the library): call Client.Migrate, or apply
	// MigrationFS with your migration tool.
	ErrNotMigrated = errors.New("sentinel: schema not migrated: call Client.Migrate (or apply MigrationFS) first")

	// ErrBusy reports that a row could not be changed now because another
	// transaction holds its lock (a completing OnceTx, a competing
	// statement on the same row). Nothing was written; try again.
	ErrBusy = errors.New("sentinel: row locked by another transaction")

	// ErrResult reports that a result could not be encoded, decoded or
	// stored. When encoding fails after fn succeeded the key is still
	// recorded as completed (without a result).
	ErrResult = errors.New("sentinel: result codec failed")

	// ErrResultLost reports that a key completed without its result: fn
	// succeeded, but its value could not be encoded, so it was not
	// stored (Execution.ResultLost). The call that ran fn and every
	// replay of the key return it until an operator stores the value
	// (Client.SetResult). It matches ErrResult too; the Observer counts
	// such a call as OutcomeResultLost.
	ErrResultLost = fmt.Errorf("%w: result lost", ErrResult)
)

// InvalidError describes bad input. It matches ErrInvalid.
type InvalidError struct {
	Field  string // the offending parameter, e.g. "key", "TTL"
	Reason string // what is wrong and what is allowed
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("sentinel: invalid %s: %s", e.Field, e.Reason)
}

// Unwrap returns ErrInvalid.
func (e *InvalidError) Unwrap() error { return ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// checkCtx refuses a nil ctx given to call (its name as a reader writes
// it: "Client.Holder", "Once"), as every exported call that takes a ctx and
// returns an error does, first, before it sends a statement, runs fn or
// changes what the client holds. TestNilContextRefusedByEveryCall calls
// each with a nil ctx, and TestNilContextTableIsComplete finds a new one
// missing from its table.
func checkCtx(call string, ctx context.Context) error {
	if ctx == nil {
		return invalid("ctx", "must not be nil in %s (use context.Background())", call)
	}
	return nil
}

// nilParent is what the Context methods return for a nil parent: a ctx
// already ended, the refusal of the nil parent its cause, so that work
// under it stops at once and context.Cause says why (they return no error;
// context.WithCancel panics on a nil parent).
func nilParent(call string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(checkCtx(call, nil))
	return ctx, func() {}
}

// Holder describes who holds a lease.
type Holder struct {
	Namespace     string
	Key           string
	Owner         string
	Host          string
	PID           int
	Token         int64
	AcquiredAt    time.Time // database clock
	ExpiresAt     time.Time // database clock; renewed by heartbeats
	HardExpiresAt time.Time // database clock; zero when the lease has no hard TTL

	localExpiry time.Time // ExpiresAt translated to the local monotonic clock
}

// HeldError reports a lease that is held. It matches ErrNotAcquired.
// Holder is nil when the holder changed while the call ran. Self is true
// when the holder is the calling client itself (it holds that very grant,
// by token; another client with the same Owner is not itself): leases are
// not re-entrant, so a second Lease on a key the client holds is refused
// like any other.
type HeldError struct {
	Namespace string
	Key       string
	Holder    *Holder
	Self      bool
}

func (e *HeldError) Error() string {
	if e.Holder == nil {
		return fmt.Sprintf("sentinel: lease %q/%q held by another owner", e.Namespace, e.Key)
	}
	who := "by " + e.Holder.Owner
	if e.Self {
		who = "by this client (" + e.Holder.Owner + "; leases are not re-entrant: use the Lease you hold)"
	}
	return fmt.Sprintf("sentinel: lease %q/%q held %s (host %s, pid %d, token %d) until %s",
		e.Namespace, e.Key, who, e.Holder.Host, e.Holder.PID, e.Holder.Token,
		e.Holder.ExpiresAt.UTC().Format(time.RFC3339Nano))
}

// Unwrap returns ErrNotAcquired.
func (e *HeldError) Unwrap() error { return ErrNotAcquired }

// LostError says why a lease or execution lease was lost. It matches
// ErrLeaseLost, and ErrHardTTL when the hard TTL was the reason. When the
// key may have gone to another (the renewal deadline or the hard TTL
// passed, the row was found taken over, released or expired, or
// Client.Close released a Do's lease while its fn ran) the
// message adds what that means for the work done under it:
//
//   - a lease (LossLease): another holder may have taken the key (or
//     "token N holds it now", when the loss's cause names it); writes
//     fenced by the token (VerifyToken, a conditional write) cannot have
//     overlapped the other holder's, unfenced ones may have;
//   - an elector's term (LossLeader): another elector may lead now (or
//     "term N holds it now", when the loss's cause names it); the same,
//     fenced by VerifyTerm;
//   - a Once's execution lease (LossExecution): without a re-run left, no
//     other call runs fn for the key (it is left to an operator); with
//     WithRerun and an attempt left, a Once call with WithRerun may run
//     fn again once the lease expires, and unfenced writes may have
//     overlapped that re-run; writes fenced by VerifyExecutionToken are
//     refused once the lease expires on the database clock. For OnceTx (and OnceSQLTx) the next call may
//     run fn again once the claim expires, fn's transaction committing
//     only with a completion its token's guard accepts.
//
// A member row's or a ticket's loss, and any other end by Client.Close
// or a failed release (the key went to nobody), add nothing.
type LostError struct {
	Namespace string
	Key       string
	Token     int64
	// Reason says why, one of: "renewal deadline passed" (no renewal
	// reached the database in time; Cause is the last renewal error),
	// "taken over, released or expired" (the row no longer carries this
	// token; Cause is a *StaleTokenError), "hard TTL reached" (Cause is
	// ErrHardTTL), "client closed" (Client.Close ended it: a running
	// Once's execution lease, or what Close's release statement or
	// give-back could not free, or the lease of a Do whose fn was running
	// when that release failed; Cause is ErrClosed), "released by
	// Client.Close while fn ran" (the lease of a Do whose fn was running,
	// which Close released: another may have been granted the key before
	// fn stopped; Cause is ErrClosed), or "release failed; ..." (Cause is the
	// release statement's error). A lease Close found already taken over
	// or expired reads "taken over, released or expired".
	Reason string
	Cause  error
	// Kind says what was held: a lease (LossLease, or "" in a LostError
	// made by hand), a Once's execution lease, an elector's term (Key is
	// the group, Token the term), its member row (Key is the group), or a
	// queue ticket (Key is the resource, Token the ticket). The message
	// names it so: "leadership of group ... (term N) lost".
	Kind LossKind

	exec execLoss // what may run fn again, for an execution lease
}

func (e *LostError) Error() string {
	var what string
	switch e.Kind {
	case LossLeader:
		what = fmt.Sprintf("leadership of group %q/%q (term %d)", e.Namespace, e.Key, e.Token)
	case LossMember:
		what = fmt.Sprintf("membership of group %q/%q (member token %d)", e.Namespace, e.Key, e.Token)
	case LossTicket:
		what = fmt.Sprintf("turn on %q/%q (ticket %d)", e.Namespace, e.Key, e.Token)
	default:
		what = fmt.Sprintf("lease %q/%q (token %d)", e.Namespace, e.Key, e.Token)
	}
	s := "sentinel: " + what + " lost: " + e.Reason
	var stale *StaleTokenError
	holds := "" // who holds the key now, when known
	switch {
	case e.Cause == nil || errors.Is(e.Cause, ErrHardTTL):
	case errors.As(e.Cause, &stale) && stale.Namespace == e.Namespace && stale.Key == e.Key && stale.Token == e.Token:
		// This lease's own token found stale: the reason says it already
		// (the stale token's text would name the lease and say "released,
		// expired or taken over" again); only who holds it now is news.
		if stale.Current != 0 {
			if e.Kind == LossLeader {
				holds = fmt.Sprintf("term %d holds it now", stale.Current)
			} else {
				holds = fmt.Sprintf("token %d holds it now", stale.Current)
			}
		}
	default:
		s += ": " + e.Cause.Error()
	}
	if m := e.means(holds); m != "" {
		s += " (" + m + ")"
	} else if holds != "" {
		s += " (" + holds + ")"
	}
	return s
}

// means says what the loss means for the work done under what was held,
// when the key may have gone to another since (see LostError); "" when
// it adds nothing. holds, when not "", says who holds the key now, and
// is then said as part of it.
func (e *LostError) means(holds string) string {
	switch e.Reason {
	case reasonDeadline, reasonHardTTL, reasonTaken, reasonTakenBeforeRelease, reasonTakenBeforeCommit, reasonClosedWhileRunning:
	default:
		return ""
	}
	who := func(other string) string {
		if holds != "" {
			return holds
		}
		return other
	}
	switch e.Kind {
	case "", LossLease:
		return who("another holder may have taken the key") + fmt.Sprintf(": writes fenced by token %d (VerifyToken, a conditional write) "+
			"cannot have overlapped another holder's, unfenced ones may have", e.Token)
	case LossLeader:
		return who("another elector may lead now") + fmt.Sprintf(": writes fenced by term %d (VerifyTerm) "+
			"cannot have overlapped another leader's, unfenced ones may have", e.Token)
	case LossExecution:
		fenced := fmt.Sprintf("writes fenced by token %d (VerifyExecutionToken) are refused once the lease expires on the database clock", e.Token)
		var m string
		switch e.exec {
		case execOnce:
			m = "no other call runs fn for the key (it is left to an operator): " + fenced
		case execRerun:
			m = "a Once call with WithRerun may run fn again once the lease expires: " + fenced + ", unfenced ones may have overlapped that re-run"
		case execTx:
			m = "the next call may run fn again once the claim expires: fn's transaction commits only with a completion " +
				"its token's guard accepts, so at most one attempt's writes land; work outside it may have overlapped"
		default: // made by hand: what runs fn again is not known
			m = fenced
		}
		if holds != "" {
			m = holds + "; " + m
		}
		return m
	}
	return ""
}

// A LostError's Reasons whose key may have gone to another since.
const (
	// reasonDeadline: no renewal reached the database before the local
	// deadline.
	reasonDeadline = "renewal deadline passed"
	// reasonHardTTL: the hard TTL was reached (Cause ErrHardTTL).
	reasonHardTTL = "hard TTL reached"
	// reasonTaken: a renewal, or Client.Close, found the row no longer
	// carrying the token.
	reasonTaken = "taken over, released or expired"
	// reasonTakenBeforeRelease: Release (or Resign) found it so.
	reasonTakenBeforeRelease = "expired or taken over before release"
	// reasonTakenBeforeCommit: an OnceTx's completion found its claim so.
	reasonTakenBeforeCommit = "claim expired or taken over before commit"
	// reasonClosedWhileRunning: Client.Close released the lease of a Do
	// whose fn was running (Cause ErrClosed): it cancelled fn's ctx, then
	// freed the key, which another may have been granted before fn stopped.
	reasonClosedWhileRunning = "released by Client.Close while fn ran"
)

// reasonClosed: Client.Close ended it without freeing the key to anyone
// (a running Once's execution lease, or what its release statement or
// give-back could not free; Cause ErrClosed).
const reasonClosed = "client closed"

// execLoss says, for an execution lease, what may run fn again after its
// loss: set by the call that claimed it (Client.claimed), through the
// lease's end; zero in a LostError made by hand.
type execLoss uint8

const (
	execUnknown execLoss = iota
	execOnce             // Once, no re-run left: the key is left uncertain
	execRerun            // Once with WithRerun and an attempt left
	execTx               // OnceTx, OnceSQLTx: the claim is taken over once expired
)

// Unwrap returns ErrLeaseLost and the cause.
func (e *LostError) Unwrap() []error {
	if e.Cause == nil {
		return []error{ErrLeaseLost}
	}
	return []error{ErrLeaseLost, e.Cause}
}

// ExecutionError carries the state of a Once key when a call could not run
// or complete it. It matches one of ErrInProgress, ErrUncertain,
// ErrReconciling, ErrWrongState (Kind), and Cause when set.
type ExecutionError struct {
	Kind           error // ErrInProgress, ErrUncertain, ErrReconciling or ErrWrongState
	Namespace      string
	Key            string
	State          State
	Owner          string
	Token          int64
	LeaseExpiresAt time.Time // database clock; zero when none
	// Since is when the key entered the state reported, on the database
	// clock, as the operator's tools show it (Execution.Since): for a key
	// claimed or executing whose lease has ended (uncertain, rerun
	// pending, handed back by a caller that gave up) when the lease ended,
	// not when the attempt started; else when the key entered State.
	//
	// It can be zero: it is filled only when the call read the key's row,
	// and the call whose own attempt stopped without an outcome reads it
	// only on the way to its error (its completion refused; a lost lease
	// under WithRerun; a failed hand-back of a Retryable error), never by
	// an extra statement. In every other case of a call's own attempt
	// Since is zero, as when the read on the way failed: among them an
	// attempt whose fn failed or panicked (its lease still held, or
	// without WithRerun), a last WithRerun attempt that returned a
	// Retryable error or was claimed as the caller's ctx ended or the
	// client closed, and an OnceTx or OnceSQLTx whose fn ended its
	// transaction itself or whose commit's outcome could not be read back.
	// LeaseExpiresAt is zero in the same cases. Client.Inspect (or
	// `sentinel inspect`, which the error names) shows the key's Since.
	Since time.Time
	Cause error // why, when known (e.g. the lease was lost)
	// Rerun, with Kind ErrUncertain: the key was started with WithRerun
	// and attempts remain, so the next Once call for it with WithRerun
	// runs fn again (Execution.Rerunnable). No operator is needed unless
	// that attempt stops without an outcome too, or no caller with
	// WithRerun comes; the operator's tools (sentinel list --uncertain,
	// ExecutionCounts, the console) leave such a key out of the uncertain
	// ones, and the Observer counts the call as OutcomeRerunPending.
	// A caller with WithRerun whose own bound the key's attempts reached
	// gets it too (the key waits for a caller with a higher bound); its
	// error says that no re-run is left for it and that no operator is
	// needed unless no caller with a higher bound comes, and OnceRetry does
	// not retry it.
	Rerun bool
	// Settles, with Kind ErrUncertain: an OnceTx or OnceSQLTx whose commit
	// was not confirmed (its connection cut, say, by a failover) and whose
	// key could not be read back to tell whether it landed. The outcome is
	// unknown to this call only: fn's writes and the completion commit or
	// vanish together, so the key is completed if the commit landed (a
	// later call gets the result), and otherwise stays this attempt's
	// claim until its lease expires, then is free (the next call runs fn
	// again, nothing of the first attempt having been committed). No
	// operator is needed: the operator's tools never show such a key as
	// uncertain, the Observer counts the call as OutcomeCommitUnknown, and
	// the log is a Warn that does not ask to reconcile it. Call again after
	// the key's TTL to learn which.
	Settles bool
	// rerunHere, with Rerun: the call that got the error may itself run
	// the key again, its WithRerun bound being above the key's attempt
	// (Rerun says only that some caller with WithRerun may). OnceRetry
	// retries such an error, and no other ErrUncertain.
	rerunHere bool
	// look is the `sentinel inspect` command line that shows the key
	// (Client.inspectCommand), for an uncertain key: the message ends with
	// it, so that whoever reads it in a log can run it as printed.
	look string
}

func (e *ExecutionError) Error() string {
	kind := e.Kind.Error()
	switch {
	case e.Settles && errors.Is(e.Kind, ErrUncertain):
		// Not "reconcile it": the key settles without anyone.
		kind = "sentinel: execution outcome unknown to this call, settled without an operator (completed if the commit landed, else free for the next call once the lease expires)"
	case e.Rerun && e.rerunHere && errors.Is(e.Kind, ErrUncertain):
		// Not "reconcile it": the application asked for a re-run, and a
		// person who reconciled the key would stop it.
		kind = "sentinel: execution outcome uncertain, rerun pending: to be run again by the next Once call with WithRerun (no operator is needed unless none comes: sentinel status pages on a key left so)"
	case e.Rerun && errors.Is(e.Kind, ErrUncertain):
		// Not by this caller (its WithRerun bound is reached, or it has
		// none): by one with a higher bound. An operator only if none
		// comes; the cause says which bound.
		kind = "sentinel: execution outcome uncertain, to be run again by a Once call whose WithRerun has a re-run left for it (no operator is needed unless none comes)"
	}
	s := fmt.Sprintf("%s: key %q/%q is %s (owner %s, token %d", kind, e.Namespace, e.Key, e.State, e.Owner, e.Token)
	if !e.LeaseExpiresAt.IsZero() {
		s += ", lease until " + e.LeaseExpiresAt.UTC().Format(time.RFC3339Nano)
	}
	s += ")"
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	if e.look != "" {
		s += "; to look: " + e.look
	}
	return s
}

// Unwrap returns Kind and Cause.
func (e *ExecutionError) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Cause}
}

// StaleTokenError reports a fencing token that is no longer current. It
// matches ErrStaleToken.
type StaleTokenError struct {
	Namespace string
	Key       string
	Token     int64 // the token that was checked
	// Current is the current token, 0 when the key is free or expired, as
	// VerifyToken, VerifyExecutionToken, VerifyTerm and AdoptHandle read it. The other
	// refusals (VerifyTurn, which reads only the ticket it checks,
	// RenewHandle, ReleaseHandle, the cause of a lost lease) do not read
	// it: their Current is 0 whatever holds the key.
	Current int64
}

func (e *StaleTokenError) Error() string {
	if e.Current == 0 {
		return fmt.Sprintf("sentinel: stale fencing token %d for %q/%q: it is no longer the current grant (released, expired or taken over); write nothing under it (roll back)",
			e.Token, e.Namespace, e.Key)
	}
	return fmt.Sprintf("sentinel: stale fencing token %d for %q/%q: token %d holds the key now; write nothing under the stale one (roll back)", e.Token, e.Namespace, e.Key, e.Current)
}

// Unwrap returns ErrStaleToken.
func (e *StaleTokenError) Unwrap() error { return ErrStaleToken }

// transient reports whether err is a connection-level failure that a later
// attempt may not meet: the server unreachable, restarting or shutting
// down, a dropped connection. It is the one place Sentinel maps pgx/pgconn
// errors; statement errors (a missing schema, a constraint) are never
// transient.
func transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case strings.HasPrefix(pgErr.Code, "08"): // connection exception
			return true
		case pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03": // shutdown, crash, cannot connect now
			return true
		}
		return false
	}
	var netErr net.Error
	var connErr *pgconn.ConnectError
	return pgconn.SafeToRetry(err) || errors.As(err, &netErr) || errors.As(err, &connErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}

// BusyError reports a renewal skipped because another transaction held the
// row's lock (for example a completing OnceTx, or a forced takeover under
// way; fencing checks do not block renewals). It matches ErrBusy.
type BusyError struct {
	Namespace string
	Key       string
	Token     int64
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("sentinel: lease %q/%q (token %d) not renewed: its row is locked by another transaction "+
		"(a completing OnceTx, or a competing statement on the same row); try again", e.Namespace, e.Key, e.Token)
}

// Unwrap returns ErrBusy.
func (e *BusyError) Unwrap() error { return ErrBusy }

// wrapErr wraps a database error of operation what, mapping a missing
// schema or table to ErrNotMigrated.
func (c *Client) wrapErr(what string, err error) error {
	return fmt.Errorf("sentinel: %s: %w", what, mapDBErr(c.cfg.Schema, err))
}

// mapDBErr turns errors that mean "this schema was never migrated, or not
// to this version" into an error matching ErrNotMigrated (and still the
// original, for errors.As): a missing schema or table, or a missing
// function or column of a later migration (the statements are the
// library's own, so an undefined function or column in them is one a
// migration creates).
func mapDBErr(schema string, err error) error {
	if pgcode.NotMigrated(err) {
		return &notMigratedError{schema: schema, err: err}
	}
	return err
}

type notMigratedError struct {
	schema string
	err    error
}

func (e *notMigratedError) Error() string {
	return fmt.Sprintf("schema %q is not migrated (%v): call Client.Migrate, or apply sentinel.MigrationFS with your migration tool", e.schema, e.err)
}

func (e *notMigratedError) Unwrap() []error { return []error{ErrNotMigrated, e.err} }

// FinalError is the outcome of a Once whose fn returned Final(err). It
// matches ErrFinal. Error returns the stored message as fn gave it. For the
// call that ran fn, Err is fn's error (so errors.Is/As reach it); a replay
// has only the message.
type FinalError struct {
	Namespace string
	Key       string
	Token     int64  // the execution that produced the outcome
	Message   string // err.Error() of fn's error, as stored (see Final)
	Err       error  // fn's error; nil on a replay
}

func (e *FinalError) Error() string { return e.Message }

// Unwrap returns ErrFinal and, for the call that ran fn, fn's error.
func (e *FinalError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrFinal}
	}
	return []error{ErrFinal, e.Err}
}
