package sentinel

// This file: the Elector's run loop: Run (campaign, follow, register as waiting, sleep), lead (one term, its release), and the member row (ensureMember, rejoinAsync, leave).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Run campaigns, leads and follows until ctx ends, the client is closed or
// a callback panics; then it gives up leadership (after OnElected returned)
// and removes its member row. It rides out database outages, retrying
// every Config.WaitRecheck. It returns nil when ctx ended (but the error
// of the release when it led then and that release failed: the term stays
// live until it expires, and Resign retries the release), ErrClosed when
// the client was closed (joined with that release error when Close ended
// a term whose release failed, or when a term won as the client closed
// could not be given back: retried after a dropped connection within
// Config.ReleaseTimeout, it stays live until it expires), a
// *CallbackPanicError when a callback panicked,
// and an error matching ErrNotMigrated at once, without retrying, when the
// client's schema has no Sentinel tables (a wrong Config.Schema, or
// Migrate never ran). One Run at a time per client, namespace and group.
// A nil ctx is refused (ErrInvalid) before Run joins the group.
//
// Run returns only after every callback it started has returned:
// OnElected, and the OnPoll, OnNewLeader and OnDemoted calls already
// queued (OnDemoted of the last term included). Those three run one at a
// time on a goroutine of their own, so one that blocks delays the others
// and, once ctx ended, keeps Run from returning until it returns.
//
// Wait for Run to return before Client.Close and before the process exits
// (run it on main's goroutine, or receive its error from a channel): a
// process that exits while Run is still giving the term up leaves the term
// live, and the followers take over only when it expires, a TTL later
// instead of milliseconds. Client.Close waits for the term's release
// (within its deadline), not for OnDemoted, nor for Run's removal of its
// member row. See ExampleElector_Run.
func (e *Elector) Run(ctx context.Context) (err error) {
	if err := checkCtx("Elector.Run", ctx); err != nil {
		return err
	}
	if err := e.c.checkOpen(); err != nil {
		return err
	}
	// This Elector first: a second Run of the same Elector is told so,
	// not that some other elector of the group runs in this client.
	if !e.running.CompareAndSwap(false, true) {
		return invalid("elector", "Run of this elector for %q/%q is already running; call Run once "+
			"(to restart it, cancel its ctx and wait for it to return first)", e.ns, e.group)
	}
	defer e.running.Store(false)
	id := electorID{e.c, e.ns, e.group}
	if _, busy := runningElectors.LoadOrStore(id, struct{}{}); busy {
		return invalid("elector", "another elector for %q/%q is already running in this client; use one per client and group", e.ns, e.group)
	}
	defer runningElectors.Delete(id)

	e.mu.Lock()
	e.panicErr, e.panicked = nil, make(chan struct{})
	e.mu.Unlock()
	cb := newCallbacks(e)
	defer func() {
		cb.stop()
		// A callback that panicked while Run was stopping (OnDemoted of
		// the last term, say) is reported, not swallowed.
		e.mu.Lock()
		p := e.panicErr
		e.mu.Unlock()
		if p != nil && err == nil {
			err = p
		}
	}()

	wake, _ := e.c.ln.subscribe(ctx, notifyElection, e.ns, e.group)
	defer e.c.ln.unsubscribe(notifyElection, e.ns, e.group, wake)

	defer e.leave()
	var seenTerm int64
	lockedBackoff := 10 * time.Millisecond // see the follower's sleep below
	// A resignation notifies only while some elector of the group is
	// registered as waiting (leaders.waiting_until, migration 7): a
	// transaction that calls NOTIFY serializes its commit on a
	// database-wide lock. A follower of a live leader registers
	// (sqlElectionWait) before it sleeps, and never misses a wake-up:
	//
	//   - It LISTENs before its first campaign (subscribe), so every
	//     notification sent after its registration commits reaches it.
	//   - The registration and a resignation both update the group's row,
	//     so its row lock orders them. If the registration comes first,
	//     the resignation's UPDATE is made from the version it wrote (read
	//     committed re-reads the newest version of a row it updates) and
	//     its RETURNING sees the registration: it notifies. If the
	//     resignation comes first, the registration, which locks the row
	//     after it committed, reads the term expired (or a newer term) and
	//     the follower campaigns at once.
	//   - A registration that finds the row locked (a renewal, a
	//     resignation, a takeover under way) waits for that lock in the
	//     server, bounded (waitJoin), and registers once the holder
	//     committed, reading what it committed (as above). One that waited
	//     in vain registers nothing; the follower re-checks soon, backing
	//     off up to WaitRecheck, and registers again.
	//   - A registration lasts one TTL past the term's expiry at the time,
	//     longer than the sleep it covers (until that expiry), and the
	//     follower registers again before any sleep it does not cover. One
	//     left by an elector that stopped or died costs a NOTIFY per
	//     resignation until it expires, never a missed wake-up; there is no
	//     count to take back, so none can go wrong.
	var waiting time.Time // registered as waiting until then at least (local clock)
	var regTerm int64     // the term the registration was made under
	var regNamed bool     // the registration named this elector the successor
	var regSent time.Time // when the newest registration that named it was sent (see takeTerm)
	var grantKey string   // the member token this elector listens on for a handed-over term
	defer func() {
		if grantKey != "" {
			e.c.ln.drop(notifyElectionGrant, e.ns, grantKey, wake)
		}
	}()
	waitBackoff := 10 * time.Millisecond
	for {
		if err := e.stopReason(ctx); err != nil {
			return filterCtx(ctx, err)
		}
		// Every statement is bounded by the TTL: one stuck on a dead
		// connection must not keep this elector out of the next election.
		jctx, cancel := context.WithTimeout(ctx, e.ttl)
		err := e.ensureMember(jctx)
		cancel()
		if err != nil {
			if e.stopReason(ctx) != nil {
				continue
			}
			if errors.Is(err, ErrNotMigrated) {
				return err // no retry will create the tables
			}
			e.c.cfg.Logger.Warn("sentinel: elector: joining failed; retrying", "group", e.group, "err", err)
			e.sleep(ctx, wake, e.c.cfg.WaitRecheck)
			continue
		}
		e.mu.Lock()
		mayLead := !time.Now().Before(e.holdOff)
		holdOff := e.holdOff
		member := e.member
		e.mu.Unlock()
		if regNamed && mayLead && grantKey != "" {
			// Woken by a resignation that named this elector: lead from
			// the grant its wake-up carried, without reading it.
			if res, ok := e.takeTerm(grantKey, regSent, max(regTerm, seenTerm)); ok {
				regNamed = false // the grant used the registration up
				seenTerm, lockedBackoff = res.leader.Term, 10*time.Millisecond
				if err := e.lead(ctx, res, cb); err != nil {
					return err
				}
				continue
			}
		}
		cctx, cancel := context.WithTimeout(ctx, e.ttl)
		res, err := e.campaign(cctx, mayLead, member.token)
		cancel()
		if err != nil {
			if e.stopReason(ctx) != nil {
				continue
			}
			if errors.Is(err, ErrNotMigrated) {
				return err
			}
			e.c.cfg.Logger.Warn("sentinel: elector: campaign failed; retrying", "group", e.group, "err", err)
			cb.poll()
			e.sleep(ctx, wake, e.c.cfg.WaitRecheck)
			continue
		}
		if res.acquired && ctx.Err() != nil {
			// Won by the lock wait, which Run's ctx does not cut short (see
			// campaign), after that ctx ended: given back at once, without
			// starting OnElected (a failed give-back is logged and reported
			// as a failed release; the term is free when it expires).
			l := e.c.newLease(kindLeader, e.ns, e.group, res.leader.Term, e.ttl)
			_ = e.c.giveBack(context.Background(), l, res.sent.Add(res.remaining), func(ctx context.Context) error {
				return e.resign(ctx, l.token)
			})
			continue
		}
		if res.acquired {
			seenTerm, lockedBackoff = res.leader.Term, 10*time.Millisecond
			cb.poll()
			if err := e.lead(ctx, res, cb); err != nil {
				return err
			}
			continue
		}
		// Whether another elector leads is decided by the term, not the
		// Owner: a term this elector did not lead is another's, even one
		// of a client configured with the same Owner.
		e.mu.Lock()
		sawOther := res.leader != nil && res.leader.Term != e.led
		if sawOther {
			// Another elector leads, or led since this one's last term
			// (its row may be released already): a resignation's hold-off
			// has done its job, and this elector may take over when that
			// one goes.
			e.holdOff = time.Time{}
		}
		e.mu.Unlock()
		other := sawOther && res.live
		if res.leader != nil && res.leader.Term != seenTerm && res.live {
			seenTerm = res.leader.Term
			if other {
				cb.newLeader(*res.leader)
			}
		}
		cb.poll()
		// Sleep until the leader's expiry as the database computed it; a
		// release notification wakes us sooner.
		var delay time.Duration
		switch {
		case res.leader == nil: // no row, and we may not lead yet
			delay = time.Until(holdOff)
		case res.live:
			delay = time.Until(res.localExpiry) + time.Millisecond
		case !mayLead && sawOther:
			// Another elector was elected (and has let go) since this one
			// resigned: the hold-off is over, campaign again now. Not
			// registered as waiting first: that round trip covered no
			// sleep, and held up the group's next term by as much.
			lockedBackoff = 10 * time.Millisecond
			continue
		case !mayLead:
			// No live leader (our own released row, say), but we may not
			// lead before the hold-off ends: sleep until then, or until
			// another elector's release wakes us. (This case used to
			// read as "locked" and poll every 10 ms.)
			delay = time.Until(holdOff)
		default:
			// Expired but locked by another transaction for longer than
			// the campaign waited for it (campaignLockWait: a guarded
			// transaction of the old term), or a competing campaign's: no
			// notification marks its end, so back off, doubling up to a
			// tenth of the TTL, rather than poll.
			e.lockedBackoffs.Add(1)
			delay = lockedBackoff
			lockedBackoff = min(2*lockedBackoff, max(e.ttl/10, 10*time.Millisecond))
		}
		if res.live || !mayLead {
			lockedBackoff = 10 * time.Millisecond
		}
		if !mayLead {
			delay = min(delay, time.Until(holdOff))
		}
		listening := e.c.ln.listening()
		if !listening {
			delay = min(delay, e.c.cfg.WaitRecheck)
		}
		e.mu.Lock()
		mayNow := !time.Now().Before(e.holdOff)
		var memberTok int64
		if e.member != nil {
			memberTok = e.member.token
		}
		e.mu.Unlock()
		// Held off with no live leader (its own released term, say): it
		// registers as waiting on that row too, so that a later release
		// wakes it. Another elector may take the term and resign before
		// the hold-off ends, with nobody else registered; unregistered,
		// this one slept until its hold-off ended and the group stayed
		// leaderless that long.
		heldOff := !mayLead && !res.live && res.leader != nil
		if listening && (res.live || heldOff) && (time.Until(waiting) <= delay || res.leader.Term != regTerm || (mayNow && !regNamed)) {
			// Register as waiting, so that a resignation notifies (see
			// the comment above the loop); a registration that still
			// covers this sleep, made under this term, is kept. An
			// elector that may lead also names itself the successor, so
			// the resignation hands it the term (sqlResign); it listens
			// for that grant, by its member token, before registering.
			if k := strconv.FormatInt(memberTok, 10); memberTok != 0 && k != grantKey {
				if grantKey != "" {
					e.c.ln.drop(notifyElectionGrant, e.ns, grantKey, wake)
				}
				e.c.ln.subscribeTo(notifyElectionGrant, e.ns, k, wake)
				grantKey = k
			}
			term, live, until, sent, in := e.waitJoin(ctx, memberTok, mayNow)
			switch {
			case in && (live != res.live || term != res.leader.Term):
				continue // resigned, taken over or elected meanwhile: campaign now
			case in:
				waiting, waitBackoff = until, 10*time.Millisecond
				regTerm, regNamed = term, mayNow && memberTok != 0
				if regNamed {
					regSent = sent
				}
				delay = min(delay, time.Until(waiting))
			default:
				// Not registered (the row was locked, or an error):
				// nothing may notify; re-check soon, backing off.
				e.waitBackoffs.Add(1)
				delay = min(delay, waitBackoff)
				waitBackoff = min(2*waitBackoff, e.c.cfg.WaitRecheck)
			}
		}
		e.sleep(ctx, wake, max(delay, time.Millisecond))
	}
}

// memberToken is this run's member token, 0 before joining.
func (e *Elector) memberToken() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.member == nil {
		return 0
	}
	return e.member.token
}

// waitJoin registers this elector as waiting for the group's hand-off
// (sqlElectionWait). in says whether it was registered (not when the row
// was locked or missing, or on an error); term and live are the group's
// term then and whether it was unexpired; until is when the registration
// ends at the earliest, by the local clock; sent is when the statement
// was sent.
//
// A registration that finds the row locked by another transaction (a
// renewal, another follower's registration, a resignation committing)
// waits for that lock inside the server, for campaignLockWait at most, and
// registers again in the same round trip (sqlElectionWaitLock), as a
// campaign does for an expired row: unregistered, the follower backed off
// 10 ms, doubling up to WaitRecheck, and a resignation made meanwhile,
// seeing no registration, woke nobody, so the follower slept out the rest
// of that backoff before it campaigned. A wait that times out (or fails)
// registers nothing, and Run backs off as before.
func (e *Elector) waitJoin(ctx context.Context, member int64, mayLead bool) (term int64, live bool, until, sent time.Time, in bool) {
	wctx, cancel := context.WithTimeout(ctx, e.ttl)
	defer cancel()
	args := []any{e.ns, e.group, us(e.ttl), e.c.cfg.Owner, member, e.c.cfg.Host, e.c.cfg.PID,
		e.opts.AppVersion, mayLead && member != 0, e.c.ln.direct()}
	sent = time.Now()
	var left time.Duration
	err := e.c.queryRow(wctx, e.sql.wait, args...).Scan(&term, &live, &left)
	if errors.Is(err, pgx.ErrNoRows) {
		// Locked (or no row: the lock statement then returns at once).
		sent = time.Now()
		b := &pgx.Batch{}
		b.Queue("SELECT pg_catalog.set_config('lock_timeout', $1, true)", campaignLockTimeout(e.ttl))
		b.Queue(e.sql.waitLock, e.ns, e.group)
		b.Queue(e.sql.wait, args...)
		br := e.c.pool.SendBatch(wctx, b)
		_, err = br.Exec()
		if err == nil {
			_, err = br.Exec()
		}
		if err == nil {
			err = br.QueryRow().Scan(&term, &live, &left)
		}
		if cerr := br.Close(); err == nil {
			err = cerr // the commit of the batch's transaction
		}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			// Timed out (55P03: a long transaction holds the row) or
			// failed: the transaction rolled back whole; Run backs off.
			e.c.cfg.Logger.Debug("sentinel: elector: waiting for the leadership row's lock to register as waiting ended; backing off",
				"group", e.group, "err", err)
			return 0, false, time.Time{}, time.Time{}, false
		}
	}
	if err != nil {
		if !errors.Is(err, pgx.ErrNoRows) && ctx.Err() == nil {
			e.c.cfg.Logger.Warn("sentinel: elector: registering as waiting failed; re-checking", "group", e.group, "err", err)
		}
		return 0, false, time.Time{}, time.Time{}, false
	}
	return term, live, sent.Add(left), sent, true
}

// takeTerm returns the term a resignation handed to this elector, from what
// the grant's wake-up carried (sqlResignWake, kept by the process's hub),
// as a campaign that won it would; ok is false when none was kept or when
// it cannot be trusted as is (the caller then campaigns, which reads the
// grant).
//
// The wake-up names a committed grant of term T to member token key. It is
// trusted only when T is newer than floor (every term this elector has
// seen, registered under or led): an older one is a grant this elector
// already read, led and gave up, whose wake-up came late. Its local
// deadline counts the successor's TTL (its own, written by its
// registration) from regSent, the send time of the registration that named
// it under an older term. That statement locked the group's row until it
// committed (or found it locked and registered nothing), and a resignation
// that finds the row locked skips it and hands nothing over; a registration
// made after the grant would have seen the new term and registered under
// it (Run then campaigns, leaving regSent as it was). So the grant was made
// after regSent, and its expiry, counted on the database clock from the
// grant, is later. A
// registration sent too long ago (less than half the TTL would be left) is
// read instead, as a lease waiter's is (Client.takeGrant).
func (e *Elector) takeTerm(key string, regSent time.Time, floor int64) (campaignResult, bool) {
	data, ok := e.c.ln.takeGrant(notifyElectionGrant, e.ns, key)
	if !ok || regSent.IsZero() || time.Until(regSent.Add(e.ttl)) < e.ttl/2 {
		return campaignResult{}, false
	}
	f := strings.Split(data, "/")
	if len(f) != 3 {
		return campaignResult{}, false
	}
	term, err1 := strconv.ParseInt(f[0], 10, 64)
	elected, err2 := strconv.ParseInt(f[1], 10, 64)
	expires, err3 := strconv.ParseInt(f[2], 10, 64)
	e.mu.Lock()
	floor = max(floor, e.led)
	e.mu.Unlock()
	if err1 != nil || err2 != nil || err3 != nil || term <= floor {
		return campaignResult{}, false
	}
	l := &Leader{Namespace: e.ns, Group: e.group, Owner: e.c.cfg.Owner, Host: e.c.cfg.Host, PID: e.c.cfg.PID,
		AppVersion: e.opts.AppVersion, Term: term, ElectedAt: time.UnixMicro(elected), ExpiresAt: time.UnixMicro(expires)}
	return campaignResult{acquired: true, live: true, leader: l, remaining: e.ttl,
		localExpiry: regSent.Add(e.ttl), sent: regSent}, true
}

func filterCtx(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil
	}
	return err
}

// stopReason says why Run must stop, or nil.
func (e *Elector) stopReason(ctx context.Context) error {
	e.mu.Lock()
	p := e.panicErr
	e.mu.Unlock()
	switch {
	case p != nil:
		return p
	case e.c.checkOpen() != nil:
		return ErrClosed
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return nil
}

func (e *Elector) sleep(ctx context.Context, wake <-chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	e.mu.Lock()
	panicked := e.panicked
	var memberDone <-chan struct{}
	if e.member != nil && e.member.ended() == nil { // a dead one would wake us at once, forever
		memberDone = e.member.Done()
	}
	e.mu.Unlock()
	select {
	case <-wake:
	case <-t.C:
	case <-ctx.Done():
	case <-panicked:
	case <-memberDone:
	}
}

type campaignResult struct {
	acquired    bool
	live        bool // the leader row is unexpired
	leader      *Leader
	remaining   time.Duration
	localExpiry time.Time
	sent        time.Time
}

// campaign runs one election cycle (sqlCampaign). When it finds the
// group's row expired and cannot take it (another transaction holds it:
// one that is committing as the previous term ends, most often), it waits
// for that row's lock inside the server, for campaignLockWait at most, and
// campaigns again in the same round trip (sqlCampaignLock): the follower
// takes the term as soon as the holder commits, rather than after a
// backoff sleep that no event cuts short. A wait that times out (or fails)
// returns the first campaign's result, and Run backs off as before.
func (e *Elector) campaign(ctx context.Context, mayLead bool, memberToken int64) (campaignResult, error) {
	args := []any{e.ns, e.group, e.c.cfg.Owner, e.c.cfg.Host, e.c.cfg.PID, e.opts.AppVersion, us(e.ttl), mayLead, memberToken}
	sent := time.Now()
	r, err := e.readCampaign(sent, e.c.queryRow(ctx, e.sql.campaign, args...))
	if err != nil || !mayLead || r.acquired || r.leader == nil || r.live {
		return r, err
	}
	b := &pgx.Batch{}
	b.Queue("SELECT pg_catalog.set_config('lock_timeout', $1, true)", campaignLockTimeout(e.ttl))
	b.Queue(e.sql.campaignLock, e.ns, e.group)
	b.Queue(e.sql.campaign, args...)
	// The wait is not cut short by Run's ctx: pgx would cancel it with a
	// cancel request the server may get only after the row was freed, and
	// the abandoned statement would take a term nobody leads, for its
	// followers to wait out (a TTL). It ends within campaignLockWait
	// anyway (lock_timeout), bounded here by the TTL as every statement
	// of Run is, and Run gives back a term it won after its ctx ended.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.ttl)
	defer cancel()
	sent = time.Now()
	br := e.c.pool.SendBatch(wctx, b)
	_, werr := br.Exec()
	if werr == nil {
		_, werr = br.Exec()
	}
	var w campaignResult
	if werr == nil {
		w, werr = e.readCampaign(sent, br.QueryRow())
	}
	if cerr := br.Close(); werr == nil {
		werr = cerr // the commit of the batch's transaction
	}
	if werr != nil {
		// Timed out (55P03, lock_not_available: a long transaction holds
		// the row) or failed: the transaction rolled back whole. The first
		// campaign's result stands, and Run backs off.
		e.c.cfg.Logger.Debug("sentinel: elector: waiting for the expired leadership row's lock ended; backing off",
			"group", e.group, "err", werr)
		return r, nil
	}
	return w, nil
}

// campaignLockWait bounds the campaign's wait for an expired row's lock
// (sqlCampaignLock): a few hundred milliseconds, a quarter of the TTL for
// a short one. The transactions that hold the row as a term ends commit
// within milliseconds (tens on a slow disk); one that holds it longer is
// someone's guarded transaction of the old term, waited out with Run's
// backoff, not on a pool connection.
func campaignLockWait(ttl time.Duration) time.Duration {
	return max(min(300*time.Millisecond, ttl/4), time.Millisecond)
}

// campaignLockTimeout is campaignLockWait as lock_timeout.
func campaignLockTimeout(ttl time.Duration) string {
	return strconv.FormatInt(campaignLockWait(ttl).Milliseconds(), 10) + "ms"
}

// readCampaign reads row, a result of sqlCampaign sent at sent.
func (e *Elector) readCampaign(sent time.Time, row pgx.Row) (campaignResult, error) {
	var r campaignResult
	var l Leader
	var now time.Time
	r.sent = sent
	err := row.Scan(&r.acquired, &l.Owner, &l.Host, &l.PID, &l.AppVersion, &l.Term, &l.ElectedAt, &l.ExpiresAt, &r.remaining, &now)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, nil // no leader row yet (and we may not take it)
	}
	if err != nil {
		return r, e.c.wrapErr(fmt.Sprintf("elector %q/%q: campaign", e.ns, e.group), err)
	}
	l.Namespace, l.Group = e.ns, e.group
	r.leader = &l
	r.live = r.remaining > 0
	r.localExpiry = r.sent.Add(r.remaining)
	e.mu.Lock()
	e.lastPoll = now
	if r.acquired && l.Term <= e.led {
		// A grant read, not written (a written one mints a newer term):
		// a term handed to this member that it already led and gave up,
		// whose release failed (the row still live, term_member naming
		// it). Leading it again would report a term won twice, trusted
		// again after OnDemoted; it is waited out like a term won by a
		// campaign whose release failed. takeTerm applies the same floor.
		r.acquired = false
	}
	e.mu.Unlock()
	return r, nil
}

// ensureMember writes the member row when this run has none (or lost it).
func (e *Elector) ensureMember(ctx context.Context) error {
	e.mu.Lock()
	m := e.member
	e.mu.Unlock()
	if m != nil && m.ended() == nil {
		return nil
	}
	var prev int64
	if m != nil {
		e.c.hb.remove(m)
		prev = m.token
	}
	sent := time.Now()
	var token int64
	var started, expires time.Time
	var remaining time.Duration
	err := e.c.queryRow(ctx, e.sql.join, e.ns, e.group, e.c.cfg.Owner, e.c.cfg.Host, e.c.cfg.PID,
		e.opts.AppVersion, us(e.ttl), prev).Scan(&token, &started, &expires, &remaining)
	if errors.Is(err, pgx.ErrNoRows) {
		// Another running elector uses this Owner (or a crashed process
		// with the same Owner left its row: it expires within a TTL).
		// Sharing its member row would make the two overwrite each other;
		// wait for the row to expire instead.
		return fmt.Errorf("sentinel: elector %q/%q: another elector with Owner %q is running (its member row is live); "+
			"Owner must be unique among running clients: waiting for that row to expire", e.ns, e.group, e.c.cfg.Owner)
	}
	if err != nil {
		return e.c.wrapErr(fmt.Sprintf("elector %q/%q: join", e.ns, e.group), err)
	}
	l := e.c.newLease(kindMember, e.ns, e.group, token, e.ttl)
	if !e.c.hb.add(l, sent, remaining, expires, time.Time{}) {
		// Close began while the join was in flight: nobody would renew
		// the row. Delete it now rather than leave it listed for a TTL
		// (and a resignation hand the term to it), retried after a
		// dropped connection.
		e.removeMember(ctx, l, sent.Add(remaining))
		return ErrClosed
	}
	e.mu.Lock()
	e.member, e.started, e.lastPoll = l, started, started
	e.mu.Unlock()
	return nil
}

// rejoinAsync rewrites a lost member row without blocking the leader's
// loop: that loop must stay free to see its term end (a statement may hang
// on a dead connection for as long as the network lets it).
func (e *Elector) rejoinAsync(ctx context.Context) {
	e.mu.Lock()
	m := e.member
	busy := e.rejoining
	if busy || (m != nil && m.ended() == nil) {
		e.mu.Unlock()
		return
	}
	e.rejoining = true
	e.mu.Unlock()
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		jctx, cancel := context.WithTimeout(ctx, e.ttl)
		defer cancel()
		if err := e.ensureMember(jctx); err != nil {
			e.c.cfg.Logger.Warn("sentinel: elector: rejoining failed; retrying", "group", e.group, "err", err)
		}
		e.mu.Lock()
		e.rejoining = false
		e.mu.Unlock()
	}()
}

// leave stops renewing the member row and deletes it, giving back a term
// a resignation handed to it meanwhile (sqlLeave): then it wakes the
// followers, asleep until that term's expiry.
func (e *Elector) leave() {
	e.bg.Wait()
	e.mu.Lock()
	m := e.member
	e.member = nil
	e.mu.Unlock()
	if m == nil {
		return
	}
	e.c.hb.remove(m)
	e.removeMember(context.Background(), m, m.localExpiry())
}

// removeMember deletes member row m (sqlLeave), giving back a term a
// resignation handed to it, and ends m. expiry is when m's row expires by
// the local clock; a term handed to it lives a TTL longer at most. The
// statement is retried after a transient error (a dropped connection),
// within Config.ReleaseTimeout and that time (retryGiveBack): one attempt
// used to leave, after one dropped connection, the member row live for its
// TTL, so a resignation could hand the term to it, and a term handed to it
// already held, by nobody, every follower asleep until it expired. A
// removal that still fails is logged.
func (e *Elector) removeMember(ctx context.Context, m *Lease, expiry time.Time) {
	var gaveBack int64
	attempts := 0
	err := e.c.retryGiveBack(ctx, expiry.Add(e.ttl), "elector: removing the member row", func(ctx context.Context) error {
		attempts++
		return e.c.queryRow(ctx, e.sql.leave, e.ns, e.group, e.c.cfg.Owner, m.token).Scan(&gaveBack)
	}, "namespace", e.ns, "group", e.group, "token", m.token)
	if err != nil {
		e.c.cfg.Logger.Warn("sentinel: elector: removing member row failed; it expires by itself, and a term handed to it meanwhile with it",
			"namespace", e.ns, "group", e.group, "err", err)
	}
	// After a failed attempt, wake the followers anyway: that attempt may
	// have given a term back, its count lost with its reply.
	if gaveBack > 0 || (err == nil && attempts > 1) {
		if gaveBack > 0 {
			e.c.cfg.Logger.Info("sentinel: elector: stopping; gave back a term handed to it", "namespace", e.ns, "group", e.group)
		}
		e.c.wake("", payload(notifyElection, e.ns, e.group)) // the schema's channel: every follower of the group
	}
	m.end(ErrReleased)
}

// lead runs one term: it starts OnElected, waits for a reason to stop,
// cancels OnElected's ctx, waits for it to return, then releases the term.
// It returns an error only when Run must stop with it (a panic, ErrClosed
// for a term won while the client was closing, joined with the give-back's
// error if that failed, ErrClosed joined with the release's error for a
// term Client.Close ended whose release failed, or the failed release of a
// term given up because Run's ctx ended).
func (e *Elector) lead(ctx context.Context, res campaignResult, cb *callbacks) error {
	tm := &term{resign: make(chan struct{}), ended: make(chan struct{})}
	// Counted until its release is over, which Client.Close waits for
	// (underWay).
	termDone := func() {}
	if e.c.terms.add(nil) {
		termDone = sync.OnceFunc(e.c.terms.done)
		defer termDone()
	}
	l := e.c.newLease(kindLeader, e.ns, e.group, res.leader.Term, e.ttl)
	l.acquiredAt = res.leader.ElectedAt
	if !e.c.hb.add(l, res.sent, res.remaining, res.leader.ExpiresAt, time.Time{}) {
		// Close began while the campaign was in flight: nobody would renew
		// this term, arm its deadline or cancel OnElected. Give it back at
		// once (waking the followers) without starting OnElected, and stop.
		// A transient error (a dropped connection) is retried, within
		// ReleaseTimeout and the term's expiry; a give-back that finally
		// fails is logged and reported (Observer.ReleaseFailed) as a
		// failed release of a term: it stays live until it expires.
		if err := e.c.giveBack(context.Background(), l, res.sent.Add(res.remaining), func(ctx context.Context) error {
			return e.resign(ctx, l.token)
		}); err != nil {
			return fmt.Errorf("sentinel: elector %q/%q: %w (term %d won as the client closed; giving it back failed, so it is free only when it expires, within its TTL (%s): %w)",
				e.ns, e.group, ErrClosed, l.token, e.ttl, err)
		}
		return ErrClosed
	}
	tm.lease = l
	e.mu.Lock()
	e.term, e.led = tm, l.token
	e.unreleased = 0 // a new term begins only once an earlier one is over
	panicked := e.panicked
	e.mu.Unlock()
	e.c.cfg.Logger.Info("sentinel: elected", "namespace", e.ns, "group", e.group, "term", l.token)
	if o := e.c.observer(); o != nil && o.TermChanged != nil {
		o.TermChanged(TermChange{Namespace: e.ns, Group: e.group, Term: l.token, Leader: e.c.cfg.Owner, Self: true})
	}

	lctx, lcancel := context.WithCancelCause(context.WithValue(ctx, electedKey{}, e))
	defer lcancel(nil)
	done := make(chan struct{})
	var skipped atomic.Bool // OnElected never started: no OnDemoted either
	if e.opts.OnElected != nil {
		prev := cb.lastDemoted
		go func() {
			defer close(done)
			// The callbacks of successive terms come in order: OnDemoted
			// of the previous term (a term lost, then won again at once)
			// returns before this OnElected starts. A term that ends
			// first is skipped rather than waited on: that OnDemoted may
			// be the one that called Resign.
			if prev != nil {
				select {
				case <-prev:
				case <-lctx.Done():
					select {
					case <-prev:
					default:
						skipped.Store(true)
						return
					}
				}
			}
			defer func() {
				if v := recover(); v != nil {
					e.recordPanic("OnElected", v)
				}
			}()
			e.opts.OnElected(lctx, l.token)
		}()
	} else {
		close(done)
	}

	tick := time.NewTicker(l.renewEvery)
	defer tick.Stop()
	var cause, lost error // lost: why the term ended against this node's will (TermChange.Err)
	for cause == nil {
		select {
		case <-l.Done():
			cause = l.ended()
			if !errors.Is(cause, ErrClosed) { // Client.Close ended it: a step-down
				lost = cause
			}
		case <-tm.resign:
			cause = errResigned
		case <-ctx.Done():
			cause = context.Cause(ctx)
		case <-panicked:
			cause = errCallbackPanicked
		case <-tick.C:
			cb.poll()
			e.rejoinAsync(ctx)
		}
	}
	tm.stepping.Store(true)
	ending := fmt.Errorf("sentinel: leadership of %q/%q (term %d) ending: %w", e.ns, e.group, l.token, cause)
	if le := (*LostError)(nil); errors.As(cause, &le) && le.Kind == LossLeader && le.Token == l.token {
		ending = cause // this term's loss names the group and term itself
	}
	lcancel(ending)
	<-done // a graceful handover never overlaps the old leader's callback

	// Release, guarded by owner and term: the row is ours until it
	// expires, and OnElected has returned. A term that was taken over has
	// nothing to release; one whose local deadline passed may still be
	// released early, but trying past the row's expiry is pointless.
	// The term's end while its release is in flight (its deadline) is
	// reported once the release's outcome is known, as a Release's is
	// (Lease.releasing): no loss when the release found the term live.
	l.beginRelease()
	e.c.hb.remove(l)
	if err := l.ended(); lost == nil && err != nil && !errors.Is(err, ErrClosed) {
		lost = err // lost while stepping down (OnElected had not returned yet)
	}
	var stale *StaleTokenError
	if !errors.As(l.ended(), &stale) {
		// Stepping down: not lost. Client.Close's end is a step-down too
		// (Close gives what it holds back): its release is retried and
		// a failure reported as a Resign's is.
		prior := l.ended()
		byClose := errors.Is(prior, ErrClosed)
		held := prior == nil || byClose
		until := time.Now().Add(e.c.cfg.ReleaseTimeout)
		if !held {
			until = l.Deadline().Add(l.margin)
		}
		rctx, cancel := context.WithDeadline(context.Background(), until)
		live, err := e.resignLive(rctx, l.token)
		cancel()
		if err == nil && prior == nil {
			if live {
				l.endReleased(nil) // released live: an end meanwhile was no loss
			} else if ended := l.ended(); ended == nil || !errors.Is(ended, ErrLeaseLost) {
				// The term had expired (or been taken over) before
				// the release reached it: lost, as a Release that finds
				// its lease gone says.
				l.end(&LostError{Namespace: e.ns, Key: e.group, Token: l.token, Kind: LossLeader, Reason: reasonTakenBeforeRelease,
					Cause: &StaleTokenError{Namespace: e.ns, Key: e.group, Token: l.token}})
			}
			if ended := l.ended(); lost == nil && errors.Is(ended, ErrLeaseLost) {
				lost = ended // TermChange.Err: the term was lost, not given up
			}
		}
		if err != nil && held {
			// The statement may have committed, its reply lost: try once
			// more, which finds the term released (or releases it now).
			rctx, cancel := context.WithTimeout(context.Background(), e.c.cfg.ReleaseTimeout)
			live, err = e.resignLive(rctx, l.token)
			cancel()
			if live && prior == nil {
				l.endReleased(nil)
			}
			if err != nil {
				tm.releaseErr = e.releaseFailed(l.token, err)
				// Logged and reported (Observer.ReleaseFailed) as a failed
				// release of a lease is: no loss, the term was given up.
				failed := &LostError{Namespace: e.ns, Key: e.group, Token: l.token, Kind: LossLeader,
					Reason: "release failed; the term is no longer renewed and expires within its TTL unless the release committed",
					Cause:  err}
				if l.endAs(failed, true); l.ended() != failed {
					l.reportEnd(failed, true) // ended by Close: reported all the same
				}
			}
		}
		if err != nil && !held && rctx.Err() == nil {
			e.c.cfg.Logger.Warn("sentinel: elector: releasing leadership failed; it expires within its TTL", "group", e.group, "term", l.token, "err", err)
		}
	}
	l.end(ErrReleased)
	l.endRelease()
	if errors.Is(lost, ErrLeaseLost) {
		// Lost before the release reached it: the Resign waiting for
		// this release says so, as Lease.Release does for a lease.
		tm.lostErr = fmt.Errorf("sentinel: resign %q/%q: term %d was lost before it was released (OnElected's work may have overlapped the next leader's): %w",
			e.ns, e.group, l.token, lost)
	}
	e.mu.Lock()
	e.term = nil
	if tm.releaseErr != nil {
		e.unreleased = l.token // Resign retries it
	}
	e.mu.Unlock()
	close(tm.ended)
	termDone()  // released (or failed): not OnDemoted, which Close does not wait for
	e.bg.Wait() // a member rewrite started while leading (bounded by the TTL)
	e.c.cfg.Logger.Info("sentinel: demoted", "namespace", e.ns, "group", e.group, "term", l.token, "cause", cause)
	var p error
	if errors.Is(cause, errCallbackPanicked) {
		e.mu.Lock()
		p = e.panicErr
		e.mu.Unlock()
		lost = p
	}
	cb.demoted(l.token, !skipped.Load(), lost)
	if p == nil && tm.releaseErr != nil && e.c.checkOpen() != nil {
		// Run stops (the client closed), leaving this term live until it
		// expires: its error says so, rather than ErrClosed alone.
		return fmt.Errorf("%w; %w", ErrClosed, tm.releaseErr)
	}
	if p == nil && tm.releaseErr != nil && ctx.Err() != nil {
		// Run stops (its ctx ended), leaving this term live until it
		// expires: its error says so, rather than nil for a clean stop.
		return tm.releaseErr
	}
	return p
}

var (
	errResigned         = errors.New("sentinel: resigned")
	errCallbackPanicked = errors.New("sentinel: a callback panicked")
)

// resign ends term (sqlResign, handing it to a registered successor) and
// wakes the successor and the followers (sqlResignWake) in one round trip:
// the resignation commits durably in a transaction of its own, then the
// wake-ups go in another that does not wait for its WAL flush (wake.go),
// so the successor is woken right after the commit without the
// database's notify lock held across it.
func (e *Elector) resign(ctx context.Context, term int64) error {
	_, err := e.resignLive(ctx, term)
	return err
}

// resignLive is resign; live reports that the statement found the term
// live (unexpired on the database clock) and ended or handed it over:
// false when the term had expired or been taken over before it, or when a
// reply lost before it committed it.
func (e *Elector) resignLive(ctx context.Context, term int64) (live bool, err error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(e.sql.resign, e.ns, e.group, e.c.cfg.Owner, term, e.memberToken())
	b.Queue("COMMIT")
	wake := !e.c.dropWakes.Load()
	if wake {
		b.Queue(e.sql.resignWake, e.c.sql.channel, e.ns, e.group, term, payload(notifyElection, e.ns, e.group))
	}
	br := e.c.pool.SendBatch(ctx, b)
	var n int64
	_, err = br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&n)
	}
	if err == nil {
		_, err = br.Exec() // COMMIT
	}
	if err == nil && wake {
		if _, werr := br.Exec(); werr != nil {
			e.c.cfg.Logger.Debug("sentinel: elector: waking the successor failed; it campaigns at the term's expiry", "group", e.group, "err", werr)
		}
		_ = br.Close() // committed: a wake-up's failure is only logged
		return n > 0, nil
	}
	_ = br.Close()
	return err == nil && n > 0, err
}
