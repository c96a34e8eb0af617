package sentinel

// This file: an operator's transitions of a Once key (Reconcile, ForceComplete, ResetToClaimed, SetResult), their statements, and the checks of stored values (RegisterResultCheck).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// Reconcile starts an operator's reconciliation of an uncertain key: it
// moves it from executing with an expired lease to reconciling and mints a
// new fencing token, so the worker that held it can no longer complete it.
// While reconciling, Once callers get ErrReconciling. Finish with
// ForceComplete (the work did happen) or ResetToClaimed (it did not).
//
// The row's owner, host and pid become this client's (Config.Owner, Host,
// PID), as for ForceComplete and ResetToClaimed; the history event
// (reconciling) keeps the worker's in its metadata: previous_owner,
// previous_host, previous_pid and previous_token, so where the stopped
// attempt ran can still be found.
//
// From any other state it writes nothing and returns an *ExecutionError
// matching ErrWrongState with the current state (ErrNotFound when the key
// has no execution). Options: WithNamespace, WithMetadata (recorded in the
// history, e.g. who reconciled and why), WithToken (act only if the key is
// still at that token, e.g. the one Inspect showed).
// A nil ctx is refused (ErrInvalid).
func (c *Client) Reconcile(ctx context.Context, key string, opts ...Option) (*Execution, error) {
	if err := checkCtx("Client.Reconcile", ctx); err != nil {
		return nil, err
	}
	return c.operate(ctx, key, opts, StateExecuting, StateReconciling, true, nil, "reconciling")
}

// ForceComplete resolves a reconciling key as done with value as its
// result (encoded with WithCodec, JSON by default); later Once callers get
// value as a cached result. Only allowed from reconciling. Pass
// WithToken(exec.Token) with the token Reconcile returned so that a second
// operator's reconciliation cannot be resolved by mistake.
//
// The value is checked before anything is written. A JSON value that does
// not match the result type declared for the key (RegisterResultType)
// returns a *ResultTypeError matching ErrResultType, naming the JSON path
// of the first error. A value that a check registered with
// RegisterResultCheck refuses (for example a value that is not an HTTP
// response, for a key of package idempotency) returns an error matching
// ErrInvalid. Without a declared type, a value that does not fit the
// callers' type is stored, and each caller gets an error matching
// ErrResult instead of it (see Once), never a zero value.
// A nil ctx is refused (ErrInvalid).
func (c *Client) ForceComplete(ctx context.Context, key string, value any, opts ...Option) error {
	if err := checkCtx("Client.ForceComplete", ctx); err != nil {
		return err
	}
	_, data, err := c.operatorValue(ctx, "ForceComplete", key, value, opts)
	if err != nil {
		return err
	}
	_, err = c.operate(ctx, key, opts, StateReconciling, StateCompleted, false, data, "force_completed")
	return err
}

// ResetToClaimed resolves a reconciling key as not done: it becomes claimed
// with an expired lease, so the next Once caller runs fn (with a new
// token). Only allowed from reconciling; WithToken guards it as for
// ForceComplete. A nil ctx is refused (ErrInvalid).
func (c *Client) ResetToClaimed(ctx context.Context, key string, opts ...Option) error {
	if err := checkCtx("Client.ResetToClaimed", ctx); err != nil {
		return err
	}
	_, err := c.operate(ctx, key, opts, StateReconciling, StateClaimed, false, nil, "reset")
	return err
}

func (c *Client) operate(ctx context.Context, key string, opts []Option, from, to State, mint bool, result []byte, event string) (*Execution, error) {
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	takes := takesMetadata | takesToken
	if event == "force_completed" {
		takes |= takesCodec // ForceComplete's value, encoded by operatorValue
	}
	o, err := c.resolve(key, opts, onlyTakes(operatorMethods[event], takes))
	if err != nil {
		return nil, err
	}
	meta, err := metadataJSON(o.metadata, "operator", c.cfg.Owner)
	if err != nil {
		return nil, err
	}
	var applied bool
	ex, err := scanExecution(c.pool.QueryRow(ctx, c.exe.operator, o.namespace, key, string(from), string(to), mint, c.cfg.Owner,
		result, event, meta, o.token, c.cfg.Host, c.cfg.PID), &applied)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("sentinel: %s %q/%q: no such execution: %w", operatorMethods[event], o.namespace, key, ErrNotFound)
	}
	if err != nil {
		return nil, c.wrapErr(fmt.Sprintf("%s %q/%q", operatorMethods[event], o.namespace, key), err)
	}
	if !applied {
		method := operatorMethods[event]
		cause := fmt.Errorf("%s requires state %s, the key is %s", method, from, ex.State)
		switch {
		case ex.State == from && o.token != 0 && ex.Token != o.token:
			cause = fmt.Errorf("%s expected token %d, the key is at token %d: it moved on; Inspect it again", method, o.token, ex.Token)
		case from == StateExecuting && ex.State == StateExecuting:
			cause = fmt.Errorf("%s requires an expired lease; the executor's lease is alive until %s: it may still finish",
				method, ex.LeaseExpiresAt.UTC().Format(time.RFC3339Nano))
		}
		return ex, &ExecutionError{Kind: ErrWrongState, Namespace: ex.Namespace, Key: ex.Key, State: ex.State,
			Owner: ex.Owner, Token: ex.Token, LeaseExpiresAt: ex.LeaseExpiresAt, Since: ex.Since(), Cause: cause}
	}
	c.cfg.Logger.Info("sentinel: reconciliation step", "step", operatorMethods[event], "namespace", ex.Namespace,
		"key", ex.Key, "token", ex.Token, "state", ex.State, "operator", c.cfg.Owner)
	return ex, nil
}

// operatorMethods names the method behind each operator event, for errors.
var operatorMethods = map[string]string{
	"reconciling":     "Reconcile",
	"force_completed": "ForceComplete",
	"reset":           "ResetToClaimed",
	"result_set":      "SetResult",
}

// SetResult stores value as the result of a key that completed without one
// (fn succeeded but its result could not be encoded, or was over
// MaxResultSize, so every caller got ErrResult), or replaces a result an
// operator stored (Execution.ResultByOperator) that the callers cannot
// decode. Afterwards callers get value as the cached result. It is allowed
// only for such a key; anything else (a result fn stored, a Final
// outcome, another state) is refused with ErrWrongState and nothing is
// written. value is encoded
// with WithCodec (JSON by default) and checked as by ForceComplete.
// WithToken pins it to the execution the operator inspected; WithMetadata
// is recorded in the history (event result_set).
// A nil ctx is refused (ErrInvalid).
func (c *Client) SetResult(ctx context.Context, key string, value any, opts ...Option) error {
	if err := checkCtx("Client.SetResult", ctx); err != nil {
		return err
	}
	o, data, err := c.operatorValue(ctx, "SetResult", key, value, opts)
	if err != nil {
		return err
	}
	meta, err := metadataJSON(o.metadata, "operator", c.cfg.Owner)
	if err != nil {
		return err
	}
	var applied bool
	ex, err := scanExecution(c.pool.QueryRow(ctx, c.exe.setResult, o.namespace, key, data, o.token, c.cfg.Owner, meta), &applied)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("sentinel: SetResult %q/%q: no such execution: %w", o.namespace, key, ErrNotFound)
	}
	if err != nil {
		return c.wrapErr(fmt.Sprintf("SetResult %q/%q", o.namespace, key), err)
	}
	if !applied {
		cause := errors.New("SetResult requires a completed key whose result could not be stored, or was stored by an operator")
		if ex.State == StateCompleted && ex.FinalError != "" {
			cause = errors.New("SetResult refused: the key completed with a Final outcome, which every caller gets (ErrFinal), not a result lost")
		} else if ex.State == StateCompleted && ex.ResultError == "" && !ex.ResultByOperator {
			cause = errors.New("SetResult refused: the key already has the result its fn stored")
		} else if o.token != 0 && ex.Token != o.token {
			cause = fmt.Errorf("SetResult expected token %d, the key is at token %d", o.token, ex.Token)
		}
		return &ExecutionError{Kind: ErrWrongState, Namespace: ex.Namespace, Key: ex.Key, State: ex.State,
			Owner: ex.Owner, Token: ex.Token, LeaseExpiresAt: ex.LeaseExpiresAt, Since: ex.Since(), Cause: cause}
	}
	c.cfg.Logger.Info("sentinel: operator set the result of a completed key", "namespace", o.namespace, "key", key, "token", ex.Token)
	return nil
}

// operatorValue resolves an operator call that stores value, encodes
// value with the call's codec (JSON by default), within MaxResultSize, and
// checks it: the registered result checks, then, for JSON values, that
// JSON carries it (jsonCarried) and the result type declared for the key
// (one statement).
func (c *Client) operatorValue(ctx context.Context, call, key string, value any, opts []Option) (callOptions, []byte, error) {
	o, err := c.resolve(key, opts, onlyTakes(call, takesCodec|takesMetadata|takesToken))
	if err != nil {
		return o, nil, err
	}
	codec := o.codec
	if codec == nil {
		codec = JSONCodec{}
	}
	data, err := codec.Encode(value)
	if err != nil {
		return o, nil, fmt.Errorf("%w: encode the result for %q/%q: %w", ErrResult, o.namespace, key, err)
	}
	if len(data) > c.cfg.MaxResultSize {
		return o, nil, invalid("value", "encodes to %d bytes, over MaxResultSize %d", len(data), c.cfg.MaxResultSize)
	}
	if err := checkResult(key, data); err != nil {
		return o, nil, err
	}
	if _, isJSON := codec.(JSONCodec); isJSON {
		if err := jsonCarried(data); err != nil {
			return o, nil, err
		}
		if err := c.checkOperatorValue(ctx, o.namespace, key, data); err != nil {
			return o, nil, err
		}
	}
	return o, data, nil
}

// jsonCarried refuses (ErrInvalid) a JSON value an operator stores that
// no caller would get back as written: text that is not UTF-8 (a
// json.RawMessage passes its bytes through; callers would decode each bad
// byte as U+FFFD), and a number out of float64's range, too large (1e999:
// every caller's decode fails) or so small it decodes as 0 (1e-999: a
// silent zero).
func jsonCarried(data []byte) error {
	if !utf8.Valid(data) {
		return invalid("value", "is not valid UTF-8: JSON text is UTF-8 (give text as a JSON string of valid characters, bytes in base64)")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return invalid("value", "is not JSON: %v", err)
		}
		n, ok := tok.(json.Number)
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(string(n), 64)
		mantissa, _, _ := strings.Cut(strings.ToLower(string(n)), "e")
		if err != nil || (f == 0 && strings.Trim(mantissa, "-0.") != "") {
			return invalid("value", "holds the number %s, beyond what a JSON number decodes to in Go (float64: about 1e-308 to 1e308 in size): a caller would get an error or 0; give it as a string", n)
		}
	}
}

// sqlSetResult stores an operator's result for a key that completed
// without one (its result could not be encoded) or with one an operator
// stored, not with a Final outcome, guarded by state, by the result's origin and by token $4 when
// not 0. $3 result, $5 operator,
// $6 metadata. When the guard fails the current row is returned and
// nothing is written.
const sqlSetResult = `
WITH u AS (
    UPDATE {{schema}}.executions t SET
        result = $3::bytea, result_error = NULL, result_by_operator = true, updated_at = pg_catalog.statement_timestamp()
    WHERE t.namespace = $1 AND t.key = $2 AND t.state = 'completed' AND (t.result_error IS NOT NULL OR t.result_by_operator)
      AND t.final_error IS NULL AND ($4::bigint = 0 OR t.token = $4)
    RETURNING {{cols}}
),
ev AS (
    INSERT INTO {{schema}}.events (namespace, key, event, state, token, owner, metadata)
    SELECT $1, $2, 'result_set', u.state, u.token, $5, $6::jsonb FROM u
)
SELECT true, u.* FROM u
UNION ALL
SELECT false, {{cols}} FROM {{schema}}.executions t
WHERE t.namespace = $1 AND t.key = $2 AND NOT EXISTS (SELECT 1 FROM u)`

// sqlOperator is an operator's transition ($3 from state -> $4 to state),
// guarded by state (and, from executing, by an expired lease; by token $10
// when not 0). $5 mints a new token; $6 owner, $11 host and $12 pid: the
// operator's, so that the row names one process, never the operator with
// the worker's host and pid; $7 result; $8 event; $9 metadata, to which
// the event adds whom the row was taken from (previous_owner,
// previous_host, previous_pid; previous_token when $5 minted a new one):
// where the crashed attempt ran stays in the history. When the guard
// fails, the current row is returned and nothing is written. The row is
// locked FOR UPDATE first (lk): that waits for a VerifyExecutionToken
// guard's FOR KEY SHARE, so no operator transition commits while a guarded
// transaction of the current claim is open (see sqlVerify).
const sqlOperator = `
WITH lk AS (
    SELECT t.namespace, t.key, t.owner, t.host, t.pid, t.token FROM {{schema}}.executions t
    WHERE t.namespace = $1 AND t.key = $2
    FOR UPDATE
),
u AS (
    UPDATE {{schema}}.executions t SET
        state = $4,
        token = CASE WHEN $5::bool THEN pg_catalog.nextval({{seq}}) ELSE t.token END,
        owner = $6,
        host = $11,
        pid = $12,
        result = CASE WHEN $4 = 'completed' THEN $7::bytea ELSE t.result END,
        result_error = CASE WHEN $4 = 'completed' THEN NULL ELSE t.result_error END,
        final_error = CASE WHEN $4 = 'completed' THEN NULL ELSE t.final_error END,
        result_by_operator = ($4 = 'completed'),
        completed_at = CASE WHEN $4 = 'completed' THEN pg_catalog.statement_timestamp() ELSE NULL END,
        lease_expires_at = CASE WHEN $4 = 'claimed' THEN pg_catalog.statement_timestamp() ELSE NULL END,
        updated_at = pg_catalog.statement_timestamp()
    FROM lk
    WHERE t.namespace = lk.namespace AND t.key = lk.key AND t.state = $3
      AND ($3 <> 'executing' OR t.lease_expires_at <= pg_catalog.clock_timestamp())
      AND ($10::bigint = 0 OR t.token = $10)
    RETURNING {{cols}}
),
ev AS (
    INSERT INTO {{schema}}.events (namespace, key, event, state, token, owner, metadata)
    SELECT $1, $2, $8, u.state, u.token, $6,
        coalesce($9::jsonb, '{}'::jsonb) || pg_catalog.jsonb_build_object(
            'previous_owner', lk.owner, 'previous_host', lk.host, 'previous_pid', lk.pid)
        || CASE WHEN $5::bool THEN pg_catalog.jsonb_build_object('previous_token', lk.token) ELSE '{}'::jsonb END
    FROM u, lk
)
SELECT true, u.* FROM u
UNION ALL
SELECT false, {{cols}} FROM {{schema}}.executions t
WHERE t.namespace = $1 AND t.key = $2 AND NOT EXISTS (SELECT 1 FROM u)`

// RegisterResultCheck registers check to vet every value an operator
// stores with ForceComplete or SetResult: it gets the key and the encoded
// value before anything is written, and an error refuses the call (the
// error is an *InvalidError for field "value", matching ErrInvalid, whose
// Reason is check's message). A package that owns a family of keys
// registers a check from its init so that no operator stores a value its
// readers cannot use: package idempotency refuses, for its keys, any value
// that is not an HTTP response the middleware can replay. A check must
// answer nil for keys it does not own. Checks run in registration order.
// It panics on a nil check, at registration rather than at every later
// ForceComplete and SetResult.
func RegisterResultCheck(check func(key string, value []byte) error) {
	if check == nil {
		panic("sentinel: RegisterResultCheck with a nil check")
	}
	resultChecks.Lock()
	defer resultChecks.Unlock()
	resultChecks.fns = append(resultChecks.fns, check)
}

var resultChecks struct {
	sync.Mutex
	fns []func(key string, value []byte) error
}

// checkResult runs the registered result checks.
func checkResult(key string, value []byte) error {
	resultChecks.Lock()
	fns := resultChecks.fns
	resultChecks.Unlock()
	for _, fn := range fns {
		if err := fn(key, value); err != nil {
			return invalid("value", "%s", err.Error())
		}
	}
	return nil
}
