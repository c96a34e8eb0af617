package sentinel

// This file: Lease, the held lease (accessors, Context, Done, Heartbeat, Release, its end), Client.Lease and the acquire statement (tryAcquire, acquireRow, keepGrant), Holder, and grantGrace/graceCtx (also used by Once and the queue); waiting for a lease (WithWait) is in lease_wait.go, a lease across processes (LeaseHandle, Detach, AdoptHandle, RenewHandle, ReleaseHandle) in lease_handle.go.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

type leaseKind uint8

const (
	kindLease     leaseKind = iota // a row in leases
	kindExecution                  // the lease columns of a row in executions (Once)
)

// Lease is a held, fenced lease on one key. The client renews it in the
// background until Release, Detach, loss, hard TTL or Close. Watch Done to learn of
// a loss: it closes before the database could grant the key to anyone else.
// A Lease is safe for concurrent use.
type Lease struct {
	c          *Client
	kind       leaseKind
	ns, key    string
	owner      string
	token      int64
	ttl        time.Duration
	margin     time.Duration
	renewEvery time.Duration
	acquiredAt time.Time // database clock
	done       chan struct{}

	mu        sync.Mutex
	err       error     // why the lease ended; nil while held
	deadline  time.Time // local (monotonic) time after which the lease is not trusted
	nextDue   time.Time // when the heartbeater should renew next
	expiresAt time.Time // database clock, as of the last renewal
	hardAt    time.Time // database clock; zero when there is no hard TTL
	capped    bool      // the expiry reached the hard TTL: no renewal can extend it
	lastErr   error     // the last renewal error, reported if the deadline passes
	renewing  bool      // a background renewal statement for it is under way
	timer     *time.Timer
	onEnd     func(error) // set before the lease is shared; called once, outside mu
	// onClose, set before the lease is shared, is how Client.Close ends
	// it (a turn's: Turn.endByClose); nil: Close ends it as closed.
	onClose func()
	byClose bool // Client.Close ended it (Do reports that fn was cut short)
	// inDo: Client.Do holds it and has not begun its end (fn is running);
	// freedByClose: Client.Close's release freed its row. Close logs the
	// release of a running Do's lease, and Do says the key may have gone
	// to another while fn ran.
	inDo, freedByClose bool
	// exec, for an execution lease, says what may run fn again once it is
	// lost (set by Client.claimed before it is shared); its LostError
	// carries it (endAs), to say so.
	exec execLoss
	// releasing: a Release (Lease's or Turn's) is in flight; an end
	// meanwhile other than its own failure is reported (log, Observer)
	// once its outcome is known (unreported), not at once: a release
	// that frees the live row ends the lease released (endReleased), and
	// the Observer must not have heard of a loss Err no longer reports.
	releasing  bool
	unreported error

	// relMu serializes Release calls (and Close's release, and Detach) on
	// this lease, so a second caller sees the first one's outcome instead
	// of a row that is already gone. Close waits for it no longer than its
	// deadline (relLock.lockCtx).
	relMu relLock
	// relFailed is the error a failed release statement (Release's, or
	// Close's) ended the lease with: an end, not a loss, so a later Release that frees the row
	// still carrying the token reports success. retried: one did, and
	// the Releases after it report success too. Both under relMu.
	relFailed error
	retried   bool
}

// relLock is a mutex whose waiters can give up: Client.Close waits for a
// Release under way (Lease's or Turn's, which holds it) no longer than its
// deadline. A sync.Mutex cannot be waited for with a deadline but by
// polling TryLock. The zero value is unlocked; it must not be copied.
type relLock struct {
	once sync.Once
	ch   chan struct{} // 1-buffered: the lock is held while it holds a value
}

func (m *relLock) c() chan struct{} {
	m.once.Do(func() { m.ch = make(chan struct{}, 1) })
	return m.ch
}

// Lock waits for the lock.
func (m *relLock) Lock() { m.c() <- struct{}{} }

// lockCtx waits for the lock until ctx ends: it reports whether it has it
// (it takes a free lock even when ctx has ended).
func (m *relLock) lockCtx(ctx context.Context) bool {
	ch := m.c()
	select {
	case ch <- struct{}{}:
		return true
	default:
	}
	select {
	case ch <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// tryLock takes the lock if it is free, and reports whether it did.
func (m *relLock) tryLock() bool {
	select {
	case m.c() <- struct{}{}:
		return true
	default:
		return false
	}
}

// Unlock releases the lock, which must be held.
func (m *relLock) Unlock() {
	select {
	case <-m.c():
	default:
		panic("sentinel: unlock of an unlocked relLock")
	}
}

// Key returns the lease's key.
func (l *Lease) Key() string { return l.key }

// Namespace returns the lease's namespace.
func (l *Lease) Namespace() string { return l.ns }

// Owner returns the owner identity that holds the lease.
func (l *Lease) Owner() string { return l.owner }

// Token returns the lease's fencing token: larger than every token granted
// for any key before it. Pass it to downstream writes (see VerifyToken).
func (l *Lease) Token() int64 { return l.token }

// Done returns a channel that is closed when the lease ends: released,
// handed on (Detach), lost, or past its hard TTL. Err says which.
func (l *Lease) Done() <-chan struct{} { return l.done }

// Err returns nil while the lease is held; afterwards ErrReleased,
// ErrDetached after Detach, or an error matching ErrLeaseLost (and
// ErrHardTTL when the hard TTL ended it).
// Client.Close ends its leases as released before its release statement
// runs; one whose row that statement found gone reads as lost once Close
// returns, and one it could not free, even retried, as a failed release
// (matching ErrClosed; released again once a Release frees it, see
// Release). Once
// Release returns nil, Err returns ErrReleased, even when the lease ended
// otherwise while that Release ran (its deadline passed while the
// statement was in flight) or before it (a failed release it made good).
//
// A lease whose local deadline (Deadline) has passed is lost even when its
// deadline timer has not fired yet (the process was frozen, by SIGSTOP or
// a paused VM, and has just resumed): Err then ends it (Done closes) and
// reports the loss, so a holder that checks Err before each step of its
// work never takes one past the deadline.
func (l *Lease) Err() error {
	if err := l.ended(); err != nil || time.Now().Before(l.Deadline()) {
		return err
	}
	l.checkDeadline()
	return l.ended()
}

// ended returns why the lease ended, nil while it has not, without
// checking the deadline (Err does): for the library's own paths, which
// must not end a lease as a side effect of reading it.
func (l *Lease) ended() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// ExpiresAt returns the lease's expiry on the database clock as of its last
// successful renewal.
func (l *Lease) ExpiresAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expiresAt
}

// Deadline returns the local time (monotonic clock) until which the holder
// may trust the lease; it moves forward with every renewal. Work guarded by
// the lease must stop by then.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Context returns a copy of parent that is cancelled, with the loss as its
// cause, when the lease ends: already cancelled when the lease has ended,
// or its deadline has passed (see Err), before Context returns.
// A nil parent is refused: the ctx returned is already cancelled, its
// cause an error matching ErrInvalid.
func (l *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	if parent == nil {
		return nilParent("Lease.Context")
	}
	ctx, cancel := context.WithCancelCause(parent)
	if err := l.Err(); err != nil {
		// Ended, or past its deadline (Err ends it): cancelled before
		// the caller can look, not by the goroutine some time later.
		cancel(err)
		return ctx, func() {}
	}
	go func() {
		select {
		case <-l.done:
			cancel(l.ended())
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// Lease acquires the lease on key for this client, in one statement: it
// inserts the row, or takes over a row whose lease expired by the database
// clock, and mints the fencing token in the same statement.
//
// When another owner holds the key Lease returns a *HeldError (matching
// ErrNotAcquired) naming the holder, unless WithWait was given: then it
// blocks until the lease is acquired or ctx ends, riding out a database that
// is unreachable for a while (restart, network fault); the error of a wait
// ctx ended says what became of its registration (withdrawn, or a grant
// made to it meanwhile released). WithTTL, WithHardTTL, WithNamespace and
// WithForce apply.
//
// The lease is renewed in the background until Release, Detach, Close, its
// hard TTL, or a loss (see Done).
//
// When ctx ends while the acquiring statement runs, the statement is let
// finish (for at most a second): a lease it granted is released before Lease
// returns ctx's error, rather than left held, unknown to anyone, for a TTL.
// Likewise with WithWait, a lease a release hands to the waiter as its ctx
// ends is released at once (handed on to the next waiter) and Lease
// returns ctx's error; and a lease granted or handed over as the client
// closes is released, and Lease returns ErrClosed. Such a give-back is
// retried after a transient error (a dropped connection), within
// Config.ReleaseTimeout and the grant's expiry; when it still fails, the
// error says so (the key stays held, by nobody, until the grant expires)
// and Observer.ReleaseFailed is told. A nil ctx is refused (ErrInvalid).
func (c *Client) Lease(ctx context.Context, key string, opts ...Option) (l *Lease, err error) {
	if err := checkCtx("Client.Lease", ctx); err != nil {
		return nil, err
	}
	if obs := c.observer(); obs != nil { // metrics and tracing (observe.go)
		ctx = obs.leaseStart(ctx, c, key, opts)
		defer obs.leaseEnd(ctx, c, key, opts, time.Now(), &l, &err)
	}
	o, err := c.resolve(key, opts, func(o callOptions) error {
		if o.codec != nil || o.metadata != nil || o.token != 0 {
			return invalid("option", "WithCodec, WithMetadata and WithToken do not apply to Lease")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !o.wait {
		l, held, err := c.tryAcquire(ctx, key, o, 0)
		if err != nil {
			return nil, err
		}
		if l == nil {
			return nil, held
		}
		return l, nil
	}
	return c.waitAcquire(ctx, key, o)
}

// tryAcquire runs the acquire statement once. It returns the lease, or the
// holder when the key is held elsewhere. leaving is 1 for a waiter counted
// in leases.waiters: a grant counts it out.
func (c *Client) tryAcquire(ctx context.Context, key string, o callOptions, leaving int) (*Lease, *HeldError, error) {
	return c.acquireRow(ctx, key, o, func(sctx context.Context, dest ...any) error {
		return c.co.queryRow(sctx, ctx, coAcquire, c.sql.acquire, o.namespace, key, c.cfg.Owner, c.cfg.Host, c.cfg.PID,
			us(o.ttl), us(o.hardTTL), o.force, leaving).Scan(dest...)
	})
}

// acquireRow runs an acquire statement through scan (sqlAcquire's columns
// first) and turns its row into a lease or the holder.
func (c *Client) acquireRow(ctx context.Context, key string, o callOptions, scan func(ctx context.Context, dest ...any) error) (*Lease, *HeldError, error) {
	sent := time.Now()
	var (
		acquired  bool
		h         Holder
		hard      *time.Time
		remaining time.Duration
	)
	// A grant commits on its own: the statement may outlive ctx by
	// grantGrace, so that a lease granted as ctx ends is known, and given
	// back below, instead of held unknown to anyone for a TTL.
	sctx, scancel := graceCtx(ctx, grantGrace)
	err := scan(sctx, &acquired, &h.Owner, &h.Host, &h.PID, &h.Token, &h.AcquiredAt, &h.ExpiresAt, &hard, &remaining)
	scancel()
	if errors.Is(err, pgx.ErrNoRows) {
		// The holder changed between the insert attempt and the read of
		// the statement's snapshot; report it held without details.
		return nil, &HeldError{Namespace: o.namespace, Key: key}, nil
	}
	if err != nil {
		return nil, nil, c.wrapErr(fmt.Sprintf("acquire lease %q/%q", o.namespace, key), err)
	}
	if hard != nil {
		h.HardExpiresAt = *hard
	}
	h.Namespace, h.Key = o.namespace, key
	if !acquired {
		h.localExpiry = sent.Add(remaining)
		return nil, &HeldError{Namespace: o.namespace, Key: key, Holder: &h, Self: c.holdsLease(o.namespace, key, h.Token)}, nil
	}
	l := c.newLease(kindLease, o.namespace, key, h.Token, o.ttl)
	l.acquiredAt = h.AcquiredAt
	if err := c.keepGrant(ctx, l, fmt.Sprintf("acquire lease %q/%q", o.namespace, key), "granted",
		sent, remaining, h.ExpiresAt, h.HardExpiresAt); err != nil {
		return nil, nil, err
	}
	c.cfg.Logger.Debug("sentinel: lease acquired", "namespace", o.namespace, "key", key, "token", h.Token)
	return l, nil, nil
}

// keepGrant registers l, a lease just granted to this client, with the
// heartbeat, and returns nil. sent is when the granting statement was
// sent, remaining the lease's time left as the database measured it,
// expiresAt and hardAt its expiry and hard expiry (zero: none) on the
// database clock. When ctx ended meanwhile (the caller is gone), or
// Close began while the grant was in flight (nobody would renew or
// release it), it gives the grant back instead (giveBackLease) and
// returns the caller's error: ctx's, or ErrClosed. op names the call in
// that error ("acquire lease ..."), what the grant ("granted").
func (c *Client) keepGrant(ctx context.Context, l *Lease, op, what string, sent time.Time, remaining time.Duration, expiresAt, hardAt time.Time) error {
	if ctx.Err() != nil {
		// Granted after ctx ended: the caller is gone. Give it back.
		rerr := c.giveBackLease(ctx, l, sent.Add(remaining))
		return fmt.Errorf("sentinel: %s: %w (%s)", op, context.Cause(ctx), givenBack(what, "released", rerr, l.ttl))
	}
	if !c.hb.add(l, sent, remaining, expiresAt, hardAt) {
		// Close began while the grant was in flight: nobody would renew
		// or release it. Give it back now.
		if rerr := c.giveBackLease(ctx, l, sent.Add(remaining)); rerr != nil {
			return closedGivenBack(op, what, rerr, l.ttl)
		}
		return ErrClosed
	}
	return nil
}

// holdsLease reports whether this client itself holds the lease ns/key at
// token. It is decided by the grant (its token), not by the Owner: another
// client configured with the same Owner is not this client.
func (c *Client) holdsLease(ns, key string, token int64) bool {
	c.hb.mu.Lock()
	defer c.hb.mu.Unlock()
	for l := range c.hb.held {
		if l.kind == kindLease && l.token == token && l.ns == ns && l.key == key {
			return true
		}
	}
	return false
}

func (c *Client) newLease(kind leaseKind, ns, key string, token int64, ttl time.Duration) *Lease {
	return &Lease{
		c: c, kind: kind, ns: ns, key: key, owner: c.cfg.Owner, token: token,
		ttl: ttl, margin: c.margin(ttl), renewEvery: c.renewEvery(ttl),
		done: make(chan struct{}),
	}
}

// Release gives the lease up in one statement guarded by owner and token,
// and wakes waiters. It is idempotent, and works from a defer after the
// work's context was cancelled: a done ctx is replaced by one bounded by
// Config.ReleaseTimeout.
//
// Release is the holder saying its work is over: Done closes once the
// statement returned, and another client may hold the key as soon as the
// statement commits. End the work done under Context (goroutines it
// started included) before Release, as a defer in the function that did
// it does. (Client.Close, which a holder does not time, closes Done
// before its release statement.)
//
// It returns nil when it released the lease or the lease had already been
// released, and an error matching ErrLeaseLost when the lease had been lost
// (the guarded work may have overlapped another holder), whether or not
// the release statement then succeeded. When the release
// statement itself fails (database unreachable, or the connection dropped
// before the reply) the lease ends all the same: it is no longer renewed,
// Done closes, and the key is free either at once (the statement committed
// before the reply was lost) or when the row expires, within one TTL.
// Release may then be called again: it returns nil if it frees the row
// while the row still carries the lease's token, or finds the row freed
// still carrying it (the failed statement committed, its reply lost). So
// it does after a Client.Close whose release statement failed. After
// Detach, Release sends nothing and returns an error matching
// ErrDetached: the row is the handle's receiver's to release. A nil ctx
// is refused (ErrInvalid) and the lease left as it was.
func (l *Lease) Release(ctx context.Context) error {
	if err := checkCtx("Lease.Release", ctx); err != nil {
		return err
	}
	l.relMu.Lock()
	defer l.relMu.Unlock()
	l.mu.Lock()
	prior := l.err
	l.mu.Unlock()
	if prior == ErrDetached {
		return fmt.Errorf("sentinel: release lease %q/%q: %w: it was handed on; release it by its handle (Client.ReleaseHandle)", l.ns, l.key, ErrDetached)
	}
	if errors.Is(prior, ErrReleased) || l.retried {
		return nil
	}
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), l.c.cfg.ReleaseTimeout)
		defer cancel()
	}
	// Stop renewing first, so an in-flight renewal that finds the row gone
	// is not mistaken for a loss. An end while the statement is in flight
	// (the deadline) is reported once its outcome is known.
	l.beginRelease()
	defer l.endRelease()
	l.c.hb.remove(l)
	n, err := l.c.releaseRow(ctx, l.ns, l.key, l.owner, l.token)
	if err != nil {
		// The caller is done with the lease: stop renewing it and let the
		// row expire by itself rather than keep the key held for as long
		// as this client lives.
		failed := &LostError{Namespace: l.ns, Key: l.key, Token: l.token, Kind: l.lossKind(), Reason: "release failed; the lease is no longer renewed and expires within its TTL unless the release committed", Cause: err}
		if l.endAs(failed, true); prior == nil && l.ended() == failed {
			l.relFailed = failed
		}
		if prior != nil && prior != l.relFailed {
			// Lost before (a database unreachable for a TTL often fails
			// the release too): the loss is what the caller must learn.
			return errors.Join(prior, err)
		}
		return err
	}
	if n == 1 {
		if prior == nil || prior == l.relFailed {
			// Freed while the row still carried the token: nobody else
			// held the key meanwhile, even after a failed attempt.
			l.endReleased(prior)
			l.retried = prior != nil
			return nil
		}
		return prior // freed early, but the lease had been lost locally
	}
	if prior != nil && prior == l.relFailed {
		// A failed release before this one may have committed (its
		// reply lost): the row, expired, still carries the token, and
		// nobody held the key since.
		var untaken bool
		if err := l.c.pool.QueryRow(ctx, l.c.sql.untaken, l.ns, l.key, l.owner, l.token).Scan(&untaken); err != nil {
			return errors.Join(prior, l.c.wrapErr(fmt.Sprintf("read lease %q/%q", l.ns, l.key), err))
		}
		if untaken {
			l.endReleased(prior)
			l.retried = true
			return nil
		}
	}
	if prior == nil {
		prior = &LostError{Namespace: l.ns, Key: l.key, Token: l.token, Kind: l.lossKind(), Reason: reasonTakenBeforeRelease,
			Cause: &StaleTokenError{Namespace: l.ns, Key: l.key, Token: l.token}}
		l.end(prior)
	}
	return prior
}

func (c *Client) releaseRow(ctx context.Context, ns, key, owner string, token int64) (int64, error) {
	var (
		n             int64
		wake, channel string
	)
	if err := c.co.queryRow(ctx, ctx, coRelease, c.sql.release, ns, key, owner, token).Scan(&n, &wake, &channel); err != nil {
		return 0, c.wrapErr(fmt.Sprintf("release lease %q/%q", ns, key), err)
	}
	// Only a release somebody waits for has a wake-up: it goes after the
	// commit, from the client's sender (wake.go), so a release nobody
	// waits for costs its one statement as before. A grant's goes to its
	// waiter's process only (channel; empty for the schema's).
	c.wake(channel, wake)
	return n, nil
}

// Heartbeat renews the lease now, in one statement, instead of waiting for
// the background heartbeat. It returns nil only when the lease was renewed
// (up to its hard TTL, past which nothing extends it). Once the lease has
// ended it returns Err (ErrReleased after Release, ErrDetached after
// Detach) and sends nothing, and
// so it does when the lease's local deadline has passed (Err reports the
// loss); a lease that ends while the renewal is in flight returns why. It
// returns an error matching ErrLeaseLost (and ErrStaleToken when the lease
// was taken over) if the lease is gone, and a *BusyError (ErrBusy)
// when the lease row stayed locked by another transaction (a competing
// statement on the same row; VerifyToken's lock does not block renewals)
// for a whole renewal interval or until ctx ended: the lease is then still
// held but was not extended. A nil ctx is refused (ErrInvalid).
func (l *Lease) Heartbeat(ctx context.Context) error {
	if err := checkCtx("Lease.Heartbeat", ctx); err != nil {
		return err
	}
	giveUp := time.Now().Add(l.renewEvery)
	var busy error // the last ErrBusy seen, if any
	for {
		// Err, not ended: a lease past its deadline (the process was
		// frozen, its timer has not fired yet) is lost, and renewing it
		// by hand must not say otherwise.
		if err := l.Err(); err != nil {
			return err
		}
		err := l.c.hb.renew(ctx, []*Lease{l})
		if err == nil {
			if ended := l.ended(); ended != nil {
				// It ended while the renewal was in flight (its deadline
				// timer, a Release, Close): whatever the statement
				// found, the lease is not held.
				return ended
			}
		}
		if busy != nil && err != nil && ctx.Err() != nil && !errors.Is(err, ErrLeaseLost) {
			// ctx ended while a retry was in flight: the row was locked
			// every time the statement could run, which is what to report.
			return busy
		}
		if !errors.Is(err, ErrBusy) || time.Now().After(giveUp) {
			return err
		}
		busy = err
		select {
		case <-ctx.Done():
			return err
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// end marks the lease ended with err (first reason wins), closes Done and
// removes it from the heartbeater.
func (l *Lease) end(err error) { l.endAs(err, false) }

// endReleased ends the lease as released, by a release that found it
// held (its row live, or freed still carrying its token) and began when
// its error was prior: nil, or the failed release (relFailed) it made
// good. That failure is replaced, and so is an end since prior was read
// (prior nil: its deadline passed while the release statement ran, the
// row still live), so that Err says released, as the release does.
func (l *Lease) endReleased(prior error) {
	l.mu.Lock()
	if l.err != nil && (prior == nil || l.err == prior) {
		l.err = ErrReleased
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.end(ErrReleased)
}

// endAs is end; releaseFailed says err is a failed release (or give-back)
// statement's: the holder was done with the lease, so it is reported to
// Observer.ReleaseFailed, not as a loss.
func (l *Lease) endAs(err error, releaseFailed bool) {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return
	}
	if lost, ok := err.(*LostError); ok && lost.Kind == LossExecution && lost.exec == execUnknown {
		lost.exec = l.exec // made for this end, not yet shared
	}
	l.err = err
	if l.timer != nil {
		l.timer.Stop()
	}
	onEnd := l.onEnd
	close(l.done)
	deferReport := l.releasing && !releaseFailed
	if deferReport {
		l.unreported = err
	}
	l.mu.Unlock()
	l.c.hb.remove(l)
	if !deferReport {
		l.reportEnd(err, releaseFailed)
	}
	if onEnd != nil {
		onEnd(err)
	}
}

// beginRelease marks a Release in flight (see releasing); endRelease,
// deferred by the same Release, reports an end that came meanwhile unless
// the Release ended the lease released after all.
func (l *Lease) beginRelease() {
	l.mu.Lock()
	l.releasing = true
	l.mu.Unlock()
}

func (l *Lease) endRelease() {
	l.mu.Lock()
	l.releasing = false
	pending, final := l.unreported, l.err
	l.unreported = nil
	l.mu.Unlock()
	if pending != nil && !errors.Is(final, ErrReleased) {
		l.reportEnd(final, false)
	}
}

// reportEnd logs and observes why the lease ended. A release is not a
// loss, nor a detach (Lease.Detach: the lease was handed on), nor is the end at Close of a turn (Close ends it released before
// it gives the ticket back, see Turn.endByClose), of a term or of an
// elector's member row (the elector's Run sees Done, resigns the term and
// removes its row, and returns ErrClosed): they are given back as a lease
// is released. The
// execution lease of a running Once (or OnceTx) is the one Close ends
// without giving it back: fn's ctx is cancelled, but the key stays this
// attempt's until its lease expires, nobody else's, so it is reported to
// Observer.LeaseLost (a LostError matching ErrClosed: reason "closed" to
// an OpenTelemetry observer) and logged at Info, saying what becomes of
// the key (closedExecution), not as a Warn: a fn that returns by then has
// its outcome recorded as usual, and a call whose key does end uncertain
// logs that Warn itself. Nor is a failed release
// (releaseFailed) a loss: the holder was done with the lease, which
// nobody else held meanwhile; the row expires within its TTL. It is
// reported to Observer.ReleaseFailed.
func (l *Lease) reportEnd(err error, releaseFailed bool) {
	closed := errors.Is(err, ErrClosed) && (l.kind == kindTicket || l.kind == kindLeader || l.kind == kindMember)
	switch {
	case errors.Is(err, ErrReleased), errors.Is(err, ErrDetached):
	case releaseFailed:
		l.c.cfg.Logger.Warn("sentinel: lease release failed; it expires within its TTL", "namespace", l.ns, "key", l.key,
			"token", l.token, "err", err)
		l.c.observer().releaseFailed(l, err)
	case closed:
	case l.kind == kindExecution && errors.Is(err, ErrClosed):
		l.c.cfg.Logger.Info("sentinel: close: "+l.closedExecution(), "namespace", l.ns, "key", l.key, "token", l.token,
			"ttl", l.ttl)
		l.c.observer().lost(l, err)
	default:
		l.c.cfg.Logger.Warn("sentinel: lease ended", "namespace", l.ns, "key", l.key, "token", l.token, "err", err)
		l.c.observer().lost(l, err)
	}
}

// closedExecution says what becomes of the key of a running Once (or
// OnceTx) whose execution lease Client.Close ended, cancelling fn's ctx:
// Close neither renews nor frees it, so the key stays this attempt's, and
// nobody else's, until its lease expires (within its TTL).
func (l *Lease) closedExecution() string {
	if l.exec == execTx {
		return "cancelled a running OnceTx's fn: its transaction rolls back (unless its commit was under way), nothing is " +
			"committed, and the key is given back for the next call (if the process exits first, it frees when its lease " +
			"expires, within its TTL); nothing needs doing"
	}
	s := "cancelled a running Once's fn: the key stays this call's, nobody else's, until its lease expires (within its TTL); " +
		"what fn returns by then is recorded as usual (nothing needs doing), an error other than Retryable leaves the key " +
		"uncertain and is logged so; "
	if l.exec == execRerun {
		return s + "if the process exits first, the next Once call with WithRerun runs fn again once the lease expires. " +
			"To avoid this, let running calls return before Close"
	}
	return s + "if the process exits first, the key is left uncertain: reconcile it (" + l.c.inspectCommand(l.ns, l.key) + "). " +
		"To avoid this, let running calls return before Close"
}

// closedBy reports whether Client.Close ended the lease.
func (l *Lease) closedBy() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byClose
}

// notReleased replaces ErrReleased, which Close ends a lease with before its
// release statement runs, with err when that statement did not free the
// row: releaseFailed when the statement failed, not when it found the row
// gone. Done closed already; another reason is left as it is.
func (l *Lease) notReleased(err error, releaseFailed bool) {
	l.mu.Lock()
	if l.err != ErrReleased {
		l.mu.Unlock()
		return
	}
	l.err = err
	l.mu.Unlock()
	l.reportEnd(err, releaseFailed)
}

// checkDeadline runs when the local deadline timer fires.
func (l *Lease) checkDeadline() {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return
	}
	if left := time.Until(l.deadline); left > 0 { // renewed meanwhile
		if l.timer != nil { // nil only until the heartbeater arms it
			l.timer.Reset(left)
		}
		l.mu.Unlock()
		return
	}
	lost := &LostError{Namespace: l.ns, Key: l.key, Token: l.token, Kind: l.lossKind(), Reason: reasonDeadline, Cause: l.lastErr}
	if l.capped {
		lost.Reason, lost.Cause = reasonHardTTL, ErrHardTTL
	}
	l.mu.Unlock()
	l.end(lost)
}

// Holder returns the current holder of key's lease, or an error matching
// ErrNotFound when nobody holds it (free or expired). Options: WithNamespace.
// A nil ctx is refused (ErrInvalid).
func (c *Client) Holder(ctx context.Context, key string, opts ...Option) (*Holder, error) {
	if err := checkCtx("Client.Holder", ctx); err != nil {
		return nil, err
	}
	o, err := c.resolve(key, opts, onlyTakes("Holder", 0))
	if err != nil {
		return nil, err
	}
	h := Holder{Namespace: o.namespace, Key: key}
	var hard *time.Time
	err = c.pool.QueryRow(ctx, c.sql.holder, o.namespace, key).
		Scan(&h.Owner, &h.Host, &h.PID, &h.Token, &h.AcquiredAt, &h.ExpiresAt, &hard)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("sentinel: lease %q/%q is not held: %w", o.namespace, key, ErrNotFound)
	}
	if err != nil {
		return nil, c.wrapErr(fmt.Sprintf("read lease %q/%q", o.namespace, key), err)
	}
	if hard != nil {
		h.HardExpiresAt = *hard
	}
	return &h, nil
}

// givenBack says what became of a grant (what: "granted", "served", ...)
// that came as its caller's ctx ended and was given back (done: "released",
// "given back"): err is the give-back's error, nil when it succeeded.
// A failed give-back is said as such: the key stays held, by nobody, until
// it expires.
func givenBack(what, done string, err error, ttl time.Duration) string {
	if err != nil {
		return fmt.Sprintf("%s as it ended; giving it back failed, so it is free only when it expires, within its TTL (%s): %v", what, ttl, err)
	}
	return what + " as it ended: " + done
}

// giveBack gives back l, a grant its caller cannot use (it came as the
// caller's ctx ended, or as the client closed: l was never returned nor
// renewed), with release, retrying a transient error (a dropped
// connection, a restarting server; see transient) within
// Config.ReleaseTimeout and never past expiry, the grant's local expiry:
// after it there is nothing to give back. One dropped connection used to
// leave the key held, by nobody, until it expired (a TTL), its waiters
// asleep that long. l ends released, or, when the give-back finally
// failed, as a failed release (logged, and reported to
// Observer.ReleaseFailed as a Release's failure is): the key stays held
// until it expires. It returns the last attempt's error.
func (c *Client) giveBack(ctx context.Context, l *Lease, expiry time.Time, release func(ctx context.Context) error) error {
	if err := c.retryGiveBack(ctx, expiry, "giving back an unused grant", release, l.logAttrs()...); err != nil {
		l.giveBackFailed(err)
		return err
	}
	l.end(ErrReleased)
	return nil
}

// giveBackFailed ends l, a grant given back unused, as a failed release
// (logged, and reported to Observer.ReleaseFailed): err is the give-back's
// last error.
func (l *Lease) giveBackFailed(err error) {
	l.endAs(&LostError{Namespace: l.ns, Key: l.key, Token: l.token, Kind: l.lossKind(),
		Reason: "given back unused, but the release failed; the key stays held, by nobody, until it expires, within its TTL, unless the release committed",
		Cause:  err}, true)
}

// retryGiveBack runs release, the statement that gives a row back (a
// grant's, a ticket's, a registration's, a member's), retrying a
// transient error (see transient) after a short pause, within
// Config.ReleaseTimeout and never past expiry (when the row expires by the
// local clock: after it there is nothing to give back). what names the
// give-back, and attrs the row, in the log line of a retry. It returns the
// last attempt's error (a dropped connection, say, rather than the
// timeout after it), nil once release succeeded; it ends nothing: its
// caller does, as the give-back's outcome says.
func (c *Client) retryGiveBack(ctx context.Context, expiry time.Time, what string, release func(ctx context.Context) error, attrs ...any) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ReleaseTimeout)
	defer cancel()
	return c.retryWithin(rctx, expiry, what, release, attrs...)
}

// retryWithin is retryGiveBack bounded by rctx as it is, not by a
// ReleaseTimeout of its own: Close's release and give-backs retry within
// Close's one ReleaseTimeout (closeGiveBack).
func (c *Client) retryWithin(rctx context.Context, expiry time.Time, what string, release func(ctx context.Context) error, attrs ...any) error {
	for {
		err := release(rctx)
		if err == nil {
			return nil
		}
		if !transient(err) || rctx.Err() != nil || !time.Now().Add(giveBackPause).Before(expiry) {
			return err // failed for good, or no time left
		}
		if c.closed.Load() && cannotConnect(err) {
			// The client is closing and the database cannot be reached
			// at all (not one connection dropped): Close waits for these
			// give-backs (a lease wait's withdrawal, say), and must not
			// wait out an outage, as its own release does not.
			return err
		}
		c.cfg.Logger.Warn("sentinel: "+what+" failed; retrying", append(attrs[:len(attrs):len(attrs)], "err", err)...)
		t := time.NewTimer(giveBackPause)
		select {
		case <-rctx.Done():
		case <-t.C:
		}
		t.Stop()
		if rctx.Err() != nil {
			return err
		}
	}
}

// logAttrs names l in a log line.
func (l *Lease) logAttrs() []any { return []any{"namespace", l.ns, "key", l.key, "token", l.token} }

// localExpiry is when l's row expires by the local (monotonic) clock, as
// of its grant or its last renewal: its deadline plus the margin kept
// before it.
func (l *Lease) localExpiry() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline.Add(l.margin)
}

// cannotConnect reports whether err is a failure to open a connection (the
// database unreachable, refusing connections or starting up), rather than
// a connection lost under a statement.
func cannotConnect(err error) bool {
	var connErr *pgconn.ConnectError
	var opErr *net.OpError
	return errors.As(err, &connErr) || (errors.As(err, &opErr) && opErr.Op == "dial")
}

// giveBackPause is the pause between two attempts of a give-back.
const giveBackPause = 100 * time.Millisecond

// giveBackLease is giveBack for a lease l (its release statement).
func (c *Client) giveBackLease(ctx context.Context, l *Lease, expiry time.Time) error {
	return c.giveBack(ctx, l, expiry, func(ctx context.Context) error {
		_, err := c.releaseRow(ctx, l.ns, l.key, l.owner, l.token)
		return err
	})
}

// closedGivenBack is the error of a call (op) whose grant (what) came as
// the client closed and whose give-back failed (err): ErrClosed, saying
// the key stays held, by nobody, until it expires.
func closedGivenBack(op, what string, err error, ttl time.Duration) error {
	return fmt.Errorf("sentinel: %s: %w (%s as the client closed; giving it back failed, so it is free only when it expires, within its TTL (%s): %w)",
		op, ErrClosed, what, ttl, err)
}

// grantGrace is how long a statement that grants something (a lease, a
// queue ticket) may run on after the caller's ctx ended: long enough for a
// healthy database to answer, so the grant is known and given back rather
// than left held, unknown, for a TTL; short enough that a call during an
// outage still returns soon after its ctx ended.
const grantGrace = time.Second

// graceCtx returns a context that ends grace after ctx ends, or when the
// returned cancel is called. When ctx has ended already it returns ctx: a
// statement not yet sent grants nothing, so there is nothing to outlive,
// and a call whose ctx ended before it began writes nothing.
func graceCtx(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	if ctx.Done() == nil || ctx.Err() != nil {
		return ctx, func() {} // never ends, or ended: nothing to outlive, nothing allocated
	}
	g, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(grace, cancel) })
	return g, func() { stop(); cancel() }
}
