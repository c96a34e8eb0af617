package sentinel

// This file: the fair queue lock's API (Turn, Client.Turn, Release and leave, VerifyTurn), its options and errors, and why it is fair.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// The fair queue lock (turn, on PostgreSQL).
//
// Every Turn draws a ticket from the fencing_token sequence and waits until
// its ticket is the lowest live ticket of its resource. The holder is
// derived, never stored: it is the lowest live ticket. A ticket's grant
// (served_at, `granted`) is written by one of three statements, each of
// which checks, on the database clock, that no lower ticket is alive and
// skips (deletes) the lower ones that are dead in the same statement: its
// own draw when nobody is ahead (queue_draw), the leave of the ticket
// ahead (the handover in sqlTicketLeave), or its own serving check
// (sqlServe).
//
// Why no later ticket is ever served before an earlier live one:
//
//   - Drawing locks the resource's row in queues (FOR UPDATE) and mints the
//     ticket while holding that lock, so on one resource tickets commit in
//     the order of their numbers: once a ticket is visible to a serving
//     check, no lower ticket can appear later.
//   - The serving check deletes a lower ticket only if it is expired by the
//     database clock when the DELETE holds its row lock (READ COMMITTED
//     re-checks the condition on the newest row version), and serves only if
//     every lower ticket of its snapshot was deleted by that very DELETE.
//     A lower ticket renewed concurrently (its renewal locks the row) is
//     therefore never counted as dead, and a renewal never revives a ticket
//     whose expiry passed: it is guarded by expires_at > clock_timestamp()
//     under the same row lock.
//   - A draw that finds no live ticket below its own serves it in the same
//     transaction (queue_draw, migration 020), under the queue's lock, so
//     that no lower ticket can appear meanwhile: it deletes the expired
//     lower tickets whose rows it can lock (FOR UPDATE re-checks the
//     expiry on the newest version; a row locked elsewhere is skipped,
//     never waited for under the queue's lock), then serves only if no
//     lower ticket is left at all, read with a snapshot taken after those
//     deletions. A live or locked one left means the serving check above
//     decides. Such a draw commits durably, as every grant does.
//   - A leave that hands the turn over grants the next live ticket the
//     same way, under the queue's lock too (Turn.leave): it deletes the
//     expired tickets below that one whose rows it can lock, and grants
//     it only if no other ticket below it is left in its snapshot and its
//     own row, re-checked live and unserved, is not locked elsewhere.
//     Otherwise it only wakes it, and its serving check decides.
//   - A holder's local deadline (Done) is the send time of its last
//     successful renewal + TTL - safety margin: before the database clock can
//     see its ticket expired, hence before anyone behind can be served.

// kindTicket is the heartbeat kind of a ticket row (see renewKinds in
// queries.go). It only needs to differ from the other kinds; the
// integrator may renumber it.
const kindTicket leaseKind = 12

// MaxLabelLen is the longest label a Turn accepts, in bytes.
const MaxLabelLen = 256

// ErrQueueBusy reports that ResetQueue found a live holder or waiter on the
// resource; nothing was removed. The error is a *QueueBusyError.
var ErrQueueBusy = errors.New("sentinel: queue busy")

// QueueBusyError reports a queue that ResetQueue refused to reset. It
// matches ErrQueueBusy.
type QueueBusyError struct {
	Namespace string
	Resource  string
	Live      int // live tickets (holder and waiters) at the time of the call
}

// Error says how many live tickets the queue had and what to do: wait for
// them to finish.
func (e *QueueBusyError) Error() string {
	return fmt.Sprintf("sentinel: queue %q/%q busy: %d live ticket(s); nothing removed. Reset only clears dead tickets: "+
		"wait for the holder and waiters to finish (see Client.Queue)", e.Namespace, e.Resource, e.Live)
}

// Unwrap returns ErrQueueBusy.
func (e *QueueBusyError) Unwrap() error { return ErrQueueBusy }

// WithLabel sets the label of a Turn's ticket: it shows in Queue and Queues
// and in progression events (`printer: 5 assigned to "nightly report"`).
// At most MaxLabelLen bytes of UTF-8 without NUL. Default "".
func WithLabel(label string) Option {
	return func(o *callOptions) { o.label, o.labelSet = label, true }
}

// WithAfterEvent makes FollowQueues deliver the queue events whose ID
// (QueueEvent.ID) is greater than id, including those recorded before it
// started, instead of only the events recorded from now on: pass the ID of
// the last event a previous follower delivered to resume without a gap, or
// 0 to replay the whole recorded history first. It must not be negative.
func WithAfterEvent(id int64) Option {
	return func(o *callOptions) { o.after, o.afterSet = id, true }
}

// Turn is a served ticket: the caller's turn on a resource. It is renewed
// in the background until Release, Close, or a loss (see Done), and is safe
// for concurrent use.
type Turn struct {
	c     *Client
	l     *Lease // the ticket's presence: kind kindTicket, key = resource, token = ticket
	label string
	drawn time.Time // local time the draw was sent, for the queue-wait metric
	ahead int       // live tickets ahead when drawn, for the observer; -1 when not counted

	relMu relLock // serializes Release and Close's give-back (see Lease.relMu)
	// relFailed is the error a failed leave ended the turn with (under
	// relMu): an end, not a loss (see Lease.relFailed).
	relFailed error

	// taken: Turn returned the turn to its caller. A ticket given up
	// before that, served or not (its grant came as ctx ended), is
	// recorded `cancelled`, not `completed` (see sqlTicketLeave).
	taken atomic.Bool

	leftMu sync.Mutex
	left   bool // the ticket row was given up (Release or Close)
	// gaveBack: the leave that gave the row up found it live (its ticket
	// had not expired), as a Release that succeeds does.
	gaveBack bool
}

// Ticket returns the turn's ticket number. It is a fencing token from the
// same sequence as lease tokens: pass it to downstream writes and check it
// with VerifyTurn.
func (t *Turn) Ticket() int64 { return t.l.token }

// Label returns the ticket's label.
func (t *Turn) Label() string { return t.label }

// Resource returns the resource the turn is on.
func (t *Turn) Resource() string { return t.l.key }

// Namespace returns the turn's namespace.
func (t *Turn) Namespace() string { return t.l.ns }

// Done returns a channel that is closed when the turn ends: released,
// client closed, or lost. A lost turn's Done closes at its local deadline
// (send time of its last successful renewal + TTL - safety margin), before
// the database could serve anyone behind it.
func (t *Turn) Done() <-chan struct{} { return t.l.done }

// Err returns nil while the turn is held; afterwards ErrReleased, or an
// error matching ErrLeaseLost. Client.Close ends a held turn as released
// before it gives the ticket back, as it does a lease: one whose give-back
// failed, even retried, reads as lost, matching ErrClosed, once Close returns (and as
// released again once a Release gives the ticket up, see Release); one
// whose ticket Close found expired reads as lost.
//
// A turn whose local deadline (Deadline) has passed is lost even when its
// deadline timer has not fired yet (the process was frozen, by SIGSTOP or
// a paused VM, and has just resumed): Err then ends it (Done closes) and
// reports the loss, so a holder that checks Err before each step of its
// work never takes one past the deadline.
func (t *Turn) Err() error { return t.held() }

// held returns t's error, ending the turn as lost first when its local
// deadline has passed but its deadline timer has not fired yet: after a
// freeze, the timer and the holder's own goroutines resume in no
// particular order (Lease.Err).
func (t *Turn) held() error { return t.l.Err() }

// Deadline returns the local time (monotonic clock) until which the holder
// may trust its turn; it moves forward with every renewal.
func (t *Turn) Deadline() time.Time { return t.l.Deadline() }

// Context returns a copy of parent that is cancelled, with the reason as
// its cause, when the turn ends.
// A nil parent is refused: the ctx returned is already cancelled, its
// cause an error matching ErrInvalid.
func (t *Turn) Context(parent context.Context) (context.Context, context.CancelFunc) {
	if parent == nil {
		return nilParent("Turn.Context")
	}
	return t.l.Context(parent)
}

// Release ends the turn in one round trip (a transaction guarded by owner
// and ticket, see leave), records `completed`, and hands the turn over:
// it grants the next live ticket and wakes that one only. It is
// idempotent and works from a defer after the work's context was cancelled
// (a done ctx is replaced by one bounded by Config.ReleaseTimeout).
//
// It returns nil when it released the turn (or Close had given it back,
// or a failed Close's leave left the ticket live and Release gave it up),
// and an error matching ErrLeaseLost when the turn had been lost (its
// ticket expired: someone behind may have been served), whether or not the
// release statement then succeeded.
//
// When the statement fails (the database unreachable, or ctx ended while
// it was in flight) Release returns its error and the turn ends all the
// same: it is no longer renewed, Done closes and Err matches ErrLeaseLost.
// A statement cut off by ctx may still commit on the server afterwards
// (pgx drops the connection; the server runs on until it next writes to
// it). The ticket is gone at once if it did, else when it expires, so the
// next ticket is served within the ticket's TTL at the latest. Release may
// then be called again: it sends the leave again (waiting for the row
// lock of one still running on the server) and returns nil if it gives
// the ticket up while the ticket is still live, or finds that the failed
// statement committed after all and gave the live ticket up (its record in
// the queue's history, see Client.QueueHistory); if the ticket expired
// instead (someone behind may have been served), or that record was
// pruned since, it returns the first failure again.
// A nil ctx is refused (ErrInvalid) and the turn left as it was.
func (t *Turn) Release(ctx context.Context) error {
	if err := checkCtx("Turn.Release", ctx); err != nil {
		return err
	}
	t.relMu.Lock()
	defer t.relMu.Unlock()
	prior := t.l.ended()
	if errors.Is(prior, ErrReleased) {
		return nil // released before: idempotent, like Lease.Release
	}
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), t.c.cfg.ReleaseTimeout)
		defer cancel()
	}
	if left, gaveBack := t.hasLeft(); left {
		byHolder := errors.Is(prior, ErrClosed) || prior == t.relFailed
		if gaveBack && byHolder {
			// Close gave the live ticket back after ending the turn (a
			// release, as Close's release of a Lease is), or a Release
			// did after a failed attempt.
			t.released(prior)
			return nil
		}
		if byHolder {
			// A leave found the row gone after a failed one; reading
			// whether that one had committed failed (see givenUp).
			return t.givenUp(ctx, prior)
		}
		return prior
	}
	// ours: the turn is still held, or it ended by its holder's doing
	// (a failed Release, Close), not by a loss: a leave that finds the
	// ticket live is then a release.
	ours := prior == nil || prior == t.relFailed || errors.Is(prior, ErrClosed)
	t.l.beginRelease() // an end meanwhile is reported once the outcome is known
	defer t.l.endRelease()
	t.c.hb.remove(t.l)
	res, err := t.leave(ctx)
	if err != nil {
		failed := &LostError{Namespace: t.l.ns, Key: t.l.key, Token: t.l.token, Kind: t.l.lossKind(),
			Reason: fmt.Sprintf("turn release failed; the ticket is no longer renewed and is gone within its TTL (%s) unless the release committed", t.l.ttl),
			Cause:  err}
		if t.l.endAs(failed, true); prior == nil && t.l.ended() == failed {
			t.relFailed = failed
		}
		if !ours {
			return errors.Join(prior, err) // lost before: report the loss
		}
		// What to do next, said only here: a retry that finds the row
		// gone returns relFailed, and calling again would not help.
		return fmt.Errorf("%w (the turn has ended and its ticket is no longer renewed: call Release again to retry; "+
			"otherwise the ticket is gone when it expires, within its TTL (%s), unless this release committed)", err, t.l.ttl)
	}
	if res.found && res.alive {
		if ours {
			// Left while its ticket was live: nobody behind was served
			// meanwhile, even after a failed attempt (Release's or
			// Close's).
			t.released(prior)
			return nil
		}
		return prior
	}
	if !res.found && prior != nil && ours {
		return t.givenUp(ctx, prior)
	}
	if prior == nil {
		prior = &LostError{Namespace: t.l.ns, Key: t.l.key, Token: t.l.token, Kind: t.l.lossKind(), Reason: "turn's ticket expired before release",
			Cause: &StaleTokenError{Namespace: t.l.ns, Key: t.l.key, Token: t.l.token}}
		t.l.end(prior)
	}
	return prior
}

// givenUp is Release's answer when a leave found the ticket row gone after
// a failed leave of the holder's own (prior: Release's, or Close's give-back):
// that leave may have committed, its reply lost. Its own record in the
// queue's history (sqlTicketGivenUp) says whether it gave the ticket up
// while it was live, as Lease.Release reads the row a failed release
// freed: then the turn was released, and givenUp returns nil; otherwise
// (the ticket expired: someone behind may have been served, or the record
// was pruned) prior. Called under relMu.
func (t *Turn) givenUp(ctx context.Context, prior error) error {
	var givenUp bool
	if err := t.c.pool.QueryRow(ctx, t.c.qsql().givenUp, t.l.ns, t.l.key, t.l.token, t.c.cfg.Owner).Scan(&givenUp); err != nil {
		return errors.Join(prior, t.c.wrapErr(fmt.Sprintf("read queue history %q/%q (ticket %d)", t.l.ns, t.l.key, t.l.token), err))
	}
	if !givenUp {
		return prior
	}
	t.leftMu.Lock()
	t.gaveBack = true // what the failed leave did: later calls need not read it again
	t.leftMu.Unlock()
	t.released(prior)
	return nil
}

// released ends the turn as released by a Release that gave its live
// ticket up, or found it given up live, and began when the turn's error
// was prior (see Lease.endReleased): a failed Release's error, or an end
// by its deadline while the leave ran, is replaced. Close's end (prior
// matching ErrClosed) is left as it is.
func (t *Turn) released(prior error) {
	if prior == nil || prior == t.relFailed {
		t.l.endReleased(prior)
	}
}

// endByClose is how Client.Close ends the turn, as it ends a held lease:
// released first (Done closes before the ticket is given up, so before
// anyone behind can be served), then the ticket given back, by Close's
// deadline (closeGiveBack). A leave that fails after a transient error (a
// dropped connection) is retried within that deadline and the ticket's
// local expiry, not when the database cannot be reached at all (Close
// does not wait out an outage). A retry that finds the ticket gone after
// a failed leave reads the ticket's own record in the queue's history
// (sqlTicketGivenUp, as Release does): the failed leave committed, its
// reply lost, and gave the live ticket up, a release; otherwise the
// ticket expired (someone behind may have been served, or the record was
// pruned), a loss. A leave that finally fails, or a read of that record
// that fails, leaves it a failed release (relFailed, reported to
// Observer.ReleaseFailed, matching ErrClosed): a Release that then gives
// the still-live ticket up, or finds it given up so, returns nil. One
// that finds the ticket gone, or expired, makes it a loss: someone
// behind may have been served. A turn that ended before (Release, its
// deadline) is left as it is. A Release under way is waited for until
// Close's deadline; one still running then is left to end the turn (it
// is that Release's to give back and to report), as Close's wait for a
// Lease.Release is (Client.Close).
func (t *Turn) endByClose() {
	ctx, cancel := t.c.closeGiveBack()
	defer cancel()
	if !t.relMu.lockCtx(ctx) {
		return // a Release under way past Close's deadline: the turn is its own
	}
	defer t.relMu.Unlock()
	l := t.l
	if !l.endByClose() {
		return
	}
	var (
		res       leaveResult
		triedOnce bool // a leave failed: it may have committed
	)
	err := t.c.retryWithin(ctx, l.localExpiry(), "close: giving a ticket back", func(ctx context.Context) error {
		r, err := t.leave(ctx)
		if err != nil {
			triedOnce = true
			return err
		}
		res = r
		return nil
	}, "namespace", l.ns, "resource", l.key, "ticket", l.token)
	what := "giving a ticket back failed; it is gone when it expires, within its TTL"
	if err == nil && !res.found && triedOnce {
		var givenUp bool
		if err = t.c.pool.QueryRow(ctx, t.c.qsql().givenUp, l.ns, l.key, l.token, t.c.cfg.Owner).Scan(&givenUp); err != nil {
			what = "the ticket is gone, but reading whether a failed give-back had given it up failed"
			err = t.c.wrapErr(fmt.Sprintf("read queue history %q/%q (ticket %d)", l.ns, l.key, l.token), err)
		} else if givenUp {
			// A failed leave gave the live ticket up, its reply lost.
			res = leaveResult{found: true, alive: true}
			t.leftMu.Lock()
			t.gaveBack = true
			t.leftMu.Unlock()
		}
	}
	switch {
	case err != nil:
		t.c.cfg.Logger.Warn("sentinel: close: "+what, "namespace", l.ns, "resource", l.key, "ticket", l.token, "err", err)
		failed := &LostError{Namespace: l.ns, Key: l.key, Token: l.token, Kind: l.lossKind(), Reason: reasonClosed, Cause: ErrClosed}
		if l.notReleased(failed, true); l.ended() == failed {
			t.relFailed = failed
		}
	case !res.found || !res.alive:
		l.notReleased(&LostError{Namespace: l.ns, Key: l.key, Token: l.token, Kind: l.lossKind(), Reason: reasonTaken,
			Cause: &StaleTokenError{Namespace: l.ns, Key: l.key, Token: l.token}}, false)
	}
}

// hasLeft reports whether the ticket row was given up, and whether it was
// live then.
func (t *Turn) hasLeft() (left, gaveBack bool) {
	t.leftMu.Lock()
	defer t.leftMu.Unlock()
	return t.left, t.gaveBack
}

// leaveResult is what a leave's statement found of its own ticket. (The
// statement also returns whether the ticket was served, the next ticket
// and whether it granted it; nothing here needs them: the wake-up is
// sqlTicketLeaveWake's, in the same round trip.)
type leaveResult struct {
	found bool // the row was there, and this leave deleted it
	alive bool // ... while its ticket was live: nobody behind was served meanwhile
}

// leave deletes the ticket row. Once a leave succeeded, later calls send
// nothing and return what it found, as far as Release reads it (found and
// alive when it gave a live ticket up); after one that failed, the next
// call tries again.
//
// Whom to wake is decided under the queue row's lock, in one transaction
// of three statements sent as one batch (one round trip; READ COMMITTED
// takes a new snapshot for each statement):
//
//  1. lock our own ticket row (waiting, if need be, for a VerifyTurn
//     transaction, before any other lock is held);
//  2. lock the queue row (FOR NO KEY UPDATE), which serializes leaves of
//     the resource with one another and with draws;
//  3. delete the ticket and, if none is live below ours, grant the next
//     live ticket (sqlTicketLeave), with a snapshot taken after 2.
//
// The transaction is explicit (BEGIN ... COMMIT) so that a fourth
// statement in the same round trip, sqlTicketLeaveWake, wakes the next
// ticket once it committed, in a transaction of its own (wake.go).
//
// A single statement cannot do it: its one snapshot is taken before it
// waits for any lock. Two tickets leaving at once (the holder releases
// while the waiter behind it gives up) then each saw the other's row
// alive: the holder woke the departing waiter, the waiter woke nobody (a
// live ticket was below it), and the live ticket behind both slept until
// the departed ticket's expiry. Under the queue lock, the leave that
// decides second sees the first one's DELETE committed: if the holder
// decides second it sees the waiter gone and wakes the ticket behind; if
// the waiter decides second it sees the holder gone, no live ticket below
// it, and wakes the ticket behind. By induction, with any number of
// concurrent leaves the last to decide sees all the others' rows gone, so
// the next live ticket is always woken, and only it (no herd). A ticket
// drawn meanwhile is either seen by a later decision (its draw committed
// under the same lock first) or sees the leaves committed: its draw reads
// the ticket ahead once it holds the lock (queue_draw), and with none
// live ahead it is served by the draw or makes its serving check. Nothing
// else takes this lock but the look for a cut-off draw's tickets
// (leaveDrawn, before it leaves them so) and Prune, which locks only queue
// rows without tickets: renewals and serving checks never touch the queue
// row.
func (t *Turn) leave(ctx context.Context) (leaveResult, error) {
	t.leftMu.Lock()
	defer t.leftMu.Unlock()
	if t.left {
		// What the leave that gave the row up found: a Release that read
		// the turn not left yet and lost the race to Close's give-back
		// learns the ticket was given back live, not that it was gone.
		return leaveResult{found: t.gaveBack, alive: t.gaveBack}, nil
	}
	var r leaveResult
	qs := t.c.qsql()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(qs.leaveLockTicket, t.l.ns, t.l.key, t.l.token, t.c.cfg.Owner, t.l.acquiredAt)
	b.Queue(qs.leaveLockQueue, t.l.ns, t.l.key)
	b.Queue(qs.leave, t.l.ns, t.l.key, t.l.token, t.c.cfg.Owner, t.c.sql.channel, t.l.acquiredAt, t.taken.Load())
	b.Queue("COMMIT")
	wake := !t.c.dropWakes.Load()
	if wake {
		b.Queue(qs.leaveWake, t.c.sql.channel, t.l.ns, t.l.key, t.l.token)
	}
	br := t.c.pool.SendBatch(ctx, b)
	_, err := br.Exec()
	for range 2 {
		if err == nil {
			_, err = br.Exec()
		}
	}
	if err == nil {
		err = br.QueryRow().Scan(nil, &r.alive, nil, nil) // served, alive, next, granted
		r.found = err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil // the ticket was gone already
		}
	}
	if err == nil {
		_, err = br.Exec() // COMMIT
	}
	if err == nil && wake {
		if _, werr := br.Exec(); werr != nil {
			t.c.cfg.Logger.Debug("sentinel: waking the next ticket failed; it re-checks on its own", "resource", t.l.key, "err", werr)
		}
	}
	_ = br.Close() // after the COMMIT, only the wake-up can fail: logged above
	if err != nil {
		// Whatever failed, the row may still be there: a statement cut
		// off by ctx (pgx closes the connection; the server may still
		// run it, and commit it, or not) or a connection lost before the
		// reply. Not marked left, so a later Release tries again: its
		// leave waits for the row lock of one still running, and finds
		// the row gone if that one committed.
		r.found = false
		return r, t.c.wrapErr(fmt.Sprintf("leave queue %q/%q (ticket %d)", t.l.ns, t.l.key, t.l.token), err)
	}
	t.left, t.gaveBack = true, r.found && r.alive
	return r, nil
}

// errTicketLost says a waiting ticket died (not renewed in time); Turn
// draws a new one.
var errTicketLost = errors.New("sentinel: waiting ticket lost")

// Turn draws a ticket for resource and blocks until it is served: until
// every ticket drawn before it has been released, cancelled, or has died
// (expired by the database clock, skipped at once). First come, first
// served: no later ticket is ever served before an earlier live one.
//
// While waiting, the ticket is kept alive by the client's heartbeat and
// the call holds no pool connection: it sleeps until the ticket ahead of it
// leaves (the leave grants the next ticket, and a notification names that
// one ticket: served, or re-check) or until that ticket's expiry,
// whichever comes first. If the ticket itself
// dies while waiting (the database was unreachable for longer than its
// TTL), Turn draws a new one at the back of the queue. Each statement of
// the wait is given at most the ticket's TTL (at least 1 s; the draw is
// let run a second more, as when ctx ends, below): one sent on a
// connection that silently lost its path is abandoned and retried over
// another, every Config.WaitRecheck.
//
// ctx bounds the wait: when it ends, the ticket is cancelled (`cancelled`)
// and the next one woken, and the error wraps ctx's cause; a draw in flight
// when ctx ends is let finish (for at most a second) so that its ticket is
// known and cancelled too, not left to hold the queue for a TTL. One that
// takes longer is cut off, and Turn returns; should the draw commit after
// all (it was waiting on the server for the queue's lock, say), its
// ticket, found by the mark every attempt of one draw carries, is given
// back in the background, as a ticket given up is (`cancelled`, the next
// one woken): looked for at once, waiting for a draw that holds or awaits
// the queue's lock, and once more a second later; Client.Close waits for
// that within its deadline. Only a draw that reaches the server after
// both looks leaves its ticket to expire, within its TTL. A ticket
// granted as ctx ended is given back the same way: its history reads
// `granted` then `cancelled`, the turn nobody took; one drawn as the
// client closes is given back too, before Close returns (Close waits for
// a draw in flight within its deadline), and Turn returns ErrClosed. Such a
// give-back is retried after a transient error (a dropped connection),
// within Config.ReleaseTimeout and the ticket's expiry; when it still
// fails, the ticket stays in the queue, by nobody, until it expires (the
// error says so), and Observer.ReleaseFailed is told. Options:
// WithLabel, WithTTL, WithNamespace.
//
// A turn is not reentrant: a second Turn on the same resource, even from
// the goroutine holding the first, queues behind it. A holder frozen inside
// a VerifyTurn transaction keeps its ticket row locked, and nobody behind
// it is served until that transaction ends; set
// idle_in_transaction_session_timeout on the server.
// A nil ctx is refused (ErrInvalid).
func (c *Client) Turn(ctx context.Context, resource string, opts ...Option) (*Turn, error) {
	if err := checkCtx("Client.Turn", ctx); err != nil {
		return nil, err
	}
	o, err := c.resolveTurn("Turn", resource, opts, takesTTL|takesLabel)
	if err != nil {
		return nil, err
	}
	return c.turn(ctx, resource, o)
}

// resolveTurn resolves the options of call, a call of the queue's on
// resource, which takes (beside WithNamespace) the options named by takes:
// takesTTL and takesLabel for Turn and TurnAll, takesAfter for
// FollowQueues, none for the others.
func (c *Client) resolveTurn(call, resource string, opts []Option, takes int) (callOptions, error) {
	o, err := c.resolveQueue(resource, opts, func(o callOptions) error {
		switch {
		case o.afterSet && takes&takesAfter == 0:
			return invalid("option", "WithAfterEvent: not an option of %s (it applies only to FollowQueues)", call)
		case o.labelSet && takes&takesLabel == 0:
			return invalid("option", "WithLabel: not an option of %s (it applies only to Turn and TurnAll)", call)
		}
		return o.only(call, takes)
	})
	if err != nil {
		var inv *InvalidError
		if errors.As(err, &inv) && inv.Field == "key" {
			inv.Field = "resource"
		}
		return o, err
	}
	if o.afterSet && o.after < 0 {
		return o, invalid("WithAfterEvent", "must not be negative, got %d", o.after)
	}
	if o.labelSet {
		if len(o.label) > MaxLabelLen {
			return o, invalid("label", "must be at most %d bytes of UTF-8 without NUL, got %d bytes", MaxLabelLen, len(o.label))
		}
		if err := checkText("label", o.label); err != nil {
			return o, err // invalid UTF-8 or NUL: said so, not "at most N bytes" of a short label
		}
	}
	return o, nil
}

func (c *Client) turn(ctx context.Context, resource string, o callOptions) (*Turn, error) {
	for {
		t, d, err := c.draw(ctx, resource, o)
		if err != nil {
			return nil, err
		}
		servedAsEnded := false
		if d.served {
			c.ln.endDraw(d.win, "", "") // served by its draw: nothing to wait for
			if servedAsEnded = ctx.Err() != nil; servedAsEnded {
				// Served after ctx ended: the caller is gone. Give it
				// back (abandon, below).
				err = context.Cause(ctx)
			}
		} else {
			err = c.waitTurn(ctx, t, d)
		}
		if err == nil && t.held() != nil {
			// Served, but its local deadline passed before Turn could
			// return it (the process was frozen meanwhile): its row may
			// have expired and the ticket behind been served. Queue
			// again, as for a ticket that died while waiting.
			err = errTicketLost
		}
		if err == nil {
			t.taken.Store(true)
			if obs := c.observer(); obs != nil && obs.QueueGranted != nil {
				obs.QueueGranted(QueueGrant{Namespace: o.namespace, Resource: resource, Ticket: t.l.token,
					Wait: time.Since(t.drawn), Ahead: t.ahead})
			}
			return t, nil
		}
		if errors.Is(err, errTicketLost) && t.l.closedBy() {
			// Close ended it (released, see Turn.endByClose) while it
			// waited or was about to be returned.
			err = ErrClosed
		}
		if errors.Is(err, errTicketLost) {
			// Our ticket died while we waited (renewals failed for a
			// TTL); our place is gone. Give the row up if it is still
			// there and queue again at the back.
			c.cfg.Logger.Warn("sentinel: waiting ticket lost; drawing a new one", "namespace", o.namespace,
				"resource", resource, "ticket", t.Ticket())
			_ = c.abandon(ctx, t, ErrLeaseLost) // a failure is logged; the row expires
			if err := c.checkOpen(); err != nil {
				return nil, err
			}
			continue
		}
		aerr := c.abandon(ctx, t, err)
		switch {
		case servedAsEnded:
			err = fmt.Errorf("sentinel: waiting for turn on %q/%q (ticket %d): %w (%s)",
				o.namespace, resource, t.l.token, err, givenBack("served", "given back", aerr, o.ttl))
		case aerr != nil && errors.Is(err, ErrClosed):
			err = closedGivenBack(fmt.Sprintf("waiting for turn on %q/%q (ticket %d)", o.namespace, resource, t.l.token), "waiting", aerr, o.ttl)
		case aerr != nil:
			// The ticket stays in the queue, by nobody, holding everyone
			// behind it until it expires: said, as for a served one.
			err = fmt.Errorf("%w (the ticket was waiting; giving it back failed, so it stays in the queue, by nobody, until it expires, within its TTL (%s): %v)",
				err, o.ttl, aerr)
		case ctx.Err() != nil && !errors.Is(err, ErrClosed):
			// Said, as for a served one: the caller's place is given up
			// and nobody behind it waits for it.
			err = fmt.Errorf("%w (the ticket was waiting: withdrawn from the queue)", err)
		}
		return nil, err
	}
}

// abandon gives a ticket up (cancelled while waiting, served as its
// caller's ctx ended, ended by Close, or lost), and returns the leave's
// error: nil when the row is gone. A transient error (a dropped
// connection) is retried within Config.ReleaseTimeout and the ticket's
// expiry (retryGiveBack): one used to leave the ticket in the queue, by
// nobody, until it expired, and every ticket behind it asleep that long.
func (c *Client) abandon(ctx context.Context, t *Turn, why error) error {
	c.hb.remove(t.l)
	if err := c.retryGiveBack(ctx, t.l.localExpiry(), "giving up a ticket", func(ctx context.Context) error {
		_, err := t.leave(ctx)
		return err
	}, t.l.logAttrs()...); err != nil {
		c.cfg.Logger.Warn("sentinel: giving up a ticket failed; it expires within its TTL", "namespace", t.l.ns,
			"resource", t.l.key, "ticket", t.l.token, "err", err)
		// A ticket its caller gave up is no loss when the statement
		// fails; one that died while it waited (why is ErrLeaseLost) is.
		// The cause is the leave's error, as Observer.ReleaseFailed
		// documents; why is said in the reason.
		t.l.endAs(&LostError{Namespace: t.l.ns, Key: t.l.key, Token: t.l.token, Kind: t.l.lossKind(),
			Reason: fmt.Sprintf("ticket given up (%v), but giving it up failed; it stays in the queue, by nobody, until it expires, within its TTL (%s), unless the leave committed", why, t.l.ttl),
			Cause:  err}, !errors.Is(why, ErrLeaseLost))
		return err
	}
	t.l.end(ErrReleased) // its row is gone
	return nil
}

// VerifyTurn checks, inside the caller's own transaction, that ticket is
// the served, live ticket of resource, and returns a *StaleTokenError
// (matching ErrStaleToken) otherwise. It locks the ticket row FOR KEY SHARE
// until the transaction ends, so the holder's guarded writes commit before
// anyone behind it can be served, while the turn's own renewals go on:
//
//	tx, _ := pool.Begin(ctx)
//	if err := client.VerifyTurn(ctx, tx, "printer", turn.Ticket()); err != nil {
//		tx.Rollback(ctx) // the turn is over: write nothing
//		return err
//	}
//	tx.Exec(ctx, "UPDATE ...")
//	tx.Commit(ctx)
//
// Options: WithNamespace. A nil ctx is refused (ErrInvalid).
func (c *Client) VerifyTurn(ctx context.Context, q Querier, resource string, ticket int64, opts ...Option) error {
	if err := checkCtx("Client.VerifyTurn", ctx); err != nil {
		return err
	}
	if q == nil {
		return invalid("querier", "must not be nil")
	}
	o, err := c.resolveResource("VerifyTurn", resource, opts)
	if err != nil {
		return err
	}
	if ticket <= 0 {
		return invalid("ticket", "must be positive, got %d", ticket)
	}
	var ok bool
	err = q.QueryRow(ctx, c.qsql().verify, o.namespace, resource, ticket).Scan(&ok)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && !ok) {
		return c.fencingRefused(ctx, &StaleTokenError{Namespace: o.namespace, Key: resource, Token: ticket})
	}
	if err != nil {
		return c.wrapErr(fmt.Sprintf("verify turn %q/%q", o.namespace, resource), err)
	}
	return nil
}
