package sentinel

// This file: OnceTx, Once whose fn runs in a transaction that commits with the completion (onceInTx: its protocol over any transaction).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// OnceTx is Once for work that lives in the same PostgreSQL database: fn
// receives a transaction, and fn's writes commit together with the
// completion. A database-local side effect therefore happens exactly once,
// and a crash inside fn leaves nothing behind: not fn's writes, not an
// uncertain key (the claim stays "claimed" until commit, and an expired
// claim is taken over by the next caller). Competing callers get
// ErrInProgress while fn runs (or wait, with WithWait), and the cached
// result afterwards.
//
// An error from fn (retryable or not) rolls the transaction back and frees
// the key for the next caller; Final(err) commits fn's writes with err as
// the outcome. If the lease is lost before commit the transaction is rolled
// back and an error matching ErrLeaseLost is returned. fn must not commit or
// roll back tx itself: if it does, its writes may be committed without the
// completion, so the key is left uncertain (ErrUncertain) for an operator.
// When the commit's reply is lost, the row is read again to tell a commit
// from a rollback; if even that fails the error matches ErrUncertain with
// ExecutionError.Settles set: the outcome is unknown to this call only,
// and the key settles without an operator (completed if the commit
// landed, else free once its lease expires: call again after its TTL).
//
// A statement of fn that fails aborts tx (PostgreSQL then refuses every
// statement until the rollback, SQLSTATE 25P02): if fn goes on and returns
// a value or Final(err), that outcome cannot be recorded in tx. The
// transaction is rolled back, nothing is committed, the key is freed for
// the next caller, and the error says so and wraps the database's error
// and fn's error; it does not match ErrFinal, since no outcome was stored
// (a later caller runs fn again rather than replaying it). Return the
// failed statement's error instead. A nil ctx is refused (ErrInvalid).
//
// Settings fn makes in tx with SET LOCAL (statement_timeout, lock_timeout)
// last until the commit, so they bind the completion statement and the
// commit too: a lock_timeout of 1ms fails the completion whenever another
// session holds the key's row a moment (a heartbeat's renewal, an
// operator's read), and fn's writes roll back. Bound fn's own statements
// with a context deadline instead (pgx cancels the statement), or set them
// back (SET LOCAL lock_timeout TO DEFAULT) before fn returns, as package
// idempotency does for its handlers.
func OnceTx[T any](ctx context.Context, c *Client, key string, fn func(ctx context.Context, tx pgx.Tx) (T, error), opts ...Option) (Result[T], error) {
	if err := checkCtx("OnceTx", ctx); err != nil {
		return Result[T]{}, err
	}
	if fn == nil {
		return Result[T]{}, invalid("fn", "must not be nil")
	}
	var tx pgx.Tx
	return onceInTx(ctx, c, key, opts, "OnceTx",
		func(ctx context.Context) (txRunner, error) {
			var err error
			tx, err = c.pool.Begin(ctx)
			return pgxTxRunner{tx}, err
		},
		func(ctx context.Context) (T, error) { return fn(ctx, tx) })
}

type pgxTxRunner struct{ tx pgx.Tx }

func (r pgxTxRunner) completeScan(ctx context.Context, query string, args ...any) (int64, bool, error) {
	var n int64
	err := r.tx.QueryRow(ctx, query, args...).Scan(&n)
	return n, errors.Is(err, pgx.ErrTxClosed), err
}
func (r pgxTxRunner) commit(ctx context.Context) error { return r.tx.Commit(ctx) }
func (r pgxTxRunner) rollback(ctx context.Context) bool {
	return errors.Is(r.tx.Rollback(ctx), pgx.ErrTxClosed)
}

// txRunner is the part of a transaction onceInTx drives.
type txRunner interface {
	// completeScan runs the guarded completion statement in the
	// transaction and returns the count of rows it completed; closed
	// reports that fn had already committed or rolled back the transaction.
	completeScan(ctx context.Context, query string, args ...any) (n int64, closed bool, err error)
	commit(ctx context.Context) error
	// rollback rolls back and reports whether fn had closed the
	// transaction already.
	rollback(ctx context.Context) (closed bool)
}

// onceInTx is the OnceTx protocol over any transaction, kept step for step
// in line with OnceTx: claim key in state claimed (through the pool), begin,
// run fn, then run the completion statement (guarded by owner, token, state
// and a live lease) inside the transaction and commit; fn's writes and the
// completion commit or vanish together. On a failure before commit the
// transaction is rolled back and the claim released for the next caller;
// if fn closed the transaction itself the key is left uncertain.
func onceInTx[T any](ctx context.Context, c *Client, key string, opts []Option, what string,
	begin func(ctx context.Context) (txRunner, error), fn func(ctx context.Context) (T, error)) (res Result[T], err error) {
	if obs := c.observer(); obs != nil { // metrics and tracing (observe.go)
		ctx = obs.onceStart(ctx, c, key, opts)
		defer obs.onceEnd(ctx, c, key, opts, time.Now(), &res.Cached, &res.Token, &err)
	}
	o, ex, l, fnCtx, finishRun, err := c.start(ctx, key, opts, StateClaimed)
	if err != nil || ex != nil {
		return replayOr[T](ex, o, err)
	}
	defer finishRun()
	res.Token = l.token
	// wctx bounds what follows fn (rollback, commit, the claim's release)
	// by ReleaseTimeout from the moment it is first needed, as Once's
	// does: made before fn, it was spent by any fn slower than
	// ReleaseTimeout, whose commit then always failed.
	var (
		wctxv   context.Context
		wcancel context.CancelFunc
	)
	defer func() {
		if wcancel != nil {
			wcancel()
		}
	}()
	wctx := func() context.Context {
		if wctxv == nil {
			wctxv, wcancel = context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ReleaseTimeout)
		}
		return wctxv
	}
	release := func(event string, meta ...any) {
		_, _ = c.finish(wctx(), l, o, StateClaimed, nil, "", "", []State{StateClaimed}, false, event, meta...)
	}
	fnClosedTx := func(fnErr error) error {
		// The history carries fn's error (or panic) too: it is what an
		// operator has to go on (package idempotency's Uncertain arrives
		// here, its cause being the reason the key is uncertain).
		msg := "fn committed or rolled back the transaction itself"
		if fnErr != nil {
			msg += " (fn's error: " + errText(fnErr) + ")"
		}
		_, _ = c.finish(wctx(), l, o, StateExecuting, nil, "", "", []State{StateClaimed}, false, "failed", "error", msg)
		cause := errors.New("fn committed or rolled back the transaction itself, so its writes may be committed " +
			"without the completion; the key is left uncertain: check fn's writes, then Reconcile and ForceComplete or ResetToClaimed it")
		if fnErr != nil {
			cause = fmt.Errorf("%w (fn's error: %w)", cause, fnErr)
		}
		return c.uncertain(l, o, cause)
	}

	tx, err := begin(fnCtx)
	if err != nil {
		release("rolled_back", "error", err.Error())
		// withLoss: a lease lost while beginning ended the begin; the
		// caller learns of the loss (ErrLeaseLost), as for fn's errors.
		return res, c.wrapErr(fmt.Sprintf("%s %q/%q: begin", what, o.namespace, key), withLoss(l, err))
	}

	value, panicked, panicVal, fnErr := call(func() (T, error) { return fn(fnCtx) })
	switch {
	case panicked:
		// err is the call's outcome for the observer (metrics, span),
		// set before the panic goes on: left nil, a panic was counted as
		// a successful run.
		if tx.rollback(wctx()) {
			err = fnClosedTx(fmt.Errorf("panic: %v", panicVal))
		} else {
			release("rolled_back", "error", fmt.Sprintf("panic: %v", panicVal))
			err = fmt.Errorf("sentinel: %s %q/%q: fn panicked (%v): rolled back, nothing was committed, the key is free",
				what, o.namespace, key, panicVal)
		}
		l.end(ErrReleased)
		panic(panicVal)
	case fnErr != nil && !IsFinal(fnErr):
		if tx.rollback(wctx()) {
			return res, fnClosedTx(fnErr)
		}
		release("rolled_back", "error", errText(fnErr))
		return res, withLoss(l, fnErr) // a lost lease: an error matching ErrLeaseLost, as documented
	}
	data, encErr := c.encode(o, value)
	if encErr != nil {
		if tx.rollback(wctx()) {
			return res, fnClosedTx(nil)
		}
		release("rolled_back", "error", encErr.Error())
		return res, fmt.Errorf("%w: %s %q/%q rolled back, nothing was committed: %w", ErrResult, what, o.namespace, key, encErr)
	}
	meta, err := metadataJSON(o.metadata)
	if err != nil {
		if tx.rollback(wctx()) {
			return res, fnClosedTx(nil)
		}
		release("rolled_back")
		return res, err
	}
	var finalMsg any
	if fnErr != nil {
		finalMsg = storableText(errText(fnErr))
	}
	// The from-states as an array literal: portable across database/sql
	// drivers, which need not encode a []string.
	n, closed, err := tx.completeScan(fnCtx, c.exe.finishTx, o.namespace, key, l.owner, l.token, string(StateCompleted), data, nil,
		"{"+string(StateClaimed)+"}", true, "completed", meta, finalMsg, c.sql.channel)
	if closed {
		return res, fnClosedTx(fnErr)
	}
	if err == nil && n == 0 {
		err = l.ended()
		if err == nil {
			err = &LostError{Namespace: o.namespace, Key: key, Token: l.token, Kind: l.lossKind(), Reason: reasonTakenBeforeCommit, exec: l.exec}
		}
	}
	if err != nil && txAborted(err) {
		// A statement of fn failed and fn went on: the transaction
		// can only roll back, so fn's outcome cannot be recorded in it.
		// Not a lost lease, and not ErrFinal: nothing was stored, and
		// the next caller runs fn again.
		tx.rollback(wctx())
		outcome, cause := "its value", error(nil)
		if fnErr != nil {
			var f *finalMark
			errors.As(fnErr, &f)
			outcome, cause = fmt.Sprintf("a Final outcome (%q)", storableText(errText(fnErr))), f.err
		}
		msg := fmt.Sprintf("fn returned %s, but fn's transaction had been aborted by a failed statement, so the outcome "+
			"could not be recorded in it: rolled back, nothing was committed, the key is free (the next caller runs fn again)", outcome)
		release("rolled_back", "error", msg+": "+err.Error())
		if cause != nil {
			return res, fmt.Errorf("sentinel: %s %q/%q: %s: %w (fn's error: %w)", what, o.namespace, key, msg, err, cause)
		}
		return res, fmt.Errorf("sentinel: %s %q/%q: %s: %w", what, o.namespace, key, msg, err)
	}
	if err != nil {
		tx.rollback(wctx())
		release("rolled_back", "error", err.Error())
		// withLoss: a lease lost since fn returned cancelled fnCtx, so the
		// statement failed with fnCtx's error; the caller must learn of the
		// loss (ErrLeaseLost, ErrHardTTL), as OnceTx documents.
		if ended := l.ended(); ended != nil && errors.Is(ended, ErrClosed) {
			// Client.Close cancelled fnCtx while fn ran: not a loss to
			// another caller; the key was given back just above.
			return res, fmt.Errorf("sentinel: %s %q/%q: Client.Close cut fn's transaction off before its completion: rolled back, nothing was committed, "+
				"and the key is given back (the next call runs fn again; let running calls return before Close): %w", what, o.namespace, key, withLoss(l, mapDBErr(c.cfg.Schema, err)))
		}
		return res, fmt.Errorf("sentinel: %s %q/%q: completion refused, nothing was committed: %w", what, o.namespace, key, withLoss(l, mapDBErr(c.cfg.Schema, err)))
	}
	done := func() (Result[T], error) {
		c.done.add(o.namespace, key) // committed: completed (replayhint.go)
		res.Value = value
		if fnErr != nil {
			return res, &FinalError{Namespace: o.namespace, Key: key, Token: l.token, Message: storableText(errText(fnErr)), Err: fnErr}
		}
		return res, nil
	}
	if cerr := tx.commit(wctx()); cerr != nil {
		// The commit's outcome is unknown: the row tells, since the
		// completion and fn's writes commit or vanish together. Each
		// statement that settles it gets a bound of its own: a commit
		// that never answered spent wctx's, and the caller's ctx may have
		// ended, and either would leave uncertain a key that a give-back
		// can prove untouched.
		settle := func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ReleaseTimeout)
		}
		sctx, scancel := settle()
		committed, rerr := c.committed(sctx, o.namespace, key, l.token)
		scancel()
		switch {
		case rerr != nil:
			return res, c.commitUnknown(l, o, fmt.Errorf("commit failed (%v) and reading the key back failed too (%w): "+
				"the key is either completed (fn's writes committed) or claimed until its lease expires (nothing committed); call again after its TTL to learn which", cerr, rerr))
		case committed:
			return done()
		}
		// Read as claimed, the commit may still be in flight (its reply
		// lost while it waited, say, for a synchronous standby): it holds
		// the row until it ends, so the give-back waits for it, and finds
		// the key completed when it landed. Only a give-back that applied
		// proves that nothing was committed.
		sctx, scancel = settle()
		gave, ferr := c.finish(sctx, l, o, StateClaimed, nil, "", "", []State{StateClaimed}, false,
			"rolled_back", "error", cerr.Error())
		scancel()
		if ferr != nil || !gave {
			// The give-back waited for the commit (and a give-back that did
			// not apply ran after it): the row now tells, unless the
			// give-back failed, when the commit may still be in flight.
			sctx, scancel := settle()
			committed, rerr := c.committed(sctx, o.namespace, key, l.token)
			scancel()
			switch {
			case rerr == nil && committed:
				return done()
			case ferr != nil || rerr != nil:
				if ferr == nil {
					ferr = rerr
				}
				return res, c.commitUnknown(l, o, fmt.Errorf("commit failed (%v) and neither giving the key back nor reading it "+
					"settled whether it landed (%w): the key is either completed (fn's writes committed) or still held by this "+
					"attempt until its lease expires (nothing committed); call again after its TTL to learn which", cerr, ferr))
			}
		}
		return res, fmt.Errorf("sentinel: %s %q/%q: commit failed, nothing was committed: %w", what, o.namespace, key, cerr)
	}
	return done()
}

// txAborted reports whether err says that the transaction was aborted by
// an earlier failed statement (SQLSTATE 25P02, in_failed_sql_transaction).
func txAborted(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "25P02"
}
