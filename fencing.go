package sentinel

// This file: VerifyToken and VerifyExecutionToken: the fencing checks a protected resource runs in its own transaction.

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// VerifyToken checks, inside the caller's own transaction, that token is the
// current, unexpired fencing token of key's lease, and returns a
// *StaleTokenError (matching ErrStaleToken) otherwise. It locks the lease row
// FOR KEY SHARE until the transaction ends, so no takeover can commit before
// the caller's guarded writes do, while the lease's own renewals go on: a
// holder may guard its writes back to back without starving them.
//
//	tx, _ := pool.Begin(ctx)
//	if err := client.VerifyToken(ctx, tx, "invoice-123", lease.Token()); err != nil {
//		tx.Rollback(ctx) // a newer holder exists: write nothing
//		return err
//	}
//	tx.Exec(ctx, "UPDATE invoices SET ...")
//	tx.Commit(ctx)
//
// q is usually a pgx.Tx; on a pool or bare connection the lock is released
// as soon as the check returns. Options: WithNamespace.
// A nil ctx is refused (ErrInvalid).
func (c *Client) VerifyToken(ctx context.Context, q Querier, key string, token int64, opts ...Option) error {
	if err := checkCtx("Client.VerifyToken", ctx); err != nil {
		return err
	}
	return c.verify(ctx, q, "VerifyToken", c.sql.verify, key, token, opts)
}

// VerifyExecutionToken is VerifyToken for the token of a running Once (see
// TokenFromContext): it checks that the execution is still claimed or
// executing under token with a live lease. A nil ctx is refused (ErrInvalid).
func (c *Client) VerifyExecutionToken(ctx context.Context, q Querier, key string, token int64, opts ...Option) error {
	if err := checkCtx("Client.VerifyExecutionToken", ctx); err != nil {
		return err
	}
	return c.verify(ctx, q, "VerifyExecutionToken", c.sql.verifyExe, key, token, opts)
}

func (c *Client) verify(ctx context.Context, q Querier, call, sql, key string, token int64, opts []Option) error {
	if q == nil {
		return invalid("querier", "must not be nil")
	}
	o, err := c.resolve(key, opts, onlyTakes(call, 0))
	if err != nil {
		return err
	}
	if token <= 0 {
		return invalid("token", "must be positive, got %d", token)
	}
	var current int64
	var alive bool
	err = q.QueryRow(ctx, sql, o.namespace, key).Scan(&current, &alive)
	if errors.Is(err, pgx.ErrNoRows) {
		return c.fencingRefused(ctx, &StaleTokenError{Namespace: o.namespace, Key: key, Token: token})
	}
	if err != nil {
		return c.wrapErr(fmt.Sprintf("verify token %q/%q", o.namespace, key), err)
	}
	if current != token || !alive {
		if !alive {
			current = 0
		}
		return c.fencingRefused(ctx, &StaleTokenError{Namespace: o.namespace, Key: key, Token: token, Current: current})
	}
	return nil
}
