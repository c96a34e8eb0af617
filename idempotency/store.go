package idempotency

// This file: What the middleware asks of the store besides Once: the transactional reset of the handler's timeouts, which commit failures are the handler's, and reading a key's request back (differs, fingerprintOf, rerunnable).

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sentinel-coordination/sentinel"
)

// resetTimeouts puts back, for the rest of a transactional request's
// transaction, the timeouts a handler may have set for its own statements
// with SET LOCAL (or set_config(..., true)) in Tx: the statement that
// stores the response and the commit run in the same transaction, and ran
// under the handler's statement_timeout, lock_timeout and
// idle_in_transaction_session_timeout, so that a handler's
// "SET LOCAL lock_timeout = '1ms'" failed the completion whenever another
// session held the key's row (55P03), and its statement_timeout one that
// took longer (57014): the store's failures, answered 503 and retried
// with the same outcome. DEFAULT is the connection's configured value (the
// server's, the role's or database's, the connection string's), under
// which the store's statements run outside the transaction; they are
// bounded by the request's lease besides.
const resetTimeouts = "SET LOCAL statement_timeout TO DEFAULT; SET LOCAL lock_timeout TO DEFAULT; " +
	"SET LOCAL idle_in_transaction_session_timeout TO DEFAULT"

// storeSettings runs resetTimeouts in a transactional request's tx, after
// the handler and before the completion. A transaction the handler closed
// itself is left for OnceTx to find (the key is then uncertain, as
// documented); any other failure is the store's.
func storeSettings(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, resetTimeouts); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return fmt.Errorf("idempotency: reset the handler's timeouts before storing the response: %w", err)
	}
	return nil
}

// commitRefusedForHandler reports whether err, from a transactional
// request whose handler answered, is the commit refused for what the
// handler did: a deferred constraint (class 23) or a deferred constraint
// trigger's error, whatever its SQLSTATE (P0001 from RAISE, a code of the
// handler's own such as S0001, a 22 data exception, a 42501 its body
// hit), proven to have committed nothing. The claim had just written to
// the store's own table, so what is deterministic at the completion and
// commit comes from the handler's writes and its session. The store's are
// the transient classes, after which a retry is right: connection
// exception (08), transaction rollback (40: a serialization failure, a
// deadlock), insufficient resources (53), operator intervention (57: an
// administrator's shutdown, a cancelled statement), system error (58),
// snapshot too old (72), configuration file error (F0), internal error
// (XX, what PostgreSQL raises for its own faults), a lock not available
// (55P03), a read-only transaction (25006: the connection landed on a
// standby after a failover, or on a primary fenced read-only for one); and
// every error without a SQLSTATE (a connection refused or cut, a lost
// lease). Those stay 503. (A handler that made its own transaction read
// only, SET TRANSACTION READ ONLY, gets 503 too: its request cannot be
// recorded.)
func commitRefusedForHandler(err error) bool {
	if errors.Is(err, sentinel.ErrLeaseLost) || errors.Is(err, sentinel.ErrUncertain) {
		return false
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || len(pgErr.Code) != 5 {
		return false
	}
	switch pgErr.Code[:2] {
	case "08", "40", "53", "57", "58", "72", "F0", "XX":
		return false
	}
	return pgErr.Code != "55P03" && pgErr.Code != "25006"
}

// namespace is the namespace of the middleware's keys.
func (m *middleware) namespace() string {
	if m.o.Namespace != "" {
		return m.o.Namespace
	}
	return m.c.Config().Namespace
}

// execErr returns the *sentinel.ExecutionError in err, or one naming only
// the key.
func execErr(err error, onceKey string) *sentinel.ExecutionError {
	var ee *sentinel.ExecutionError
	if errors.As(err, &ee) {
		return ee
	}
	return &sentinel.ExecutionError{Key: onceKey}
}

// differs reports whether the execution ee was started by a request with
// another fingerprint, as recorded with its claim. Unknown counts as same.
func (m *middleware) differs(ctx context.Context, ee *sentinel.ExecutionError, fp string) bool {
	if ee == nil {
		return false
	}
	if ee.State == sentinel.StateReconciling {
		// Reconcile minted a token of its own: the request being
		// reconciled is the last claim of the key's run (as Resolve reads it).
		ns := ee.Namespace
		if ns == "" {
			ns = m.namespace()
		}
		evs, err := m.c.LastRun(ctx, ee.Key, sentinel.WithNamespace(ns))
		req, known := RequestOf(evs)
		return err == nil && known && req.Fingerprint != "" && req.Fingerprint != fp
	}
	got, known, err := m.fingerprintOf(ctx, ee.Namespace, ee.Key, ee.Token)
	return err == nil && known && got != fp
}

// fingerprintOf returns the fingerprint of the request that started the
// execution at token, as recorded with its claim; known is false when no
// claim at token records one, or when the key was claimed again since (the
// key's last run is read, not its whole history).
func (m *middleware) fingerprintOf(ctx context.Context, ns, onceKey string, token int64) (fp string, known bool, err error) {
	evs, err := m.c.LastRun(ctx, onceKey, sentinel.WithNamespace(ns))
	if err != nil {
		return "", false, err
	}
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type == "claimed" && evs[i].Token == token {
			fp, known = evs[i].Metadata["fingerprint"].(string)
			return fp, known, nil
		}
	}
	return "", false, nil
}

// rerunGuard is the guard Once asks before it re-runs the stopped attempt
// token of key for a request with fingerprint fp: only a repeat of the
// same request re-runs it. An attempt superseded since Once's claim read
// it (a concurrent repeat re-ran the key: its last run was claimed at a
// later token) is approved: Once's next claim may take over only that
// attempt, which it no longer can, and finds the key as it is now (the
// re-run in progress, a later attempt to guard again, a completed key).
// Refused, the repeat would get ErrUncertain for a key being re-run, and
// the client a problem saying nobody runs it. A read cut short by the end
// of ctx (Options.Wait ran out, the client left) fails with ctx's cause,
// as the claim it stands for would: a wait that ran out is 409, not a
// failure of the store (503, logged at Error). waiting: the request waits
// (Options.Wait); a stopped attempt of the same request is then left for
// the request to re-run after its wait (errRerunAfterWait, with the key's
// ExecutionError, rerun pending), not approved.
func (m *middleware) rerunGuard(fp string, waiting bool) func(ctx context.Context, ns, key string, token int64) (bool, error) {
	return func(ctx context.Context, ns, key string, token int64) (bool, error) {
		evs, err := m.c.LastRun(ctx, key, sentinel.WithNamespace(ns))
		if err != nil && ctx.Err() != nil {
			return false, fmt.Errorf("%w (reading the key's last run to re-run it: %w)", context.Cause(ctx), err)
		}
		if err != nil {
			return false, err
		}
		for i := len(evs) - 1; i >= 0; i-- {
			if evs[i].Type != "claimed" {
				continue
			}
			if evs[i].Token != token {
				return evs[i].Token > token, nil // superseded, or not that attempt's run
			}
			got, known := evs[i].Metadata["fingerprint"].(string)
			if known && got == fp && waiting {
				// As the call ends: the key rerun pending (so the
				// Observer counts it, OutcomeRerunPending, not an error).
				return false, fmt.Errorf("%w: %w", errRerunAfterWait, &sentinel.ExecutionError{Kind: sentinel.ErrUncertain,
					Namespace: ns, Key: key, State: sentinel.StateExecuting, Token: token, Rerun: true})
			}
			return known && got == fp, nil
		}
		return false, nil
	}
}

// rerunnable reports whether, with Options.Rerun, a repeat of the request
// of the uncertain execution ee runs the handler again; ex is the key's
// execution then, nil when it could not be read or has moved on. ran: this
// request ran the handler, whose attempt is ee's. A read that failed (a
// statement cancelled, a connection cut as the database fails over) is
// not a key that needs an operator: ee, the call's own error, tells
// whether the key was left to a re-run (ExecutionError.Rerun) when the
// call returned. Nor is a key that moved on after this request's own
// attempt stopped, left to a re-run under this server's bound (the key's
// is at most the caller's): a repeat, racing this read (a client's retry,
// a waiter of Options.Wait), re-ran it, and the next repeat gets what
// that re-run gives; this server did not refuse to re-run it.
func (m *middleware) rerunnable(ctx context.Context, ee *sentinel.ExecutionError, ran bool) (*sentinel.Execution, bool) {
	if m.o.Rerun <= 1 || ee == nil || ee.Namespace == "" {
		return nil, false
	}
	ex, err := m.c.Inspect(ctx, ee.Key, sentinel.WithNamespace(ee.Namespace))
	if err != nil {
		return nil, ee.Rerun && !errors.Is(err, sentinel.ErrNotFound)
	}
	if ex.Token != ee.Token || !ex.Rerunnable() || ex.Attempt >= m.o.Rerun {
		return nil, ran && ee.Rerun
	}
	return ex, true
}
