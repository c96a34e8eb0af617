package sentinel

// This file: the give-back of a draw that ended unheard (cut off as its caller's ctx ended, or lost with its connection): its ticket, found by the draw's mark, is left in the background (giveBackDraw), and Client.Close waits for such give-backs (cutOffs).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// cutOffLook is how long after its first look a give-back of a draw that
// ended unheard looks again (giveBackDraw): for a draw that reached the
// queue's lock only after the first look had read the queue.
const cutOffLook = grantGrace

// giveBackDraw gives back, in the background, the ticket a draw may have
// committed unheard: a draw whose statement was cut off grantGrace after
// its caller's ctx ended (or lost with its connection) before Client.draw
// returned its error. Such a ticket was owned by nobody live in this
// process: nobody renewed it, and it held everyone behind it until it
// expired, a TTL later. Every attempt of one draw carries one mark
// (nonce, tickets.draw_nonce): the live tickets of this client's owner
// carrying it on namespace ns, resource res are the draw's, and no other
// ticket is touched (sqlDrawnTickets). Each is left as a Turn gives up
// a ticket (Turn.leave: `cancelled`, the next ticket granted and woken).
//
// It does not block the caller. It looks twice: once at once, then again
// cutOffLook later. A look first locks the queue's row as a leave does,
// so it waits for a draw that holds that lock, or waits for it ahead of
// the look, and then sees its ticket committed; the second look is for
// a draw whose statement reached the server's lock after the first look
// (held up in the network, or an earlier attempt's ticket given back by
// the first look while a later attempt, still in flight, drew anew). A
// look that fails transiently (a dropped connection) is retried until
// the ticket, drawn by now, would have expired anyway (ttl from now;
// retryDrawn).
//
// What remains: a draw that reaches the server's lock only after the
// second look, one that creates the resource's queue row (the first draw
// of a resource: there is no row to wait for), a give-back not started
// because the client was closing, or one cut short by Close's deadline
// leave the ticket to expire, within its TTL, as before. A failure is
// logged and reported (Observer.ReleaseFailed), as a ticket given up is
// (abandon); its Token is 0 when the look itself failed (the ticket's
// number, if any, was never learned).
func (c *Client) giveBackDraw(ns, res string, nonce int64, ttl time.Duration) {
	closing, ctx, ok := c.cut.begin()
	if !ok {
		c.cfg.Logger.Warn("sentinel: a draw that returned without its ticket as the client closed may have drawn one; it expires within its TTL",
			"namespace", ns, "resource", res, "ttl", ttl)
		return
	}
	go func() {
		defer c.cut.end()
		for look := range 2 {
			if look > 0 {
				t := time.NewTimer(cutOffLook)
				select {
				case <-t.C:
				case <-closing: // Close: the last look now, within its deadline
				case <-ctx.Done():
				}
				t.Stop()
			}
			// Each look is bounded by its own start plus the TTL: a
			// ticket drawn by then has expired after it. (One expiry for
			// both, the first look's, passed between the looks when the
			// TTL was shorter than cutOffLook: the second look ran on an
			// ended context and was reported failed.)
			expiry := time.Now().Add(ttl)
			lctx, cancel := context.WithDeadline(ctx, expiry)
			err := c.retryDrawn(lctx, expiry, ns, res, nonce, ttl)
			cancel()
			if err != nil {
				if !errors.Is(err, errDrawnLeave) {
					// The look failed: the ticket, if any, is unknown.
					l := c.newLease(kindTicket, ns, res, 0, ttl)
					l.endAs(&LostError{Namespace: ns, Key: res, Kind: LossTicket,
						Reason: fmt.Sprintf("a draw that returned without its ticket (cut off as its caller's ctx ended, or its reply lost) "+
							"may have drawn one; looking for it to give it back failed, so it stays in the queue, by nobody, until it expires, "+
							"within its TTL (%s)", ttl),
						Cause: err}, true)
				}
				return
			}
		}
	}()
}

// retryDrawn makes one look (leaveDrawn), retrying a transient failure
// until ctx ends or expiry (when a ticket drawn by the time the look
// began would have expired anyway), but not while the client is closing
// and the database cannot be reached at all (Close does not wait out an
// outage). Unlike retryWithin, the pause doubles from giveBackPause up to
// Config.WaitRecheck and only the first retry is logged: it may run for a
// TTL in the background, and a Turn that gives up during an outage
// (its draw's attempts failing) starts one too. It returns the last
// attempt's error.
func (c *Client) retryDrawn(ctx context.Context, expiry time.Time, ns, res string, nonce int64, ttl time.Duration) error {
	pause := giveBackPause
	for retries := 0; ; retries++ {
		err := c.leaveDrawn(ctx, ns, res, nonce, ttl)
		if err == nil || !transient(err) || ctx.Err() != nil || !time.Now().Add(pause).Before(expiry) ||
			(c.closed.Load() && cannotConnect(err)) {
			return err
		}
		if retries == 0 {
			c.cfg.Logger.Warn("sentinel: giving back the ticket of a draw that returned without it failed; retrying until it would have expired",
				"namespace", ns, "resource", res, "err", err)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		if ctx.Err() != nil {
			return err
		}
		pause = min(2*pause, max(c.cfg.WaitRecheck, giveBackPause))
	}
}

// errDrawnLeave marks the failure of a leave by leaveDrawn, whose ticket
// was reported (ended as a failed release) already.
var errDrawnLeave = errors.New("sentinel: giving back the ticket of a draw that returned without it failed")

// leaveDrawn looks once for the live tickets of the draw marked nonce
// (see giveBackDraw) and leaves each, as a Turn gives up a ticket
// (Turn.leave, which also wakes the next). The look is a transaction of
// its own: it locks the queue's row as a leave does (sqlLeaveLockQueue),
// so a draw holding it, or waiting for it ahead of the look, has committed
// (or failed) when the look reads the tickets, with a snapshot taken
// after the lock. A leave that fails transiently is returned as is, to be
// retried: the next look finds the ticket again unless the leave
// committed. One that fails otherwise ends the ticket as a failed release
// (logged, Observer.ReleaseFailed) and returns errDrawnLeave.
func (c *Client) leaveDrawn(ctx context.Context, ns, res string, nonce int64, ttl time.Duration) error {
	qs := c.qsql()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(qs.leaveLockQueue, ns, res)
	b.Queue(qs.drawnTickets, ns, res, c.cfg.Owner, nonce)
	b.Queue("COMMIT")
	type drawnTicket struct {
		ticket  int64
		drawnAt time.Time
	}
	var found []drawnTicket
	br := c.pool.SendBatch(ctx, b)
	_, err := br.Exec()
	if err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			found, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (drawnTicket, error) {
				var d drawnTicket
				return d, r.Scan(&d.ticket, &d.drawnAt)
			})
		}
	}
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return c.wrapErr(fmt.Sprintf("look for the ticket of a draw that returned without it on %q/%q", ns, res), err)
	}
	for _, d := range found {
		l := c.newLease(kindTicket, ns, res, d.ticket, ttl)
		l.acquiredAt = d.drawnAt
		t := &Turn{c: c, l: l} // never taken: its leave records `cancelled`
		if _, err := t.leave(ctx); err != nil {
			if transient(err) && ctx.Err() == nil {
				return err
			}
			l.endAs(&LostError{Namespace: ns, Key: res, Token: d.ticket, Kind: LossTicket,
				Reason: fmt.Sprintf("ticket of a draw that returned without it (cut off as its caller's ctx ended, or its reply lost), "+
					"but giving it back failed; "+
					"it stays in the queue, by nobody, until it expires, within its TTL (%s), unless the leave committed", ttl),
				Cause: err}, true)
			return errDrawnLeave
		}
		c.cfg.Logger.Info("sentinel: gave back the ticket of a draw that returned without it", "namespace", ns,
			"resource", res, "ticket", d.ticket)
		l.end(ErrReleased)
	}
	return nil
}

// cutOffs counts the give-backs of draws that ended unheard under way
// (giveBackDraw), and the draws in flight (Client.draw, which gives back
// a ticket drawn as the client closes). Client.Close makes the give-backs'
// last looks at once and waits for them all until its deadline, then
// cancels the give-backs still running.
type cutOffs struct {
	underWay
	closing chan struct{}      // closed by Close: the second look is made at once
	ctx     context.Context    // the give-backs' context: cancelled at Close's deadline
	cancel  context.CancelFunc // cancels ctx
}

// begin counts a give-back in, unless the client is closing, and returns
// the channel Close closes and the context the give-back runs in.
func (s *cutOffs) begin() (closing <-chan struct{}, ctx context.Context, ok bool) {
	ok = s.add(func() {
		if s.closing == nil {
			s.closing = make(chan struct{})
			s.ctx, s.cancel = context.WithCancel(context.Background())
		}
		closing, ctx = s.closing, s.ctx
	})
	return closing, ctx, ok
}

// end counts a give-back out.
func (s *cutOffs) end() { s.done() }

// close, called by Client.Close, starts no more give-backs, has those
// under way make their last look at once, and waits for them until ctx
// (Close's deadline) ends; those still running then are cancelled, their
// failure logged and reported as they return.
func (s *cutOffs) close(ctx context.Context) {
	var cancel context.CancelFunc
	s.underWay.close(ctx, func() {
		if s.closing != nil { // else none was ever started
			close(s.closing)
			cancel = s.cancel
		}
	})
	if cancel != nil {
		cancel()
	}
}
