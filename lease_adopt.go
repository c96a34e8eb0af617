package sentinel

// This file: Client.AdoptHandle: a lease handed on by its handle (Lease.Detach) taken up by another process as a Lease of its own.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// AdoptHandle takes up a lease handed on by its handle (Lease.Detach,
// usually in another process) as a Lease of this client's: the same
// *Lease Client.Lease returns, renewed by this client's heartbeat, with
// Done, Err, Deadline, Context, Release and Detach, reported to the
// Observer as any lease of this client's, and released at Close.
//
// It is one statement, guarded by the handle's owner and token and by the
// lease's expiry and hard expiry on the database clock, that makes the
// lease a new grant to this client: the row names this client's owner,
// host and pid (Holder, `sentinel leases` and the console show the
// process that holds the key now, not the one that handed it on), it
// carries a new fencing token, larger than the handle's, and it expires
// one TTL from now (WithTTL; Config.DefaultTTL by default), never past the
// lease's hard TTL, which it keeps. The handle is stale from then on:
// the dispatcher's token fails VerifyToken, and RenewHandle and
// ReleaseHandle refuse it, whoever holds a copy. A caller waiting for the
// key (WithWait) waits on, for this client's release. The holder the
// lease was adopted from is not told: adopt a handle from Detach, not
// from Lease.Handle alone, whose Lease ends lost at its next renewal.
//
// A handle that is no longer the lease's current grant (released,
// expired, past its hard TTL, adopted already, or never this lease's)
// gets an error matching ErrStaleToken, and nothing is written: the key
// may be someone else's, so the work must not start. Its Current is the
// token that holds the key now, 0 when the key is free. When another
// transaction keeps the row locked (a guarded transaction still open on
// the handle's token, say) for a renewal interval of the TTL, AdoptHandle
// gives up with an error matching ErrBusy, having written nothing.
// WithTTL is the only option; the handle names the namespace. Bad input
// (an invalid handle, another option) is refused (ErrInvalid) before any
// statement.
//
// When ctx ends while the statement runs, the statement is let finish
// (for at most a second): a lease it adopted is released before
// AdoptHandle returns ctx's error (the handle is stale then: the key is
// free, or someone else's). Likewise a lease adopted as the client
// closes is released, and AdoptHandle returns ErrClosed. Such a
// give-back is retried as Lease's is. A nil ctx is refused (ErrInvalid).
//
// RenewHandle and ReleaseHandle remain the lower-level way to act on a
// handle: they keep its token and its holder's name in the row, and
// renew nothing in the background.
func (c *Client) AdoptHandle(ctx context.Context, h LeaseHandle, opts ...Option) (l *Lease, err error) {
	if err := checkCtx("Client.AdoptHandle", ctx); err != nil {
		return nil, err
	}
	if obs := c.observer(); obs != nil { // metrics and tracing (observe.go)
		ctx = obs.adoptStart(ctx, h)
		defer obs.adoptEnd(ctx, h, time.Now(), &l, &err)
	}
	if err := c.checkHandle(h); err != nil {
		return nil, err
	}
	o, err := c.resolve(h.Key, opts)
	if err == nil {
		err = o.only("AdoptHandle", takesTTL)
	}
	if err == nil && o.namespaceSet {
		err = invalid("option", "WithNamespace: not an option of AdoptHandle: the handle names the namespace")
	}
	if err != nil {
		return nil, err
	}
	o.namespace = h.Namespace
	// A row locked by another transaction is skipped, not waited for
	// (the statement never waits on a lock, as a grant never does): a
	// renewal or a release under way holds it for a moment. Retry for as
	// long as Heartbeat does.
	giveUp := time.Now().Add(c.renewEvery(o.ttl))
	for {
		l, busy, err := c.adoptRow(ctx, h, o)
		if !busy {
			return l, err
		}
		if time.Now().After(giveUp) {
			return nil, fmt.Errorf("sentinel: adopt lease %q/%q (token %d): %w: its row stayed locked by another transaction "+
				"(a transaction guarded by the handle's token still open, say); nothing was written: try again", h.Namespace, h.Key, h.Token, ErrBusy)
		}
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("sentinel: adopt lease %q/%q: %w (its row was locked by another transaction: nothing was written)",
				h.Namespace, h.Key, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// adoptRow runs the adoption statement once. It returns the lease, or an
// error (ErrStaleToken when the handle is not the current grant), or busy
// when the row was locked by another transaction: nothing was written, try
// again.
func (c *Client) adoptRow(ctx context.Context, h LeaseHandle, o callOptions) (l *Lease, busy bool, err error) {
	op := fmt.Sprintf("adopt lease %q/%q", h.Namespace, h.Key)
	sent := time.Now()
	var (
		adopted    bool
		token      int64
		acquiredAt time.Time
		expiresAt  time.Time
		hard       *time.Time
		remaining  time.Duration
	)
	// A grant commits on its own: the statement may outlive ctx by
	// grantGrace, so that a lease adopted as ctx ends is known, and given
	// back, instead of held unknown to anyone for a TTL (see acquireRow).
	sctx, scancel := graceCtx(ctx, grantGrace)
	err = c.pool.QueryRow(sctx, c.sql.adopt, h.Namespace, h.Key, h.Owner, h.Token, c.cfg.Owner, c.cfg.Host, c.cfg.PID, us(o.ttl)).
		Scan(&adopted, &busy, &token, &acquiredAt, &expiresAt, &hard, &remaining)
	scancel()
	if errors.Is(err, pgx.ErrNoRows) {
		// The key is free or expired.
		return nil, false, &StaleTokenError{Namespace: h.Namespace, Key: h.Key, Token: h.Token}
	}
	if err != nil {
		return nil, false, c.wrapErr(op, err)
	}
	if !adopted {
		if busy {
			return nil, true, nil
		}
		return nil, false, &StaleTokenError{Namespace: h.Namespace, Key: h.Key, Token: h.Token, Current: token}
	}
	var hardAt time.Time
	if hard != nil {
		hardAt = *hard
	}
	l = c.newLease(kindLease, h.Namespace, h.Key, token, o.ttl)
	l.acquiredAt = acquiredAt
	if err := c.keepGrant(ctx, l, op, "adopted", sent, remaining, expiresAt, hardAt); err != nil {
		return nil, false, err
	}
	c.cfg.Logger.Debug("sentinel: lease adopted", "namespace", h.Namespace, "key", h.Key, "token", token, "from_token", h.Token)
	return l, false, nil
}
