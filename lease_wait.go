package sentinel

// This file: waiting for a lease (WithWait): waitAcquire's loop, the registration in lease_waiters made by a failed acquire (tryAcquireWait, sqlAcquireWait), its renewal and withdrawal, and reading a grant a release handed over (readGrant, sqlLeaseGrant).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// waitAcquire acquires key, waiting for it while it is held.
//
// The first attempt that finds the key held registers the caller in the
// same statement (sqlAcquireWait): it counts itself in leases.waiters and
// gets a row in lease_waiters. The holder's release then hands the lease
// to the oldest live registration in its own statement (sqlRelease) and
// notifies that waiter only (kind 'w', by registration): the waiter reads
// its grant (sqlLeaseGrant) and returns, one commit after the release. It
// never misses a wake-up:
//
//   - It LISTENs on the key before its first attempt (subscribe), and on
//     its registration as soon as it has one; the wake-up of a grant made
//     before that second subscription is kept by the process's hub for
//     it and claimed by the subscription (listenHub.dispatch), so it wakes
//     the waiter at once; a hub that was down meanwhile wakes every waiter
//     when it reconnects, and without a listener the waiter reads its
//     grant before it sleeps. Every read of the grant is made before an
//     attempt to acquire.
//   - The registration and a release both lock the key's row, so they are
//     serialized by its row lock. If the registration commits first, the
//     release sees it (its statement starts later) and grants to it, or,
//     when the release's own lock attempt finds the row busy, ends the
//     lease and notifies (waiters > 0, read under the lock: read committed
//     re-reads the newest row version it updates). If the release comes
//     first, the registration, which locks the row after the release
//     committed, reads the row expired, and the waiter re-checks at once,
//     in a statement that starts after the release committed and so sees
//     it.
//   - A registration attempt that finds the row locked (a release or a
//     fencing check under way) or missing registers nothing; the waiter
//     re-checks after a millisecond, backing off (waitDelay), and
//     registers at its next failed attempt.
//   - A registration lasts the waiter's TTL and is renewed while it waits;
//     one left by a waiter that died is skipped once expired, and a waiter
//     granted the lease just as it died holds it until its TTL runs out
//     (the grant's expiry, on the database clock), when the next waiter
//     takes the key at its re-check.
//
// A grant, by a release or by the waiter's own attempt, counts the waiter
// out and withdraws its registration in the same statement; a waiter that
// gives up withdraws itself (and releases a grant it finds made to it
// meanwhile, which passes the key on). A count left too high (a waiter
// that died) costs a NOTIFY per release, never a missed wake-up.
func (c *Client) waitAcquire(ctx context.Context, key string, o callOptions) (l *Lease, err error) {
	if !c.beginWait() {
		return nil, ErrClosed
	}
	defer c.endWait() // last: after the registration was withdrawn
	var lastHeld *HeldError
	// Subscribe once, before the first attempt, so a release between an
	// attempt and the wait is not missed and the waiter keeps its place.
	wake, listening := c.ln.subscribe(ctx, notifyLease, o.namespace, key)
	defer c.ln.unsubscribe(notifyLease, o.namespace, key, wake)
	var (
		reg      int64     // this waiter's registration (lease_waiters); 0: none
		regKey   string    // reg, as the key of its grant notifications
		regUntil time.Time // the registration lasts until then at least (local clock)
		// regEpoch is the server's epoch when reg was made (see
		// sqlAcquireWait): a
		// statement acting on reg by its id requires it unchanged (ids
		// are reissued after a crash: see sqlAcquireWait). regGen is the
		// hub's connection (listenHub.gen) before the newest statement
		// that found reg in place was sent: a grant's wake-up for reg is
		// trusted only if it came on that connection, which a restart of
		// the server ends.
		regEpoch time.Time
		regGen   uint64
		// regExact is reg's expiry as last written (database clock, to
		// the µs): with its id it names reg alone, across a restart too,
		// for its renewal and withdrawal (see sqlAcquireWait).
		regExact time.Time
		// regSent is when the newest statement that found reg in place
		// was sent (its registration, a renewal): any grant to reg was
		// made after it (see takeGrant).
		regSent time.Time
		// regGone: a renewal found reg gone. Unless a grant to it is
		// read, it is gone for good (lost with a crash of the server,
		// its commit not flushed; or granted, and that grant expired or
		// was taken over unread): the waiter registers again.
		regGone bool
	)
	setReg := func(id int64, until, epoch time.Time) {
		if regKey != "" {
			c.ln.drop(notifyLeaseGrant, o.namespace, regKey, wake)
			regKey = ""
		}
		reg, regUntil, regEpoch = id, until, epoch
		if id != 0 {
			regKey = strconv.FormatInt(id, 10)
			c.ln.subscribeTo(notifyLeaseGrant, o.namespace, regKey, wake)
		}
	}
	defer func() {
		if err != nil && lastHeld != nil && ctx.Err() != nil && !errors.Is(err, ErrNotAcquired) {
			// Cut short by ctx where the wait did not say who held the
			// key (a statement in flight, a database outage): someone
			// did, and the error matches ErrNotAcquired, as documented.
			err = fmt.Errorf("%w (last holder: %w)", err, lastHeld)
		}
		if reg != 0 && l == nil {
			w := c.leaseWaitWithdraw(ctx, o, key, reg, regEpoch, regExact)
			// Said as a Turn's withdrawn ticket is: the error alone
			// answers "is my place still held, does the key wait for
			// me?". So is it when Close woke the wait (checkOpen's bare
			// ErrClosed; Close waits for the withdrawal within its
			// deadline): a bare "client closed" did not say whether the
			// next release would hand the key to nobody. An ErrClosed
			// that says already what became of a grant (closedGivenBack)
			// is left as it is, and a registration found gone (expired,
			// or granted and that grant ended) is not news.
			closed := err == ErrClosed // checkOpen's own, unwrapped: nothing said yet
			if said := w.say(o.ttl, ctx.Err() != nil || closed); said != "" && err != nil && (closed || !errors.Is(err, ErrClosed)) {
				err = fmt.Errorf("%w (%s)", err, said)
			}
		}
		setReg(0, time.Time{}, time.Time{})
	}()
	recheck := firstRecheck // backoff while registering finds the row locked
	for {
		if err := c.checkOpen(); err != nil {
			return nil, err
		}
		if reg != 0 {
			g, err := c.takeGrant(ctx, key, o, regKey, regSent, regGen)
			if g == nil && err == nil {
				bctx, cancel := boundStmt(ctx, o.ttl)
				g, err = c.readGrant(bctx, key, o, reg, regEpoch)
				cancel()
			}
			if err == nil && g != nil {
				setReg(0, time.Time{}, time.Time{}) // the grant withdrew the registration
				return g, nil
			}
			if err != nil && !transient(err) && !stalled(ctx, err) {
				return nil, err
			}
			if err == nil && regGone {
				// Nothing will ever grant reg: without a registration of
				// its own, the waiter would re-check, renew and find it
				// gone again in a loop with no sleep until the key is
				// free, and have no place in line.
				setReg(0, time.Time{}, time.Time{})
				regGone = false
			}
		}
		gen := c.ln.gen()
		sent := time.Now()
		bctx, cancel := boundStmt(ctx, o.ttl)
		l, held, w, err := c.tryAcquireWait(bctx, key, o, reg, regEpoch)
		cancel()
		if err != nil && (transient(err) || stalled(ctx, err)) && ctx.Err() == nil {
			// The database is unreachable for now (restarting, network):
			// a waiter keeps waiting, re-checking every WaitRecheck.
			c.cfg.Logger.Warn("sentinel: waiting for lease: database unreachable; retrying", "key", key, "err", err)
			t := time.NewTimer(c.cfg.WaitRecheck)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, fmt.Errorf("sentinel: waiting for lease %q/%q: %w (last error: %w)", o.namespace, key, context.Cause(ctx), err)
			case <-t.C:
			case <-wake:
				// Close (which then finds the client closed at the top
				// of the loop), or a listener back on a new connection:
				// the database may be back.
				t.Stop()
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		if l != nil {
			setReg(0, time.Time{}, time.Time{}) // withdrawn by the grant
			return l, nil
		}
		lastHeld = held
		if w.waiter != 0 {
			setReg(w.waiter, sent.Add(w.left), w.epoch)
			regSent, regGen, regExact = sent, gen, w.until
			if !w.live {
				continue // released meanwhile: re-check now
			}
			// A release may have granted it before we listened on it:
			// its wake-up is then kept by the hub and wakes us now
			// (listener.subscribeTo). Without a listener, read.
			if !listening {
				bctx, cancel := boundStmt(ctx, o.ttl)
				g, err := c.readGrant(bctx, key, o, reg, regEpoch)
				cancel()
				if err == nil && g != nil {
					setReg(0, time.Time{}, time.Time{})
					return g, nil
				}
			}
		}
		// Re-check at the holder's expiry as the database computed it; a
		// notification may wake us sooner. Without a listener, re-check
		// at least every WaitRecheck.
		delay := time.Millisecond
		if held.Holder != nil {
			delay = time.Until(held.Holder.localExpiry) + time.Millisecond
		}
		if !listening || held.Holder == nil {
			delay = min(delay, c.cfg.WaitRecheck)
		}
		if reg != 0 {
			// Renew the registration before a third of the TTL is left,
			// and wake up in time to renew it again; at once when the
			// hub listens on a new connection (the server may have
			// restarted: the renewal then finds the registration by its
			// exact expiry, and carries it over to the new epoch).
			if time.Until(regUntil) < 2*o.ttl/3 || c.ln.gen() != regGen {
				renewGen := c.ln.gen()
				renewSent := time.Now()
				bctx, cancel := boundStmt(ctx, o.ttl)
				left, exact, epoch, ok, err := c.leaseWaitRenew(bctx, o, key, reg, regEpoch, regExact)
				cancel()
				switch {
				case err != nil && ctx.Err() != nil:
					return nil, fmt.Errorf("sentinel: waiting for lease %q/%q: %w (last holder: %w)", o.namespace, key, context.Cause(ctx), lastHeld)
				case err == nil && !ok:
					regGone = true
					continue // gone: granted meanwhile (read it now), or lost
				case err == nil:
					regUntil, regSent, regGen = renewSent.Add(left), renewSent, renewGen
					regExact, regEpoch = exact, epoch
				}
			}
			delay = min(delay, time.Until(regUntil)-o.ttl/3)
		}
		delay, recheck = waitDelay(delay, recheck, c.cfg.WaitRecheck, reg == 0 && held.Holder != nil && listening)
		t := time.NewTimer(delay)
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("sentinel: waiting for lease %q/%q: %w (last holder: %w)", o.namespace, key, context.Cause(ctx), lastHeld)
		}
		t.Stop()
		listening = c.ln.listening()
	}
}

// boundStmt bounds one statement of a wait (Lease with WithWait, Turn)
// by the TTL of the registration or ticket it keeps (at least
// minStmtBound). On a connection whose path vanished without a word (a
// partition, a NAT or firewall that forgot the flow) and no TCP timeouts
// set, pgx's defaults, a statement otherwise waits for TCP to give up (15
// minutes on Linux), or for a retransmission that can come up to twice
// the outage after the path returns, while the wait could go on over
// another connection and what it keeps expires anyway. A statement cut
// off by the bound is retried as one that met an unreachable database
// (stalled); pgx closes its connection.
func boundStmt(ctx context.Context, ttl time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, max(ttl, minStmtBound))
}

// minStmtBound is the least time a waiting statement is given (boundStmt).
const minStmtBound = time.Second

// stalled reports whether err ended a statement bounded by boundStmt while
// the caller's ctx goes on (a statement that may outlive its context,
// graceCtx, ends canceled).
func stalled(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled))
}

// firstRecheck is the first re-check after an attempt to register found
// the key's row locked (waitDelay).
const firstRecheck = time.Millisecond

// waitDelay returns how long waitAcquire sleeps before its next attempt,
// given delay (until the holder's expiry, a renewal of the registration,
// or WaitRecheck), and the next registration backoff after recheck.
//
// unregistered: the attempt found the key held but could not register
// (its row was locked): nothing will notify the caller, so it re-checks
// soon, backing off from firstRecheck to maxRecheck. The row's lockers
// are single statements (a release, a grant, a renewal, another
// registration), so a millisecond usually suffices. It used to start at
// 10 ms: a holder that released and at once waited for the key again
// often found it locked by the next holder's release, and every 10 ms
// asleep let several turns pass it (bench, 8 and 32 contenders on one
// key, three interleaved runs, medians: worst wait 656 → 130 ms and
// 1.34 s → 181 ms, pairs overtaken 11.0 → 3.3 and 20.6 → 11.4 thousand,
// turns/s 645 → 716 and 577 → 660).
//
// Otherwise the sleep is at least 10 ms: a holder whose expiry already
// passed means the row is locked by another transaction (a competing
// grant, a fencing check), so back off a little instead of spinning; and
// the backoff starts over.
func waitDelay(delay, recheck, maxRecheck time.Duration, unregistered bool) (sleep, next time.Duration) {
	if unregistered {
		return min(max(delay, firstRecheck), recheck), min(recheck*2, maxRecheck)
	}
	return max(delay, 10*time.Millisecond), firstRecheck
}

// waitResult is what sqlAcquireWait says about a registration.
type waitResult struct {
	live   bool          // the key was still held once its row was locked
	waiter int64         // the registration made (0: none)
	left   time.Duration // its time left
	epoch  time.Time     // the server's epoch (sqlAcquireWait: when its statistics were last reset)
	until  time.Time     // the registration's exact expiry (database clock)
}

// leaseWaitRenew renews registration reg for the waiter's TTL. ok is false
// when it is gone (granted).
func (c *Client) leaseWaitRenew(ctx context.Context, o callOptions, key string, reg int64, epoch, exact time.Time) (left time.Duration,
	newExact, newEpoch time.Time, ok bool, err error) {
	err = c.queryRow(ctx, c.sql.waitRenew, o.namespace, key, reg, us(o.ttl), epoch, exact).Scan(&left, &newExact, &newEpoch)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, time.Time{}, time.Time{}, false, nil
	}
	if err != nil {
		return 0, time.Time{}, time.Time{}, false, c.wrapErr(fmt.Sprintf("wait for lease %q/%q", o.namespace, key), err)
	}
	return left, newExact, newEpoch, true, nil
}

// leaseWaitWithdraw withdraws registration reg of a waiter that gives up.
// When it is already gone, a release may have granted the lease to it: that
// grant is read and released, which hands the key to the next waiter.
// These statements are retried after a transient error (a dropped
// connection), within Config.ReleaseTimeout (retryGiveBack): one attempt
// each used to leave, after one dropped connection, the registration in
// place (the next release then granted the key to it) or the grant made
// meanwhile, the key held by nobody until it expired, a TTL. A withdrawal
// that still fails is logged; a grant whose release still fails ends as a
// failed give-back (logged, Observer.ReleaseFailed).
func (c *Client) leaseWaitWithdraw(ctx context.Context, o callOptions, key string, reg int64, epoch, exact time.Time) (w withdrawal) {
	var g *Lease // the grant read, once read
	// Nothing granted to reg outlives a TTL from now: the registration,
	// last renewed before now, expires by then, and a grant to it made
	// before now too.
	expiry := time.Now().Add(o.ttl)
	err := c.retryGiveBack(ctx, expiry, "withdrawing a lease wait", func(rctx context.Context) error {
		if g == nil {
			var was bool
			if err := c.queryRow(rctx, c.sql.waitLeave, o.namespace, key, reg, epoch, exact).Scan(&was); err != nil || was {
				w.withdrawn = was
				return err
			}
			var err error
			if g, err = c.readGrant(rctx, key, o, reg, epoch); err != nil || g == nil {
				return err
			}
		}
		_, err := c.releaseRow(rctx, g.ns, g.key, g.owner, g.token)
		return err
	}, "namespace", o.namespace, "key", key, "waiter", reg)
	w.granted, w.err = g != nil, err
	switch {
	case g != nil && err == nil:
		g.end(ErrReleased)
	case g != nil:
		g.giveBackFailed(err)
	case err != nil && !errors.Is(err, ErrClosed): // a grant given back as the client closed: holdGrant said so
		c.cfg.Logger.Warn("sentinel: withdrawing a lease wait failed; a release may grant the key to it, held by nobody until it expires, within its TTL",
			"namespace", o.namespace, "key", key, "waiter", reg, "ttl", o.ttl, "err", err)
	}
	return w
}

// withdrawal is what leaseWaitWithdraw did with a registration.
type withdrawal struct {
	withdrawn bool  // the registration was found in place and deleted
	granted   bool  // it was gone: a release had granted the key to it, and the grant was read
	err       error // the last statement's error: nil when done
}

// say is what a waiter's error adds about its registration, "" when
// nothing: a registration found gone without a grant (expired, or granted
// and that grant ended) is no news. ended: the wait ended with the
// caller's ctx; a withdrawal that went as it should is said only then (a
// failed one is always said, as is a grant).
func (w withdrawal) say(ttl time.Duration, ended bool) string {
	switch {
	case w.granted && w.err == nil:
		return "the waiter was registered and a release granted it the key meanwhile: released, so the key passes on"
	case w.granted:
		return fmt.Sprintf("the waiter was registered and a release granted it the key meanwhile; releasing it failed, so it is free only when it expires, within its TTL (%s): %v", ttl, w.err)
	case w.err != nil && !errors.Is(w.err, ErrClosed):
		return fmt.Sprintf("the waiter was registered; withdrawing it failed, so a release may grant the key to it, held by nobody until it expires, within its TTL (%s): %v", ttl, w.err)
	case w.withdrawn && ended:
		return "the waiter was registered: registration withdrawn"
	}
	return ""
}

// takeGrant returns the lease a release handed to registration regKey,
// from what the grant's wake-up carried (kept by the process's hub, see
// sqlRelease), without a statement; nil when none was kept, or when it
// cannot be trusted as is (then the caller reads the grant: readGrant).
//
// Its local deadline counts the grant's TTL (the waiter's own, written in
// its registration) from regSent, the send time of a statement that found
// the registration in place, so executed before the grant, which deleted
// it: the grant's expiry, counted from the grant on the database clock, is
// later, and the deadline errs on the early side, as one counted from a
// read's send time does. A registration found in place too long ago (less
// than half the TTL would be left) or a grant with a hard expiry is read
// instead.
func (c *Client) takeGrant(ctx context.Context, key string, o callOptions, regKey string, regSent time.Time, regGen uint64) (*Lease, error) {
	if c.ln.gen() != regGen {
		// The hub reconnected since: the server may have restarted, and
		// a wake-up for this id be another registration's (ids are
		// reissued after a crash). Left kept for it; read instead.
		return nil, nil
	}
	data, ok := c.ln.takeGrant(notifyLeaseGrant, o.namespace, regKey)
	if !ok || regSent.IsZero() || time.Until(regSent.Add(o.ttl)) < o.ttl/2 {
		return nil, nil
	}
	f := strings.Split(data, "/")
	if len(f) != 4 || f[3] != "" {
		return nil, nil // an older payload, or a hard expiry: read it
	}
	token, err1 := strconv.ParseInt(f[0], 10, 64)
	acquired, err2 := strconv.ParseInt(f[1], 10, 64)
	expires, err3 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || token <= 0 {
		return nil, nil
	}
	return c.holdGrant(ctx, key, o, token, time.UnixMicro(acquired), regSent, o.ttl, time.UnixMicro(expires), time.Time{})
}

// readGrant reads a grant a release made to registration reg
// (sqlLeaseGrant) and, if there is one, returns the lease, renewed from now
// on. The deadline counts from this read's send time and the time left it
// measured on the database clock, after the grant.
func (c *Client) readGrant(ctx context.Context, key string, o callOptions, reg int64, epoch time.Time) (*Lease, error) {
	sent := time.Now()
	var (
		token     int64
		acquired  time.Time
		expires   time.Time
		hard      *time.Time
		remaining time.Duration
	)
	err := c.queryRow(ctx, c.sql.grant, o.namespace, key, c.cfg.Owner, reg, epoch).Scan(&token, &acquired, &expires, &hard, &remaining)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, c.wrapErr(fmt.Sprintf("acquire lease %q/%q", o.namespace, key), err)
	}
	var hardAt time.Time
	if hard != nil {
		hardAt = *hard
	}
	return c.holdGrant(ctx, key, o, token, acquired, sent, remaining, expires, hardAt)
}

// holdGrant makes the lease a release handed over (token), renewed from
// now on, its deadline remaining after sent; a client closing meanwhile
// gives it back, and so does a caller whose ctx ended: the grant and the
// end of ctx may reach the waiter together (its wait's select then picks
// either), and a Lease whose ctx ended returns ctx's error, never a
// lease. The release hands the key on to the next waiter at once.
func (c *Client) holdGrant(ctx context.Context, key string, o callOptions, token int64, acquired, sent time.Time,
	remaining time.Duration, expires, hardAt time.Time) (*Lease, error) {
	l := c.newLease(kindLease, o.namespace, key, token, o.ttl)
	l.acquiredAt = acquired
	if ctx.Err() != nil {
		rerr := c.giveBackLease(ctx, l, sent.Add(remaining))
		return nil, fmt.Errorf("sentinel: waiting for lease %q/%q: %w (%s)", o.namespace, key, context.Cause(ctx),
			givenBack("handed over", "released", rerr, o.ttl))
	}
	if !c.hb.add(l, sent, remaining, expires, hardAt) {
		if rerr := c.giveBackLease(ctx, l, sent.Add(remaining)); rerr != nil {
			return nil, closedGivenBack(fmt.Sprintf("waiting for lease %q/%q", o.namespace, key), "handed over", rerr, o.ttl)
		}
		return nil, ErrClosed
	}
	c.cfg.Logger.Debug("sentinel: lease handed over", "namespace", o.namespace, "key", key, "token", token)
	return l, nil
}

// tryAcquireWait is tryAcquire for a waiter (sqlAcquireWait): when the key
// is held it registers the caller unless reg (its registration) is set; a
// grant withdraws reg.
func (c *Client) tryAcquireWait(ctx context.Context, key string, o callOptions, reg int64, regEpoch time.Time) (*Lease, *HeldError, waitResult, error) {
	var w waitResult
	leaving := 0
	if reg != 0 {
		leaving = 1
	}
	l, held, err := c.acquireRow(ctx, key, o, func(sctx context.Context, dest ...any) error {
		return c.queryRow(sctx, c.sql.acqWait, o.namespace, key, c.cfg.Owner, c.cfg.Host, c.cfg.PID,
			us(o.ttl), us(o.hardTTL), o.force, leaving, reg == 0, reg, c.ln.direct(), regEpoch).Scan(append(dest, &w.live, &w.waiter, &w.left, &w.epoch, &w.until)...)
	})
	return l, held, w, err
}
