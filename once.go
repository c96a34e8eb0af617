package sentinel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Result is the outcome of a Once call.
type Result[T any] struct {
	Value  T     // fn's result, or the stored result decoded into T
	Cached bool  // true when replayed: fn did not run in this call
	Token  int64 // the fencing token of the execution that produced Value
}

type tokenKey struct{}

// TokenFromContext returns the fencing token of the Once execution running
// fn, from the ctx passed to fn. Guard fn's own writes with it (see
// VerifyExecutionToken).
func TokenFromContext(ctx context.Context) (int64, bool) {
	t, ok := ctx.Value(tokenKey{}).(int64)
	return t, ok
}

// Once runs fn at most once for key across every competing worker, and
// replays its stored result to every later caller.
//
//   - key absent (or claimed with an expired lease): claim it, mark it
//     executing, run fn under a heartbeat-renewed lease, store the result.
//   - key completed: return the stored result decoded into T, Cached true
//     (one statement).
//   - claimed or executing with a live lease: an *ExecutionError matching
//     ErrInProgress.
//   - executing with an expired lease (the executor crashed, failed or
//     froze): ErrUncertain; fn is never run again until an operator
//     reconciles the key (Client.Reconcile).
//   - reconciling: ErrReconciling.
//
// fn's outcome: a nil error completes the key. An error marked with
// Retryable puts the key back to claimed (lease ended) so the next caller
// runs it, and is returned. Any other error, a panic, or a cancelled ctx ends
// the lease but leaves the key executing: the call returns an error matching
// ErrUncertain that wraps fn's error (a panic is re-raised after recording).
// If the lease is lost while fn runs (heartbeats cannot reach the database,
// or the hard TTL passes), fn's ctx is cancelled with the loss as its cause
// and the completion is refused by the token guard: the caller gets
// ErrUncertain.
//
// Options: WithTTL, WithHardTTL (default: the TTL), WithNamespace,
// WithCodec, WithMetadata. A fresh key costs three single-statement round
// trips (read, claim, complete), each writing its history in the same
// statement; a replay costs one.
func Once[T any](ctx context.Context, c *Client, key string, fn func(ctx context.Context) (T, error), opts ...Option) (Result[T], error) {
	var res Result[T]
	if fn == nil {
		return res, invalid("fn", "must not be nil")
	}
	o, ex, l, fnCtx, finishRun, err := c.start(ctx, key, opts, StateExecuting)
	if err != nil || ex != nil {
		return replayOr[T](ex, o, err)
	}
	defer finishRun()
	res.Token = l.token

	value, panicked, panicVal, fnErr := call(func() (T, error) { return fn(fnCtx) })
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ReleaseTimeout)
	defer cancel()

	switch {
	case panicked:
		_, _ = c.finish(wctx, l, o, StateExecuting, nil, "", []State{StateExecuting}, false, "failed",
			"error", fmt.Sprintf("panic: %v", panicVal))
		l.end(ErrReleased)
		panic(panicVal)
	case fnErr != nil && IsRetryable(fnErr):
		_, ferr := c.finish(wctx, l, o, StateClaimed, nil, "", []State{StateExecuting}, false, "retryable", "error", fnErr.Error())
		if ferr != nil {
			return res, fmt.Errorf("%w (and releasing the claim failed: %v)", fnErr, ferr)
		}
		return res, fnErr
	case fnErr != nil:
		_, _ = c.finish(wctx, l, o, StateExecuting, nil, "", []State{StateExecuting}, false, "failed", "error", fnErr.Error())
		return res, c.uncertain(l, o, fmt.Errorf("fn failed: %w", fnErr))
	}

	res.Value = value
	data, encErr := o.codec.Encode(value)
	if encErr == nil && len(data) > c.cfg.MaxResultSize {
		encErr = fmt.Errorf("encoded result is %d bytes, over MaxResultSize %d", len(data), c.cfg.MaxResultSize)
	}
	resultErr := ""
	if encErr != nil {
		data, resultErr = nil, encErr.Error()
	}
	ok, err := c.finish(wctx, l, o, StateCompleted, data, resultErr, []State{StateExecuting}, true, "completed")
	if err != nil || !ok {
		cause := l.Err()
		if err != nil {
			cause = err
		}
		if cause == nil {
			cause = errors.New("completion refused: the claim is no longer current")
		}
		return res, c.uncertain(l, o, fmt.Errorf("fn succeeded but its completion was not recorded: %w", cause))
	}
	if encErr != nil {
		return res, fmt.Errorf("%w: key %q/%q is completed but its result was not stored: %w", ErrResult, o.namespace, key, encErr)
	}
	return res, nil
}

// OnceTx is Once for work that lives in the same PostgreSQL database: fn
// receives a transaction, and fn's writes commit together with the
// completion. A database-local side effect therefore happens exactly once,
// and a crash inside fn leaves nothing behind: not fn's writes, not an
// uncertain key (the claim stays "claimed" until commit, and an expired
// claim is taken over by the next caller). Competing callers get
// ErrInProgress while fn runs, and the cached result afterwards.
//
// An error from fn (retryable or not) rolls the transaction back and frees
// the key for the next caller. If the lease is lost before commit the
// transaction is rolled back and an error matching ErrLeaseLost is returned.
func OnceTx[T any](ctx context.Context, c *Client, key string, fn func(ctx context.Context, tx pgx.Tx) (T, error), opts ...Option) (Result[T], error) {
	var res Result[T]
	if fn == nil {
		return res, invalid("fn", "must not be nil")
	}
	o, ex, l, fnCtx, finishRun, err := c.start(ctx, key, opts, StateClaimed)
	if err != nil || ex != nil {
		return replayOr[T](ex, o, err)
	}
	defer finishRun()
	res.Token = l.token
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ReleaseTimeout)
	defer cancel()
	release := func(event string, meta ...any) {
		_, _ = c.finish(wctx, l, o, StateClaimed, nil, "", []State{StateClaimed}, false, event, meta...)
	}

	tx, err := c.pool.Begin(fnCtx)
	if err != nil {
		release("rolled_back", "error", err.Error())
		return res, fmt.Errorf("sentinel: OnceTx %q/%q: begin: %w", o.namespace, key, err)
	}
	rollback := func() { _ = tx.Rollback(wctx) }

	value, panicked, panicVal, fnErr := call(func() (T, error) { return fn(fnCtx, tx) })
	switch {
	case panicked:
		rollback()
		release("rolled_back", "error", fmt.Sprintf("panic: %v", panicVal))
		l.end(ErrReleased)
		panic(panicVal)
	case fnErr != nil:
		rollback()
		release("rolled_back", "error", fnErr.Error())
		return res, fnErr
	}
	data, encErr := o.codec.Encode(value)
	if encErr == nil && len(data) > c.cfg.MaxResultSize {
		encErr = fmt.Errorf("encoded result is %d bytes, over MaxResultSize %d", len(data), c.cfg.MaxResultSize)
	}
	if encErr != nil {
		rollback()
		release("rolled_back", "error", encErr.Error())
		return res, fmt.Errorf("%w: OnceTx %q/%q rolled back, nothing was committed: %w", ErrResult, o.namespace, key, encErr)
	}
	meta, err := metadataJSON(o.metadata)
	if err != nil {
		rollback()
		release("rolled_back")
		return res, err
	}
	var n int64
	err = tx.QueryRow(fnCtx, c.exe.finish, o.namespace, key, l.owner, l.token, string(StateCompleted), data, nil,
		[]string{string(StateClaimed)}, true, "completed", meta).Scan(&n)
	if err == nil && n == 0 {
		err = l.Err()
		if err == nil {
			err = &LostError{Namespace: o.namespace, Key: key, Token: l.token, Reason: "claim expired or taken over before commit"}
		}
	}
	if err != nil {
		rollback()
		release("rolled_back", "error", err.Error())
		return res, fmt.Errorf("sentinel: OnceTx %q/%q: completion refused, nothing was committed: %w", o.namespace, key, err)
	}
	if err := tx.Commit(wctx); err != nil {
		// The commit's outcome is unknown: the row tells, since the
		// completion and fn's writes commit or vanish together.
		if ex, rerr := c.readExecution(wctx, o.namespace, key); rerr == nil && ex.State == StateCompleted && ex.Token == l.token {
			res.Value = value
			return res, nil
		}
		release("rolled_back", "error", err.Error())
		return res, fmt.Errorf("sentinel: OnceTx %q/%q: commit: %w", o.namespace, key, err)
	}
	res.Value = value
	return res, nil
}

// call runs f, turning a panic into panicked and its value.
func call[T any](f func() (T, error)) (value T, panicked bool, panicVal any, err error) {
	panicked = true
	defer func() {
		if panicked {
			panicVal = recover()
		}
	}()
	value, err = f()
	return value, false, nil, err
}

// start validates a Once/OnceTx call and begins it (see begin).
func (c *Client) start(ctx context.Context, key string, opts []Option, state State) (
	o callOptions, ex *Execution, l *Lease, fnCtx context.Context, cleanup func(), err error) {
	if c == nil {
		return o, nil, nil, nil, nil, invalid("client", "must not be nil")
	}
	if o, err = c.onceOptions(key, opts); err != nil {
		return o, nil, nil, nil, nil, err
	}
	ex, l, fnCtx, cleanup, err = c.begin(ctx, key, o, state)
	return o, ex, l, fnCtx, cleanup, err
}

func (c *Client) onceOptions(key string, opts []Option) (callOptions, error) {
	if err := c.checkOpen(); err != nil {
		return callOptions{}, err
	}
	o, err := c.resolve(key, opts)
	if err != nil {
		return o, err
	}
	if o.wait || o.force || o.token != 0 {
		return o, invalid("option", "WithWait, WithForce and WithToken do not apply to Once")
	}
	if o.hardTTL == 0 {
		o.hardTTL = o.ttl
	}
	if o.codec == nil {
		o.codec = JSONCodec{}
	}
	if _, err := metadataJSON(o.metadata); err != nil {
		return o, err
	}
	return o, nil
}

// begin reads the key and claims it when it may run. It returns either the
// execution to replay or reject (ex, with err describing a rejection), or
// a held execution lease with fn's context and a cleanup func.
func (c *Client) begin(ctx context.Context, key string, o callOptions, state State) (
	ex *Execution, l *Lease, fnCtx context.Context, cleanup func(), err error) {
	ex, err = c.readExecution(ctx, o.namespace, key)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, nil, nil, nil, err
	}
	meta, err := metadataJSON(o.metadata)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	for attempt := 0; attempt < 5; attempt++ {
		if ex != nil {
			if !claimable(ex) {
				return ex, nil, nil, nil, c.reject(ctx, ex, o)
			}
		}
		sent := time.Now()
		var claimed bool
		ex, err = scanExecution(c.pool.QueryRow(ctx, c.exe.claim, o.namespace, key, string(state), c.cfg.Owner,
			c.cfg.Host, c.cfg.PID, us(o.ttl), us(o.hardTTL), meta), &claimed)
		if errors.Is(err, pgx.ErrNoRows) {
			ex = nil // a concurrent claim committed after our snapshot: look again
			ex, err = c.readExecution(ctx, o.namespace, key)
			if err != nil && !errors.Is(err, ErrNotFound) {
				return nil, nil, nil, nil, err
			}
			continue
		}
		if err != nil {
			return nil, nil, nil, nil, fmt.Errorf("sentinel: claim %q/%q: %w", o.namespace, key, err)
		}
		if !claimed {
			// The current row: completed, held, uncertain, or claimable but
			// locked by a concurrent claim (reported as in progress).
			return ex, nil, nil, nil, c.reject(ctx, ex, o)
		}
		l = c.newLease(kindExecution, o.namespace, key, ex.Token, o.ttl)
		fctx, cancel := context.WithCancelCause(ctx)
		l.onEnd = func(err error) {
			if !errors.Is(err, ErrReleased) {
				cancel(err)
			}
		}
		c.hb.add(l, sent, ex.remaining, ex.LeaseExpiresAt, ex.HardExpiresAt)
		fctx = context.WithValue(fctx, tokenKey{}, ex.Token)
		return nil, l, fctx, func() { l.end(ErrReleased); cancel(context.Canceled) }, nil
	}
	return nil, nil, nil, nil, fmt.Errorf("sentinel: claim %q/%q: the key changed hands too often, try again", o.namespace, key)
}

// claimable reports whether a caller may claim ex now: only a claimed key
// whose lease expired (a takeover). An absent key is claimed by insert.
func claimable(ex *Execution) bool {
	return ex.State == StateClaimed && !ex.LeaseAlive
}

// reject returns the error for a key this call may not run; nil for a
// completed key (replay).
func (c *Client) reject(ctx context.Context, ex *Execution, o callOptions) error {
	var kind error
	switch {
	case ex.State == StateCompleted:
		kind = nil
	case ex.State == StateReconciling:
		kind = ErrReconciling
	case ex.LeaseAlive, ex.State == StateClaimed:
		// A claimed key with an expired lease reaches here only when a
		// concurrent claim holds its row: someone is taking it over now.
		kind = ErrInProgress
	default:
		kind = ErrUncertain // executing with an expired lease
	}
	if c.cfg.RecordRejections {
		event := "replayed"
		if kind != nil {
			event = "rejected"
		}
		meta, _ := metadataJSON(o.metadata, "caller", c.cfg.Owner)
		_, _ = c.pool.Exec(ctx, c.exe.insertEvent, ex.Namespace, ex.Key, event, string(ex.State), ex.Token, c.cfg.Owner, meta)
	}
	if kind == nil {
		return nil
	}
	return &ExecutionError{Kind: kind, Namespace: ex.Namespace, Key: ex.Key, State: ex.State, Owner: ex.Owner,
		Token: ex.Token, LeaseExpiresAt: ex.LeaseExpiresAt, Since: ex.UpdatedAt}
}

func replayOr[T any](ex *Execution, o callOptions, err error) (Result[T], error) {
	var res Result[T]
	if err != nil {
		return res, err
	}
	res.Cached, res.Token = true, ex.Token
	if ex.ResultError != "" {
		return res, fmt.Errorf("%w: key %q/%q completed but its result was not stored: %s", ErrResult, ex.Namespace, ex.Key, ex.ResultError)
	}
	if err := o.codec.Decode(ex.Result, &res.Value); err != nil {
		return res, fmt.Errorf("%w: decode stored result of %q/%q into %T: %w", ErrResult, ex.Namespace, ex.Key, res.Value, err)
	}
	return res, nil
}

// finish moves the execution held by l to state `to`, retrying transient
// errors until the lease's database expiry could have passed. It reports
// whether the transition was applied; an ambiguous earlier attempt is
// resolved by reading the row.
func (c *Client) finish(ctx context.Context, l *Lease, o callOptions, to State, result []byte, resultErr string,
	from []State, requireAlive bool, event string, meta ...any) (bool, error) {
	c.hb.remove(l) // no renewal may race with the final transition
	md, err := metadataJSON(o.metadata, meta...)
	if err != nil {
		md = nil
	}
	var resErr any
	if resultErr != "" {
		resErr = resultErr
	}
	// Plain strings, not State: without prepared statements (PgBouncer)
	// pgx cannot encode a named string type it has no OID for.
	fromStates := make([]string, len(from))
	for i, f := range from {
		fromStates[i] = string(f)
	}
	giveUp := l.Deadline().Add(l.margin)
	for {
		var n int64
		err = c.pool.QueryRow(ctx, c.exe.finish, l.ns, l.key, l.owner, l.token, string(to), result, resErr,
			fromStates, requireAlive, event, md).Scan(&n)
		if err == nil {
			if n == 1 {
				return true, nil
			}
			// Maybe an earlier attempt landed before its reply was lost.
			ex, rerr := c.readExecution(ctx, l.ns, l.key)
			return rerr == nil && ex.Token == l.token && ex.State == to && to == StateCompleted, nil
		}
		if !transient(err) || ctx.Err() != nil || time.Now().After(giveUp) {
			return false, fmt.Errorf("sentinel: record %s for %q/%q: %w", event, l.ns, l.key, err)
		}
		c.cfg.Logger.Warn("sentinel: recording outcome failed; retrying", "key", l.key, "event", event, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Client) uncertain(l *Lease, o callOptions, cause error) error {
	return &ExecutionError{Kind: ErrUncertain, Namespace: o.namespace, Key: l.key, State: StateExecuting,
		Owner: l.owner, Token: l.token, Cause: cause}
}
