package sentinel

// This file: how a Turn gets its turn: draw, the serving check, waitTurn, and the local wake-ups between one client's own tickets.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// drawn is what a draw learned besides its ticket: whether it served it,
// the live ticket ahead (pred 0: none), read under the queue's lock, and
// the draw window its waiter closes once subscribed (waitTurn; Client.turn
// closes it when the draw served the ticket).
type drawn struct {
	served bool // the draw served the ticket (nothing ahead): no wait
	ahead  serveCheck
	sent   time.Time // when the draw was sent: ahead.predLeft counts from then
	win    drawWindow
	// gen is the hub's connection (listenHub.gen) before the draw was
	// sent: a served wake-up ('s') is trusted as is only if it came on
	// that connection, which a restart of the server ends (the ticket's
	// number may then have been drawn again: see sqlServe).
	gen uint64
}

// draw draws a ticket, riding out an unreachable database until ctx ends.
// Unless it returns an error, the caller must close the window it returns:
// waitTurn does, and Client.turn does itself when the draw served the
// ticket (nothing to wait for).
func (c *Client) draw(ctx context.Context, resource string, o callOptions) (*Turn, drawn, error) {
	// Every attempt of this draw carries one mark; an attempt sent again
	// after one whose reply was lost (retry) adopts that one's ticket if
	// it committed (sqlDraw).
	nonce, retry := rand.Int64(), false
	if f := testDrawNonce.Load(); f != nil {
		nonce = (*f)()
	}
	// fail returns err. When an attempt may have committed unheard
	// (retry: its reply was lost, or it was cut off as ctx ended), its
	// ticket, owned by nobody live here, would hold everyone behind it
	// until it expired: it is given back by the draw's mark, in the
	// background (giveBackDraw).
	fail := func(err error) (*Turn, drawn, error) {
		if retry {
			c.giveBackDraw(o.namespace, resource, nonce, o.ttl)
		}
		return nil, drawn{}, err
	}
	for {
		if err := c.checkOpen(); err != nil {
			return fail(err)
		}
		if ctx.Err() != nil {
			// Ended before the draw was sent: nothing of this attempt's
			// to give back (an earlier one's is, fail).
			return fail(fmt.Errorf("sentinel: waiting for turn on %q/%q: %w", o.namespace, resource, context.Cause(ctx)))
		}
		// Counted in while in flight (c.cut): Close waits for the draws
		// under way, within its deadline, so that a ticket drawn as the
		// client closes is given back (below) before Close returns, not
		// after, when the caller may have closed the pool. Not while it
		// sleeps between attempts: nothing of it is in flight then.
		if !c.cut.add(nil) {
			return fail(ErrClosed)
		}
		var (
			ticket, ahead      int64
			drawnAt, expiresAt time.Time
			remaining          time.Duration
			d                  = drawn{ahead: serveCheck{alive: true}}
		)
		obs := c.observer()
		// Opened before the statement is sent: a leave that commits
		// after the draw may wake the ticket before its waiter knows
		// the number to subscribe to; the hub keeps such wake-ups until
		// the window closes.
		d.win = c.ln.beginDraw()
		d.gen = c.ln.gen()
		sent := time.Now()
		// The draw commits on its own: if ctx ended while it ran and its
		// reply were dropped, the ticket would stay in the queue, unknown
		// to us, and hold everyone behind it for a TTL. So the statement
		// may outlive ctx by grantGrace, and a ticket drawn after ctx
		// ended is given back (Client.turn: by waitTurn's check, or at
		// once when the draw served it). One cut off after the grace is
		// given back by its mark, should it commit after all (fail).
		bctx, bcancel := boundStmt(ctx, o.ttl)
		sctx, scancel := graceCtx(bctx, grantGrace)
		err := c.queryRow(sctx, c.qsql().draw, o.namespace, resource, o.label, c.cfg.Owner, c.cfg.Host, c.cfg.PID,
			us(o.ttl), c.sql.channel, obs != nil && obs.QueueGranted != nil, c.ln.direct(), nonce, retry).Scan(&ticket, &drawnAt, &expiresAt, &remaining, &ahead,
			&d.ahead.pred, &d.ahead.predOwner, &d.ahead.predLeft, &d.served)
		scancel()
		bcancel()
		if err != nil {
			c.cut.done()
			c.ln.endDraw(d.win, "", "")
		}
		if errors.Is(err, pgx.ErrNoRows) {
			continue // the queue row was created concurrently: draw again
		}
		if err != nil && ctx.Err() != nil {
			// ctx ended while the draw ran: the error wraps ctx's cause
			// (Client.Turn), not the grace's own cancellation.
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				retry = true // it may still commit on the server
				return fail(fmt.Errorf("sentinel: waiting for turn on %q/%q: %w (the draw in flight as it ended was cut off %s later: "+
					"if it commits after all, its ticket is given back in the background, or else expires within its TTL (%s): %w)",
					o.namespace, resource, context.Cause(ctx), grantGrace, o.ttl, err))
			}
			if transient(err) {
				retry = true // it may have committed, its reply lost
			}
			return fail(fmt.Errorf("sentinel: waiting for turn on %q/%q: %w (last error: %w)", o.namespace, resource, context.Cause(ctx),
				c.wrapErr(fmt.Sprintf("draw ticket for %q/%q", o.namespace, resource), err)))
		}
		if err != nil {
			if transient(err) || stalled(ctx, err) {
				// The draw may have committed unheard: the next attempt
				// adopts its ticket if it did.
				retry = true
				c.cfg.Logger.Warn("sentinel: drawing a ticket: database unreachable; retrying", "resource", resource, "err", err)
				select {
				case <-ctx.Done():
					return fail(fmt.Errorf("sentinel: waiting for turn on %q/%q: %w (last error: %w)", o.namespace, resource, context.Cause(ctx), err))
				case <-time.After(c.cfg.WaitRecheck):
				}
				continue
			}
			return fail(c.wrapErr(fmt.Sprintf("draw ticket for %q/%q", o.namespace, resource), err))
		}
		l := c.newLease(kindTicket, o.namespace, resource, ticket, o.ttl)
		l.acquiredAt = drawnAt
		t := &Turn{c: c, l: l, label: o.label, drawn: sent, ahead: int(ahead)}
		tk := ticketKey{c: c, ns: o.namespace, res: resource, ticket: ticket}
		localTickets.Store(tk, l)
		l.onEnd = func(err error) {
			localTickets.Delete(tk)
			wakeBehind(tk, err, l.margin)
		}
		l.onClose = t.endByClose
		if !c.hb.add(l, sent, remaining, expiresAt, time.Time{}) {
			// Close began while the draw was in flight: nobody would renew
			// the ticket nor wait for it. Give it back now, retried after
			// a dropped connection; a failure is logged and reported
			// (Observer.ReleaseFailed), as a ticket given up is.
			c.ln.endDraw(d.win, "", "")
			rerr := c.giveBack(ctx, l, sent.Add(remaining), func(ctx context.Context) error {
				_, err := t.leave(ctx)
				return err
			})
			c.cut.done()
			if rerr != nil {
				return nil, drawn{}, closedGivenBack(fmt.Sprintf("waiting for turn on %q/%q", o.namespace, resource), "drawn", rerr, o.ttl)
			}
			return nil, drawn{}, ErrClosed
		}
		c.cut.done()
		d.sent = sent
		return t, d, nil
	}
}

type serveCheck struct {
	alive, served bool
	pred          int64
	predLeft      time.Duration
	predOwner     string
	racing        bool
}

func (c *Client) serve(ctx context.Context, t *Turn) (serveCheck, error) {
	var s serveCheck
	err := c.queryRow(ctx, c.qsql().serve, t.l.ns, t.l.key, t.l.token, c.cfg.Owner, c.sql.channel, t.l.acquiredAt).
		Scan(&s.alive, &s.served, &s.pred, &s.predLeft, &s.predOwner, &s.racing)
	if err != nil {
		return s, c.wrapErr(fmt.Sprintf("check turn on %q/%q (ticket %d)", t.l.ns, t.l.key, t.l.token), err)
	}
	return s, nil
}

// waitTurn waits until t's ticket is served. It returns errTicketLost when
// the ticket died or ended (Client.turn tells an end by Close, released,
// from a loss), ErrClosed when it ended by Close's failed give-back, an
// error wrapping ctx's cause when ctx ends, and a serving check's error
// that is not transient. d is what t's draw returned; waitTurn closes its
// window.
//
// A ticket whose draw found a live ticket ahead sleeps at once, with no
// serving check: it cannot be served before that ticket leaves or dies,
// and a leave that commits after the draw sees the new ticket (both lock
// the queue's row) and grants or wakes it ('s', 't'). Such a wake-up may
// reach the process before the waiter subscribed (it learns its ticket's
// number from the draw): the hub keeps those while the draw's window is
// open, and the window reports whether the hub heard everything sent
// meanwhile (the same LISTEN throughout). Only then is the check skipped;
// otherwise, or when a 't' was kept, the waiter checks as before. A ticket
// ahead that dies wakes nobody: the waiter re-checks at its expiry, as the
// draw or its latest serving check read it; one of this client's own
// tickets ahead wakes it when it ends (watchLocal, wakeBehind).
func (c *Client) waitTurn(ctx context.Context, t *Turn, d drawn) error {
	key := strconv.FormatInt(t.l.token, 10)
	if f := testAfterDraw.Load(); f != nil {
		(*f)(t.l.token)
	}
	// served hears a leave that granted this ticket ('s'): the grant
	// committed before it was sent (wake.go), so the wait ends on it with
	// no statement of its own. wake hears every other reason to re-check.
	served, _ := c.ln.subscribe(ctx, notifyTurnServed, t.l.ns, key)
	defer c.ln.unsubscribe(notifyTurnServed, t.l.ns, key, served)
	wake, listening := c.ln.subscribe(ctx, notifyTurn, t.l.ns, key)
	defer c.ln.unsubscribe(notifyTurn, t.l.ns, key, wake)
	heard, granted, recheck := c.ln.endDraw(d.win, t.l.ns, key)
	// skip: the draw's read of the ticket ahead stands for the first
	// serving check.
	skip := heard && !recheck && d.ahead.pred != 0
	isServed := func() bool {
		select {
		case <-served:
			return true
		default:
			return false
		}
	}
	var watching ticketKey // the local ticket ahead we are registered behind
	defer unwatch(&watching, wake)
	stop := func() error {
		return fmt.Errorf("sentinel: waiting for turn on %q/%q (ticket %d): %w", t.l.ns, t.l.key, t.l.token, context.Cause(ctx))
	}
	for {
		if err := t.l.ended(); err != nil {
			if errors.Is(err, ErrClosed) {
				return ErrClosed
			}
			return errTicketLost
		}
		if ctx.Err() != nil {
			return stop()
		}
		if granted || isServed() {
			if c.ln.gen() == d.gen {
				return nil // granted by the leave ahead (t.l.ended() checked above)
			}
			// Heard on a connection made since the draw: the server may
			// have restarted and the 's' be for another ticket with the
			// same number. The serving check decides.
			granted, skip = false, false
		}
		sent := time.Now()
		var (
			s   serveCheck
			err error
		)
		if skip {
			skip = false
			s, sent = d.ahead, d.sent
		} else {
			bctx, cancel := boundStmt(ctx, t.l.ttl)
			s, err = c.serve(bctx, t)
			cancel()
		}
		var delay time.Duration
		switch {
		case err != nil && ctx.Err() != nil:
			return stop()
		case err != nil && (transient(err) || stalled(ctx, err)):
			c.cfg.Logger.Warn("sentinel: waiting for turn: database unreachable; retrying", "resource", t.l.key, "err", err)
			delay = c.cfg.WaitRecheck
		case err != nil:
			return err
		case !s.alive:
			return errTicketLost
		case s.served:
			if t.l.ended() != nil {
				return errTicketLost // served, but no longer trusted locally
			}
			return nil
		case s.racing:
			delay = 5 * time.Millisecond
		case s.pred != 0 && c.watchLocal(t, s.pred, s.predOwner, wake, &watching):
			// The ticket ahead is this client's own and alive: it cannot
			// expire unseen (its local deadline comes first, and its end
			// wakes us; see wakeBehind). Only a slow safety re-check.
			delay = c.safetyRecheck(t.l.ttl)
		case s.pred != 0:
			delay = time.Until(sent.Add(s.predLeft)) + time.Millisecond
		default:
			delay = 5 * time.Millisecond
		}
		if !listening {
			delay = min(delay, c.cfg.WaitRecheck)
		}
		delay = max(delay, time.Millisecond)
		timer := time.NewTimer(delay)
		select {
		case <-served:
			granted = true // returned at the top of the loop, after the checks
		case <-wake:
		case <-timer.C:
		case <-t.l.done:
		case <-ctx.Done():
		}
		timer.Stop()
		listening = c.ln.listening()
	}
}

// testAfterDraw, set by tests only, runs after a draw returned its ticket
// and before the waiter subscribes to it.
var testAfterDraw atomic.Pointer[func(ticket int64)]

// testDrawNonce, set by tests only, returns the mark of every draw
// (instead of a random one).
var testDrawNonce atomic.Pointer[func() int64]

// ticketKey names a ticket drawn by a client of this process.
type ticketKey struct {
	c       *Client
	ns, res string
	ticket  int64
}

var (
	// localTickets holds the live tickets of this process's clients.
	localTickets sync.Map // ticketKey -> *Lease
	// behind maps a local ticket to the wake channels of the local
	// waiters directly behind it.
	behindMu sync.Mutex
	behind   = map[ticketKey][]chan struct{}{}
)

// watchLocal registers wake behind the ticket ahead (pred) when that ticket
// is this client's own and alive, and reports whether it did. A client's
// waiters then need no timer for one another: the client renews all of its
// tickets in one statement, and a ticket that ends here (released,
// cancelled, lost) wakes the waiter behind it (wakeBehind). Without this,
// many waiters of one client would all re-check at once, at the expiry of
// tickets renewed by the same heartbeat.
func (c *Client) watchLocal(t *Turn, pred int64, predOwner string, wake chan struct{}, watching *ticketKey) bool {
	unwatch(watching, wake)
	if predOwner != c.cfg.Owner {
		return false
	}
	k := ticketKey{c: c, ns: t.l.ns, res: t.l.key, ticket: pred}
	behindMu.Lock()
	behind[k] = append(behind[k], wake)
	behindMu.Unlock()
	*watching = k
	// Registered first, checked second: an end between the two still
	// finds the registration.
	if v, ok := localTickets.Load(k); ok && v.(*Lease).ended() == nil {
		return true
	}
	unwatch(watching, wake)
	return false
}

func unwatch(watching *ticketKey, wake chan struct{}) {
	if watching.c == nil {
		return
	}
	behindMu.Lock()
	list := behind[*watching]
	for i, ch := range list {
		if ch == wake {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(behind, *watching)
	} else {
		behind[*watching] = list
	}
	behindMu.Unlock()
	*watching = ticketKey{}
}

// wakeBehind wakes the local waiters behind a ticket that ended: at once
// when it was given up (its row is gone), or once its row has expired on
// the database clock when it was lost (its local deadline comes a safety
// margin before that).
func wakeBehind(k ticketKey, why error, margin time.Duration) {
	behindMu.Lock()
	list := slices.Clone(behind[k])
	behindMu.Unlock()
	if len(list) == 0 {
		return
	}
	poke := func() {
		for _, ch := range list {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	if errors.Is(why, ErrReleased) || errors.Is(why, ErrClosed) {
		poke()
		return
	}
	time.AfterFunc(2*margin+time.Millisecond, poke)
}

// safetyRecheck is how long a waiter behind one of its own client's
// live tickets sleeps without news: ten TTLs (or WaitRecheck periods),
// jittered so that many waiters of one client spread out. It is a safety
// net only: that ticket's end wakes the waiter (wakeBehind), and it cannot
// expire unseen, because its local deadline comes first.
func (c *Client) safetyRecheck(ttl time.Duration) time.Duration {
	// At most a sixteenth of the longest duration: ten of them, plus up
	// to half of that, must not overflow (a WaitRecheck or TTL of
	// decades, such as math.MaxInt64, is valid).
	d := 10 * min(max(ttl, c.cfg.WaitRecheck), math.MaxInt64/16)
	return d + rand.N(d/2)
}
