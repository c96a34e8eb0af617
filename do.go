package sentinel

// This file: Client.Do: run fn under a lease, renewed while it runs and released after.

import (
	"context"
	"errors"
)

// Do runs fn while holding key's lease: it acquires the lease (Lease, with
// the same options; WithWait blocks until it is free), runs fn with a
// context that is cancelled, with the loss as its cause, when the lease is
// lost, and releases the lease when fn returns or panics (that release
// bounded by Config.ReleaseTimeout, whatever ctx's deadline). It is
// pgx.BeginFunc for leases.
//
// Do returns fn's error. If the lease was lost while fn ran (seen by a
// renewal, or by the release after fn), the error also matches
// ErrLeaseLost (fn's work may have overlapped another holder:
// guard its writes with l.Token(), see VerifyToken); so it does, and
// ErrClosed too, when Client.Close ended the lease while fn ran (Close
// cancels fn's context, then frees the key: the error then says that
// another holder may have taken it before fn stopped, and Close logs a
// Warn naming the key). A failed release is
// reported only when fn succeeded. When fn hands the lease on
// (Lease.Detach), Do neither releases it nor reports that as a loss: it
// returns fn's error, and the row is the handle's receiver's. When the
// lease cannot be acquired, fn does not run and Do returns Lease's error
// (ErrNotAcquired without WithWait). A nil ctx is refused (ErrInvalid).
func (c *Client) Do(ctx context.Context, key string, fn func(ctx context.Context, l *Lease) error, opts ...Option) (err error) {
	if err := checkCtx("Client.Do", ctx); err != nil {
		return err
	}
	if fn == nil {
		return invalid("fn", "must not be nil")
	}
	l, err := c.Lease(ctx, key, opts...)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.inDo = true
	l.mu.Unlock()
	work, cancel := l.Context(ctx)
	defer func() {
		cancel()
		l.mu.Lock()
		l.inDo = false
		l.mu.Unlock()
		lost := l.Err()
		// Bounded by ReleaseTimeout, as every give-back after the work
		// is: fn is done, and a release that cannot finish (a row locked
		// by a hung transaction, a black-holed connection) must not keep
		// Do from returning. The row then expires within its TTL. A
		// Close under way holds the lease's release lock: Release waits
		// for its release, whose outcome is then known (freedByClose).
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ReleaseTimeout)
		rerr := l.Release(rctx)
		rcancel()
		l.mu.Lock()
		byClose, freed := l.byClose, l.freedByClose
		l.mu.Unlock()
		switch {
		case errors.Is(lost, ErrDetached):
			// fn handed the lease on: Release freed nothing, and
			// must not; the receiver holds it.
		case byClose && freed:
			// Close freed the key while fn ran: it cancelled fn's ctx
			// first, but fn's work may have overlapped the next
			// holder's, as after a loss; the error says so (means).
			err = errors.Join(err, &LostError{Namespace: l.ns, Key: l.key, Token: l.token, Kind: l.lossKind(),
				Reason: reasonClosedWhileRunning, Cause: ErrClosed})
		case byClose:
			// Close ended it while fn ran without freeing the key to
			// anyone: its row was gone already (a loss), or its release
			// failed (this Release then freed it, or failed too).
			if end := l.ended(); end != nil && !errors.Is(end, ErrReleased) {
				err = errors.Join(err, end)
			} else {
				err = errors.Join(err, &LostError{Namespace: l.ns, Key: l.key, Token: l.token, Kind: l.lossKind(),
					Reason: reasonClosed, Cause: ErrClosed})
			}
		case lost != nil && !errors.Is(lost, ErrReleased):
			err = errors.Join(err, lost)
		case errors.Is(rerr, ErrLeaseLost) && err != nil:
			// The release found the row taken over or expired, a loss
			// no renewal saw before fn returned: reported as the loss it
			// is, with fn's error, not dropped as a failed release.
			err = errors.Join(err, rerr)
		case err == nil && rerr != nil:
			err = rerr
		}
	}()
	return fn(work, l)
}
