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
// Do returns fn's error. If the lease was lost while fn ran, the error
// also matches ErrLeaseLost (fn's work may have overlapped another holder:
// guard its writes with l.Token(), see VerifyToken); so it does, and
// ErrClosed too, when Client.Close ended the lease while fn ran (Close
// frees the key as it cancels fn's context). A failed release is
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
	work, cancel := l.Context(ctx)
	defer func() {
		cancel()
		lost := l.Err()
		l.mu.Lock()
		byClose := l.byClose
		l.mu.Unlock()
		// Bounded by ReleaseTimeout, as every give-back after the work
		// is: fn is done, and a release that cannot finish (a row locked
		// by a hung transaction, a black-holed connection) must not keep
		// Do from returning. The row then expires within its TTL.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ReleaseTimeout)
		rerr := l.Release(rctx)
		rcancel()
		switch {
		case errors.Is(lost, ErrDetached):
			// fn handed the lease on: Release freed nothing, and
			// must not; the receiver holds it.
		case lost != nil && !errors.Is(lost, ErrReleased):
			err = errors.Join(err, lost)
		case byClose:
			// Close freed the key while fn ran: fn's ctx was cancelled
			// as the key was freed, so its work may have overlapped
			// the next holder's, as after a loss.
			err = errors.Join(err, &LostError{Namespace: l.ns, Key: l.key, Token: l.token, Kind: l.lossKind(),
				Reason: "client closed", Cause: ErrClosed})
		case err == nil && rerr != nil:
			err = rerr
		}
	}()
	return fn(work, l)
}
