package sentinel

// This file: Once's finish: the statement that records an outcome (finish, sqlFinish), a refused or failed one (recordRefused, handBackFailed, movedOn), and the uncertain outcome reported to the caller (uncertain, uncertainIn, uncertainRun).

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"
)

// recordRefused appends a completion_refused event with fn's encoded
// result: the evidence an operator needs to tell "fn succeeded" from a
// crash. It writes no state. rerun: the attempt had re-runs left
// (WithRerun), so the key is not uncertain (the next caller with
// WithRerun runs fn again, or a re-run took the key over already) and the
// refusal is logged at Info, not as the Warn that asks for an operator.
func (c *Client) recordRefused(ctx context.Context, l *Lease, o callOptions, data []byte, resultErr, finalMsg string, cause error, rerun bool) (read *Execution) {
	extra := []any{"cause", cause.Error()}
	switch {
	case data != nil && json.Valid(data) && bytes.Equal(storableJSON(data), data):
		extra = append(extra, "result", json.RawMessage(data))
	case data != nil:
		extra = append(extra, "result_base64", base64.StdEncoding.EncodeToString(data))
	}
	if resultErr != "" {
		extra = append(extra, "result_error", resultErr)
	}
	if finalMsg != "" {
		extra = append(extra, "final_error", finalMsg)
	}
	meta, err := metadataJSON(o.metadata, extra...)
	if err != nil {
		meta, _ = metadataJSON(nil, "cause", cause.Error())
	}
	state := StateExecuting
	if ex, err := c.readExecution(ctx, l.ns, l.key); err == nil {
		state, read = ex.State, ex
	}
	if _, err := c.pool.Exec(ctx, c.exe.insertEvent, l.ns, l.key, "completion_refused", string(state), l.token, l.owner, meta); err != nil {
		c.cfg.Logger.Error("sentinel: could not record a refused completion; fn had succeeded",
			"namespace", l.ns, "key", l.key, "token", l.token, "err", err)
	}
	if rerun {
		c.cfg.Logger.Info("sentinel: completion refused; the key is left for a re-run (WithRerun): the next Once call with WithRerun runs fn again, unless a re-run took it over already",
			"namespace", l.ns, "key", l.key, "token", l.token, "cause", cause)
		return read
	}
	c.cfg.Logger.Warn("sentinel: completion refused; the key is uncertain",
		"namespace", l.ns, "key", l.key, "token", l.token, "cause", cause)
	return read
}

// readInto fills the lease's end and Since of err, an *ExecutionError for
// the attempt holding token, from ex, the key's row as the call read it on
// the way (nil: not read), when the row is still that attempt's.
func readInto(err error, ex *Execution, token int64) error {
	if ee, ok := err.(*ExecutionError); ok && ex != nil && ex.Token == token {
		ee.LeaseExpiresAt, ee.Since = ex.LeaseExpiresAt, ex.Since()
	}
	return err
}

// handBackFailed establishes, on a fresh context bounded by ReleaseTimeout,
// what a failed hand-back of a Retryable outcome (ferr: ReleaseTimeout ran
// out while another transaction held the row, the database unreachable)
// left. landed: the key is as the hand-back leaves it (it landed before
// its reply was lost; or, in a re-run, the key is still this attempt's,
// executing, and its lease ends at its expiry instead of now, which
// leaves it for the next re-run all the same), and the caller goes on as
// if it had succeeded. Neither landed nor err: the key moved on (the
// caller explains it as for a refused hand-back). Otherwise err: the key
// is still executing under this attempt's lease, or it could not be read;
// the heartbeat stopped, so the lease expires and the key is then
// uncertain for every later caller (a WithRerun caller re-runs it when
// attempts are left), unless the hand-back, if its statement is still
// waiting for the row, lands first. A Retryable error would tell the
// caller to retry now, where a retry gets ErrInProgress and then
// ErrUncertain: err matches ErrUncertain, wraps fn's error, says when the
// lease expires and what later callers get, and the history records fn's
// error in a retryable event, for the operator who finds the key
// uncertain.
func (c *Client) handBackFailed(ctx context.Context, l *Lease, o callOptions, fnCtx context.Context, fnErr, ferr error) (landed bool, err error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ReleaseTimeout)
	defer cancel()
	ex, rerr := c.readExecution(rctx, l.ns, l.key)
	if rerr == nil && (ex.Token != l.token || ex.Owner != l.owner) {
		return false, nil // moved on
	}
	if rerr == nil {
		switch attempt := Attempt(fnCtx); {
		case ex.State == StateClaimed && attempt <= 1 && !ex.LeaseAlive:
			c.wake("", payload(notifyExecution, l.ns, l.key)) // landed: its waiters may not have been woken
			return true, nil
		case ex.State == StateExecuting && attempt > 1:
			return true, nil
		case ex.State != StateExecuting:
			return false, nil
		}
	}
	meta, merr := metadataJSON(o.metadata, "error", errText(fnErr), "handback_error", ferr.Error())
	if merr != nil {
		meta, _ = metadataJSON(nil, "error", errText(fnErr))
	}
	if _, eerr := c.pool.Exec(rctx, c.exe.insertEvent, l.ns, l.key, "retryable", string(StateExecuting), l.token, l.owner, meta); eerr != nil {
		c.cfg.Logger.Error("sentinel: could not record fn's retryable error after its hand-back failed",
			"namespace", l.ns, "key", l.key, "token", l.token, "err", eerr)
	}
	after := "then every later caller gets ErrUncertain until an operator resets it (Reconcile, then ResetToClaimed: fn reported no effect)"
	if rerunPending(fnCtx) {
		after = "then the next Once call with WithRerun runs it again, and any other caller gets ErrUncertain"
	}
	var cause error
	if rerr != nil {
		cause = fmt.Errorf("fn reported that nothing happened (%w), but handing the key back failed (%v) and reading it back failed too (%v): "+
			"either the hand-back landed, and the next caller runs fn, or the key is still executing, held by this attempt until its lease expires "+
			"(by %s; later callers get ErrInProgress until then), and %s",
			fnErr, ferr, rerr, l.Deadline().UTC().Format(time.RFC3339Nano), after)
	} else {
		cause = fmt.Errorf("fn reported that nothing happened (%w), but handing the key back failed (%v): the key is still executing, "+
			"held by this attempt until its lease expires (later callers get ErrInProgress until then), and %s, "+
			"unless the hand-back, if still waiting for the key's row, lands first and frees the key for the next caller",
			fnErr, ferr, after)
	}
	if rerr != nil {
		ex = nil
	}
	return false, readInto(c.uncertainRun(l, o, fnCtx, cause), ex, l.token)
}

// movedOn explains a Retryable outcome that could not put the key back:
// the key moved on while fn ran (an operator reconciled it, or it was
// resolved).
func (c *Client) movedOn(ctx context.Context, l *Lease, o callOptions, fnErr error) error {
	ex, err := c.readExecution(ctx, l.ns, l.key)
	if err != nil {
		return fmt.Errorf("%w (and the key could not be released: it moved on; reading it failed: %v)", fnErr, err)
	}
	kind := ErrWrongState
	if ex.State == StateReconciling {
		kind = ErrReconciling
	}
	return &ExecutionError{Kind: kind, Namespace: ex.Namespace, Key: ex.Key, State: ex.State, Owner: ex.Owner,
		Token: ex.Token, LeaseExpiresAt: ex.LeaseExpiresAt, Since: ex.Since(),
		Cause: fmt.Errorf("fn reported a retryable error, but the key moved on while fn ran (token %d, now %d), so it was not released for the next caller: %w",
			l.token, ex.Token, fnErr)}
}

// finish moves the execution held by l to state `to`, retrying transient
// errors until the lease's database expiry could have passed. It reports
// whether the transition was applied. When the outcome of the last attempt
// is unknown (its reply was lost, or ctx ran out), the row is read back on
// a fresh bounded context: a completion that landed is reported applied.
//
// requireAlive (the completion): the statement applies only while the
// lease is live on the database clock, so the lease's end while it is in
// flight (its local deadline passed) is reported (log, Observer) once the
// outcome is known, as for a Release: none when it was applied, which
// ends the lease released; the loss otherwise.
func (c *Client) finish(ctx context.Context, l *Lease, o callOptions, to State, result []byte, resultErr, finalMsg string,
	from []State, requireAlive bool, event string, meta ...any) (applied bool, err error) {
	if requireAlive {
		l.beginRelease()
		defer func() {
			if applied {
				l.endReleased(nil) // it was live when the statement applied
			}
			l.endRelease()
		}()
	}
	c.hb.remove(l) // no renewal may race with the final transition
	md, merr := metadataJSON(o.metadata, meta...)
	if merr != nil {
		md = nil
	}
	var resErr, finErr any
	if resultErr != "" {
		resErr = storableText(resultErr)
	}
	if finalMsg != "" {
		finErr = storableText(finalMsg)
	}
	// Plain strings, not State: without prepared statements (PgBouncer)
	// pgx cannot encode a named string type it has no OID for.
	fromStates := make([]string, len(from))
	for i, f := range from {
		fromStates[i] = string(f)
	}
	giveUp := l.Deadline().Add(l.margin)
	for {
		var (
			n      int64
			waited bool
		)
		err = c.co.queryRow(ctx, ctx, coFinish, c.exe.finish, l.ns, l.key, l.owner, l.token, string(to), result, resErr,
			fromStates, requireAlive, event, md, finErr).Scan(&n, &waited)
		if err == nil {
			if n == 1 {
				if to == StateCompleted {
					c.done.add(l.ns, l.key)
				}
				if waited {
					// After the commit (see sqlFinish); the schema's
					// channel: the waiters may be in any process.
					c.wake("", payload(notifyExecution, l.ns, l.key))
				}
				return true, nil
			}
			// Maybe an earlier attempt landed before its reply was lost:
			// the row is at this claim's token in the target state (a
			// give-back: with its lease ended), which only this
			// transition writes. Its waiters may not have been woken.
			ex, rerr := c.readExecution(ctx, l.ns, l.key)
			landed := rerr == nil && ex.Token == l.token && ex.Owner == l.owner && ex.State == to &&
				(to == StateCompleted || to == StateClaimed && !ex.LeaseAlive)
			if landed {
				c.wake("", payload(notifyExecution, l.ns, l.key))
			}
			return landed, nil
		}
		if !transient(err) || ctx.Err() != nil || time.Now().After(giveUp) {
			err = c.wrapErr(fmt.Sprintf("record %s for %q/%q", event, l.ns, l.key), err)
			if to == StateCompleted {
				// Establish the truth on a fresh context: the statement
				// may have committed before its reply was lost.
				if done, rerr := c.committed(ctx, l.ns, l.key, l.token); rerr == nil && done {
					c.wake("", payload(notifyExecution, l.ns, l.key)) // its waiters may not have been woken
					return true, nil
				}
			}
			return false, err
		}
		c.cfg.Logger.Warn("sentinel: recording outcome failed; retrying", "key", l.key, "event", event, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// sqlFinish moves a claim held by ($3 owner, $4 token) from one of the
// states $8 to state $5, guarded by owner, token and state, and by a live
// lease when $9. Completion stores the result ($6, $7, $12 final error) and
// drops the lease; any other target ends the lease now. $10 event,
// $11 metadata. It returns the count of rows changed (0 or 1), then
// {{waited}} decides the rest (newExecSQL fills it in):
//
//   - Once (finish): whether callers wait for the key (waiters > 0). The
//     statement sends no NOTIFY: the caller wakes them after the commit
//     (Client.wake, wake.go), as a handover does, so that completions
//     of many keys with waiters share WAL flushes instead of queuing on
//     the database's notify lock across each one's flush.
//   - OnceTx (finishTx): it runs in the caller's transaction, whose
//     commit the library does not see, so it notifies the waiters on
//     channel $13 in the statement (sent when that transaction commits,
//     never if it rolls back).
const sqlFinish = `
WITH u AS (
    UPDATE {{schema}}.executions t SET
        state = $5,
        result = CASE WHEN $5 = 'completed' THEN $6::bytea ELSE t.result END,
        result_error = CASE WHEN $5 = 'completed' THEN $7::text ELSE t.result_error END,
        final_error = CASE WHEN $5 = 'completed' THEN $12::text ELSE t.final_error END,
        result_by_operator = CASE WHEN $5 = 'completed' THEN false ELSE t.result_by_operator END,
        completed_at = CASE WHEN $5 = 'completed' THEN pg_catalog.statement_timestamp() ELSE t.completed_at END,
        lease_expires_at = CASE WHEN $5 = 'completed' THEN NULL ELSE least(t.lease_expires_at, pg_catalog.statement_timestamp()) END,
        updated_at = pg_catalog.statement_timestamp()
    WHERE t.namespace = $1 AND t.key = $2 AND t.owner = $3 AND t.token = $4
      AND t.state = ANY($8::text[]) AND (NOT $9::bool OR t.lease_expires_at > pg_catalog.clock_timestamp())
    RETURNING t.token, t.state, {{waited}}
),
ev AS (
    INSERT INTO {{schema}}.events (namespace, key, event, state, token, owner, metadata)
    SELECT $1, $2, $10, u.state, u.token, $3, $11::jsonb FROM u
)
SELECT pg_catalog.count(*){{waitedcol}} FROM u`

// The parts of sqlFinish that differ between Once and OnceTx (see there).
const (
	finishWaited      = `t.waiters > 0 AS waited`
	finishWaitedCol   = `, coalesce(pg_catalog.bool_or(u.waited), false)`
	finishTxNotify    = `CASE WHEN t.waiters > 0 THEN pg_catalog.pg_notify($13, 'e' || pg_catalog.octet_length(t.namespace)::text || ':' || t.namespace || t.key)::text END AS waited`
	finishTxWaitedCol = ``
)

// uncertain reports, to the caller (an *ExecutionError matching
// ErrUncertain, with the command that shows the key) and in a warning, an
// execution whose outcome is unknown: a person has to reconcile it.
func (c *Client) uncertain(l *Lease, o callOptions, cause error) error {
	return c.uncertainIn(l, o, StateExecuting, cause)
}

// uncertainIn is uncertain for a key left in state st.
func (c *Client) uncertainIn(l *Lease, o callOptions, st State, cause error) error {
	c.cfg.Logger.Warn("sentinel: execution outcome uncertain; reconcile it", "namespace", o.namespace, "key", l.key,
		"token", l.token, "cause", cause, "inspect", c.inspectCommand(o.namespace, l.key))
	return &ExecutionError{Kind: ErrUncertain, Namespace: o.namespace, Key: l.key, State: st,
		Owner: l.owner, Token: l.token, Cause: cause, look: c.inspectCommand(o.namespace, l.key)}
}

// commitUnknown is the error of an OnceTx whose commit's outcome could not
// be established: its key is completed, if the commit landed, or still
// claimed by this attempt until its lease expires, then free; never
// executing, never uncertain in the operator's tools. It settles without
// an operator (ExecutionError.Settles): the log warns of the database's
// trouble but asks nobody to reconcile the key.
func (c *Client) commitUnknown(l *Lease, o callOptions, cause error) error {
	c.cfg.Logger.Warn("sentinel: commit not confirmed and the key not read back; it settles without an operator "+
		"(completed if the commit landed, else free for the next call once its lease expires)", "namespace", o.namespace, "key", l.key,
		"token", l.token, "cause", cause, "inspect", c.inspectCommand(o.namespace, l.key))
	return &ExecutionError{Kind: ErrUncertain, Namespace: o.namespace, Key: l.key, State: StateClaimed,
		Owner: l.owner, Token: l.token, Cause: cause, look: c.inspectCommand(o.namespace, l.key), Settles: true}
}

// uncertainRun is uncertain for a Once attempt that stopped without an
// outcome (fnCtx is its fn's context): under WithRerun with attempts left,
// the next caller with WithRerun runs the key again, so no operator is
// needed yet: the error says so (ExecutionError.Rerun, counted as
// OutcomeRerunPending) and the log is Info, not the Warn that asks a
// person to reconcile the key.
func (c *Client) uncertainRun(l *Lease, o callOptions, fnCtx context.Context, cause error) error {
	if !rerunPending(fnCtx) {
		return c.uncertain(l, o, cause)
	}
	c.cfg.Logger.Info("sentinel: attempt stopped without an outcome; the next Once call with WithRerun runs it again",
		"namespace", o.namespace, "key", l.key, "token", l.token, "cause", cause, "inspect", c.inspectCommand(o.namespace, l.key))
	// The key's bound, recorded by this attempt's claim, is at most the
	// caller's: attempts left for the key are left for this caller.
	return &ExecutionError{Kind: ErrUncertain, Namespace: o.namespace, Key: l.key, State: StateExecuting,
		Owner: l.owner, Token: l.token, Cause: cause, look: c.inspectCommand(o.namespace, l.key), Rerun: true, rerunHere: true}
}
