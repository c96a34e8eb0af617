package sentinel

// This file: a lease across processes: LeaseHandle, Lease.Handle and Lease.Detach (the acquirer hands the lease on), Client.AdoptHandle (the receiver takes it up as a Lease of its own), and RenewHandle and ReleaseHandle (acting on the handle alone).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// LeaseHandle identifies a granted lease by plain values, so one process
// can acquire a lease and another renew or release it (for example a
// dispatcher and its worker). It encodes to JSON as is.
//
// The acquiring process hands the lease on with Lease.Detach, which
// returns the handle and stops that process's renewals; the receiver then
// takes it up with Client.AdoptHandle, which makes it a Lease of the
// receiver's own (renewed by its heartbeat, under its name, with a new
// token), or, at a lower level, keeps it alive with Client.RenewHandle
// and frees it with Client.ReleaseHandle, or lets it expire. A handle
// from Lease.Handle alone leaves the lease renewed, and released at
// Client.Close, by the client that acquired it.
type LeaseHandle struct {
	Namespace string `json:"namespace"`
	Key       string `json:"key"`
	Owner     string `json:"owner"`
	Token     int64  `json:"token"`
}

// Handle returns the lease's plain-value handle. It hands nothing on:
// this client goes on renewing the lease, and releases it at Close, so a
// key handed to another process this way never expires while this client
// lives (even when the receiver died), and a release or an adoption
// (Client.AdoptHandle) by the receiver ends this Lease as lost at its
// next renewal. To hand the lease to
// another process, use Detach, which returns the same handle.
func (l *Lease) Handle() LeaseHandle {
	return LeaseHandle{Namespace: l.ns, Key: l.key, Owner: l.owner, Token: l.token}
}

// Detach hands the lease on: it stops this client's renewals and ends the
// Lease here without releasing its row, and returns the lease's handle,
// for another process (a worker) to take up with Client.AdoptHandle (or
// to renew with Client.RenewHandle and release with
// Client.ReleaseHandle). It does not touch the database.
//
// Afterwards Done is closed, contexts from Context are cancelled (with
// ErrDetached as their cause), Err returns ErrDetached (which is no loss:
// not logged as one, not reported to Observer.LeaseLost), Heartbeat
// returns ErrDetached and sends nothing, Release frees nothing and
// returns an error matching ErrDetached (free the key with
// Client.ReleaseHandle instead, if the handle could not be delivered),
// and Client.Close leaves the row alone. Stop the work done under the
// lease before Detach: the token is the receiver's from then on.
//
// The row stays held until ExpiresAt (on the database clock: the expiry
// as of the last renewal, at most one TTL away), unless the receiver
// renews it. A renewal by this client's heartbeat already under way when
// Detach is called may still run and move the expiry once more, by one
// TTL from that renewal (later than ExpiresAt says, never earlier); no
// other follows. So when the receiver dies, or the handle never reaches
// it, the key frees by itself within about one TTL of Detach, or of the
// receiver's last renewal. The receiver should call AdoptHandle as soon
// as it has the handle (or RenewHandle, then every third of the TTL):
// it returns an error matching ErrStaleToken when the lease expired in
// transit (the key may then be someone else's: do not start the work).
// Once adopted, the handle and its token are stale. A hard TTL
// (WithHardTTL) still holds: the database never renews a lease past it.
//
// Detach waits for a Release (or Client.Close's release) under way, and
// then returns that outcome instead. When the lease has ended already
// (released, lost, past its local deadline: see Err), Detach returns the
// zero LeaseHandle and Err's error. Detaching a detached lease returns
// its handle and nil.
func (l *Lease) Detach() (LeaseHandle, error) {
	l.relMu.Lock() // after a Release or Close under way, never during it
	defer l.relMu.Unlock()
	if err := l.endDetached(); err != nil {
		return LeaseHandle{}, err
	}
	l.c.cfg.Logger.Debug("sentinel: lease detached", l.logAttrs()...)
	return l.Handle(), nil
}

// endDetached ends the lease as detached (ErrDetached) if it is held and
// its local deadline has not passed: it returns nil then, or when it was
// detached already. Otherwise it returns why the lease ended (ending it
// as lost first when the deadline passed, as Err does). The lease is
// removed from the heartbeater: a renewal in flight that then finds the
// row gone takes it for no loss (see renewBatch).
func (l *Lease) endDetached() error {
	l.mu.Lock()
	for l.err == nil && !time.Now().Before(l.deadline) {
		// The process was frozen past the deadline, the timer has not
		// fired yet: it is lost, not handed on. checkDeadline re-reads
		// the deadline under the lock: a renewal whose reply landed in
		// between moved it, and the lease lives (not ended: nil from
		// ended, which must not read as detached), so look again.
		l.mu.Unlock()
		l.checkDeadline()
		l.mu.Lock()
	}
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		if err == ErrDetached {
			return nil
		}
		return err
	}
	l.err = ErrDetached
	if l.timer != nil {
		l.timer.Stop()
	}
	onEnd := l.onEnd
	close(l.done)
	l.mu.Unlock()
	l.c.hb.remove(l)
	if onEnd != nil {
		onEnd(ErrDetached)
	}
	return nil
}

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
// token that holds the key now, 0 when the key is free. A lease whose
// hard expiry comes within the safety margin of the TTL asked (its
// Lease would be past its deadline as it is returned) is given back, the
// key freed, and AdoptHandle returns an error matching ErrHardTTL (and
// ErrLeaseLost): the work must not start either. When another
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
	o, err := c.resolve(h.Key, opts, func(o callOptions) error {
		if err := o.only("AdoptHandle", takesTTL); err != nil {
			return err
		}
		if o.namespaceSet {
			return invalid("option", "WithNamespace: not an option of AdoptHandle: the handle names the namespace")
		}
		return nil
	})
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
	if hard != nil && hardAt.Sub(expiresAt) < cappedSlack && !sent.Add(remaining-l.margin).After(time.Now()) {
		// Capped by the hard expiry, with no more left of it than the
		// margin of the TTL asked: the Lease would be past its deadline
		// as it is returned, ended at once (a loss reported for a lease
		// nobody could use), and the row held, by nobody, until the hard
		// expiry. Give it back: the key is free.
		rerr := c.giveBackLease(ctx, l, sent.Add(remaining))
		lost := &LostError{Namespace: h.Namespace, Key: h.Key, Token: h.Token, Kind: LossLease, Reason: reasonHardTTL, Cause: ErrHardTTL}
		back := "given back: the key is free"
		if rerr != nil {
			back = fmt.Sprintf("giving it back failed, so it is free only at its hard expiry: %v", rerr)
		}
		return nil, false, fmt.Errorf("sentinel: %s: %w (%s left before its hard expiry, no more than the safety margin (%s) of the TTL asked (%s); %s)",
			op, lost, remaining, l.margin, o.ttl, back)
	}
	if err := c.keepGrant(ctx, l, op, "adopted", sent, remaining, expiresAt, hardAt); err != nil {
		return nil, false, err
	}
	c.cfg.Logger.Debug("sentinel: lease adopted", "namespace", h.Namespace, "key", h.Key, "token", token, "from_token", h.Token)
	return l, false, nil
}

// RenewHandle renews a lease by its plain values (see LeaseHandle), for the
// process that did not acquire it. It returns the new expiry on the database
// clock, or an error matching ErrStaleToken when the handle is no longer the
// current grant, or a *BusyError (ErrBusy) when another transaction had
// the row locked (a release or a takeover under way, the acquirer's own
// renewal): nothing was renewed, try again. ttl must be from MinTTL to MaxTTL. A renewal never moves the
// expiry earlier than the one already granted: renewing with a TTL shorter
// than the holder's cannot cut the lease its holder is trusting. Nor does
// it move it past the lease's hard TTL (WithHardTTL).
//
// Nothing renews a handle in the background: the receiver of a lease
// handed on (Lease.Detach) renews it once on receipt, which also tells it
// the lease did not expire in transit, and then every third of ttl or so
// while it works. It trusts the lease until the time it sent its last
// successful renewal plus ttl, less a safety margin, on its own monotonic
// clock (as a Lease does), and fences its writes with the token.
// Client.AdoptHandle does all of that for it: it takes the handle up as a
// Lease of this client's, renewed by its heartbeat, with a new token
// and this process named as the holder. RenewHandle keeps the row as it
// is: the acquiring process's name, and its token, which the acquirer can
// still fence with. A nil ctx is refused (ErrInvalid).
func (c *Client) RenewHandle(ctx context.Context, h LeaseHandle, ttl time.Duration) (time.Time, error) {
	if err := checkCtx("Client.RenewHandle", ctx); err != nil {
		return time.Time{}, err
	}
	if err := c.checkOpen(); err != nil {
		return time.Time{}, err
	}
	if err := c.checkHandle(h); err != nil {
		return time.Time{}, err
	}
	if ttl < MinTTL || ttl > MaxTTL {
		return time.Time{}, invalid("TTL", "must be from MinTTL (%s) to MaxTTL (%s), got %s", MinTTL, MaxTTL, ttl)
	}
	rows, err := c.pool.Query(ctx, c.sql.renew, h.Owner, []string{h.Namespace}, []string{h.Key}, []int64{h.Token},
		[]int64{us(ttl)}, []int16{int16(kindLease)})
	if err != nil {
		return time.Time{}, c.wrapErr(fmt.Sprintf("renew lease %q/%q", h.Namespace, h.Key), err)
	}
	res, err := scanRenewals(rows)
	if err != nil {
		return time.Time{}, c.wrapErr(fmt.Sprintf("renew lease %q/%q", h.Namespace, h.Key), err)
	}
	if len(res) != 1 || res[0].status != "renewed" {
		if len(res) == 1 && res[0].status == "busy" {
			return time.Time{}, &BusyError{Namespace: h.Namespace, Key: h.Key, Token: h.Token}
		}
		return time.Time{}, &StaleTokenError{Namespace: h.Namespace, Key: h.Key, Token: h.Token}
	}
	return res[0].expiresAt, nil
}

// ReleaseHandle releases a lease by its plain values. It returns an error
// matching ErrStaleToken when the handle is no longer the current grant
// (already released, or taken over after expiry). A retry of a release
// whose reply was lost (a dropped connection) gets it too when the first
// attempt applied: either way the handle holds the key no more, so a
// caller that retries may treat ErrStaleToken as released.
// A nil ctx is refused (ErrInvalid).
func (c *Client) ReleaseHandle(ctx context.Context, h LeaseHandle) error {
	if err := checkCtx("Client.ReleaseHandle", ctx); err != nil {
		return err
	}
	if err := c.checkHandle(h); err != nil {
		return err
	}
	n, err := c.releaseRow(ctx, h.Namespace, h.Key, h.Owner, h.Token)
	if err != nil {
		return err
	}
	if n == 0 {
		return &StaleTokenError{Namespace: h.Namespace, Key: h.Key, Token: h.Token}
	}
	return nil
}

func (c *Client) checkHandle(h LeaseHandle) error {
	if err := c.checkOpen(); err != nil {
		return err
	}
	if err := checkKey(h.Key); err != nil {
		return err
	}
	if err := checkNamespace(h.Namespace); err != nil {
		return err
	}
	if err := checkName("owner", h.Owner, MaxOwnerLen); err != nil {
		return err
	}
	if h.Token <= 0 {
		return invalid("token", "must be positive, got %d", h.Token)
	}
	return nil
}
