package sentinel

// This file: Once, read top to bottom: the call, the claim (begin, sqlClaim), the wait for another caller's outcome (watch, unwatch) and fn's run; the finish is in once_finish.go, what a caller that did not claim gets in once_reject.go.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sentinel-coordination/sentinel/internal/handback"
	"github.com/sentinel-coordination/sentinel/internal/rerunhook"
)

// Result is the outcome of a Once call.
type Result[T any] struct {
	Value  T     // fn's result, or the stored result decoded into T
	Cached bool  // true when replayed: fn did not run in this call
	Token  int64 // the fencing token of the execution that produced Value
}

// Once runs fn at most once for key across every competing worker, and
// replays its stored result to every later caller.
//
//   - key absent (or claimed with an expired lease): claim it, mark it
//     executing, run fn under a heartbeat-renewed lease, store the result.
//   - key completed: return the stored result decoded into T, Cached true
//     (one statement); a Final outcome is returned as a *FinalError.
//   - claimed or executing with a live lease: an *ExecutionError matching
//     ErrInProgress; with WithWait, wait for the outcome instead (woken when
//     the key finishes, re-checking at the holder's expiry as the database
//     computes it) and return it, Cached.
//   - executing with an expired lease (the executor crashed, failed or
//     froze): ErrUncertain; fn is never run again until an operator
//     reconciles the key (Client.Reconcile). With WithRerun, when fn's
//     effect is deduplicated downstream by EffectKey, the key is run
//     again instead, up to a bound on attempts (see WithRerun).
//   - reconciling: ErrReconciling.
//
// fn's outcome: a nil error completes the key. An error marked with Final
// completes it with that error as the outcome (see Final). An error marked
// with Retryable puts the key back to claimed (lease ended) so the next
// caller runs it, and is returned (in a re-run, WithRerun, the key stays
// for the next re-run instead; in the last attempt the bound allows, that
// leaves it uncertain, and the call returns ErrUncertain wrapping the
// error). If handing the key back fails (Config.ReleaseTimeout runs out
// while another transaction holds the key's row, or the database cannot
// be reached) the row is read back: when the key is still this attempt's,
// it stays executing until its lease expires, and is then uncertain for
// later callers (unless the hand-back, still waiting, lands first), so the
// call returns ErrUncertain wrapping the error and saying so, not the
// Retryable error alone, and the history records fn's error; when the
// row cannot be read either, the same, saying that the hand-back may have
// landed. Any other error, a panic, or a cancelled ctx ends the lease but
// leaves the key executing: the call returns an error matching
// ErrUncertain that wraps fn's error (a panic is re-raised after
// recording). If the lease is lost while fn runs (heartbeats cannot reach
// the database, or the hard TTL passes), fn's ctx is cancelled with the loss
// as its cause, a safety margin before the lease expires on the database
// clock: an outcome fn returns within that margin is recorded as usual (a
// value completes the key). A completion that reaches the database after
// the expiry is refused by its guard (owner, token and a live lease): the
// caller gets ErrUncertain, and the history records a completion_refused
// event carrying fn's encoded result, so an operator can ForceComplete with it.
// Under WithRerun, when a re-run has taken the key over by the time fn
// returns (whatever fn returned, a Retryable error too), the caller gets
// what a new call would instead: the re-run's stored result (Cached, with
// its token), or its error (ErrInProgress while it runs).
// A ctx that ends before fn starts leaves the key claimable: a claim in
// flight is let finish (for at most a second) and given back. When that
// give-back fails (the database unreachable) the error says so: the key
// stays in progress until its lease expires, then reads as uncertain,
// fn never having run (reconcile it).
//
// fn's ctx carries the execution's fencing token (TokenFromContext), its
// attempt (Attempt) and the reference to pass downstream (EffectKey).
//
// Options: WithTTL, WithHardTTL (default Config.OnceHardTTL, 10 minutes),
// WithNamespace, WithCodec, WithMetadata, WithWait, WithRerun. A fresh key
// costs two single-statement round trips, the claim and the completion,
// each one commit that writes its history in the same statement; a replay
// costs one statement that only reads: a primary-key read of the row when
// this client has seen the key completed (it completed it, or replayed it
// before), else the same claim statement (replayhint.go).
// A nil ctx is refused (ErrInvalid).
func Once[T any](ctx context.Context, c *Client, key string, fn func(ctx context.Context) (T, error), opts ...Option) (res Result[T], err error) {
	if err := checkCtx("Once", ctx); err != nil {
		return res, err
	}
	if obs := c.observer(); obs != nil { // metrics and tracing (observe.go)
		ctx = obs.onceStart(ctx, c, key, opts)
		defer obs.onceEnd(ctx, c, key, opts, time.Now(), &res.Cached, &res.Token, &err)
	}
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
	if testAfterFn != nil {
		testAfterFn(key)
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ReleaseTimeout)
	defer cancel()

	switch {
	case panicked:
		_, _ = c.finish(wctx, l, o, StateExecuting, nil, "", "", []State{StateExecuting}, false, "failed",
			append([]any{"error", fmt.Sprintf("panic: %v", panicVal)}, attemptMeta(fnCtx)...)...)
		l.end(ErrReleased)
		// The call's outcome, before the panic goes on: the key is
		// uncertain. The observer (metrics, span) reads err, and the
		// warning names the key, as for every other uncertain outcome;
		// left nil, a panic was counted as a successful run.
		err = c.uncertainRun(l, o, fnCtx, fmt.Errorf("fn panicked: %v%s", panicVal, rerunNote(fnCtx)))
		panic(panicVal)
	case fnErr != nil && IsFinal(fnErr):
		// Handled with the successful outcomes below.
	case fnErr != nil && IsRetryable(fnErr):
		ok, ferr := c.finish(wctx, l, o, handBack(Attempt(fnCtx)), nil, "", "", []State{StateExecuting}, false, "retryable",
			append([]any{"error", errText(fnErr)}, attemptMeta(fnCtx)...)...)
		if ferr != nil {
			var herr error
			if ok, herr = c.handBackFailed(ctx, l, o, fnCtx, fnErr, ferr); herr != nil {
				return res, herr
			}
		}
		if !ok {
			if ex, _ := c.rerunSuccessor(wctx, l, fnCtx); ex != nil {
				// Superseded by a re-run: what a new call gets, as for
				// the other outcomes below.
				return replayOr[T](ex, o, c.reject(wctx, ex, o, false))
			}
			return res, c.movedOn(wctx, l, o, fnErr)
		}
		if ri, _ := fnCtx.Value(runKey{}).(*runInfo); ri != nil && spentRerun(ri.attempt, ri.maxAttempts) {
			return res, c.uncertain(l, o, fmt.Errorf("fn returned a retryable error (%w) in attempt %d, the last WithRerun allows: "+
				"an earlier attempt may have had its effect, so the key was not handed back, and no re-run is left", fnErr, ri.attempt))
		}
		return res, fnErr
	case fnErr != nil:
		_, _ = c.finish(wctx, l, o, StateExecuting, nil, "", "", []State{StateExecuting}, false, "failed",
			append([]any{"error", errText(fnErr)}, attemptMeta(fnCtx)...)...)
		ex, read := c.rerunSuccessor(wctx, l, fnCtx)
		if ex != nil {
			return replayOr[T](ex, o, c.reject(wctx, ex, o, false))
		}
		return res, readInto(c.uncertainRun(l, o, fnCtx, fmt.Errorf("fn failed: %w%s", withLoss(l, fnErr), rerunNote(fnCtx))), read, l.token)
	}

	res.Value = value
	data, encErr := c.encode(o, value)
	resultErr, finalMsg := "", ""
	if encErr != nil {
		data, resultErr = nil, encErr.Error()
	}
	if fnErr != nil {
		finalMsg = storableText(errText(fnErr)) // as stored and replayed
	}
	ok, err := c.finish(wctx, l, o, StateCompleted, data, resultErr, finalMsg, []State{StateExecuting}, true, "completed")
	if err != nil || !ok {
		cause := l.ended()
		if err != nil {
			cause = err
		}
		if cause == nil {
			cause = errors.New("the claim is no longer current")
		}
		read := c.recordRefused(wctx, l, o, data, resultErr, finalMsg, cause, rerunPending(fnCtx))
		ex, reread := c.rerunSuccessor(wctx, l, fnCtx)
		if ex != nil {
			return replayOr[T](ex, o, c.reject(wctx, ex, o, false))
		}
		if reread != nil {
			read = reread
		}
		what := "fn succeeded but its completion was refused (%w); fn's result is recorded in the key's history as a completion_refused event"
		advice := "Reconcile the key, then ForceComplete it with that result"
		args := []any{cause}
		if finalMsg != "" {
			// Not a success: ForceComplete with fn's value would replay
			// that value to every caller instead of the error.
			what = "fn returned a Final outcome (%q) but its completion was refused (%w); it is recorded in the key's history as a completion_refused event with final_error"
			advice = "No operator call stores a Final outcome: Reconcile the key, then ForceComplete it with the value callers should get as a success, " +
				"or ResetToClaimed so that the next caller runs fn again"
			args = []any{finalMsg, cause}
		}
		if rerunPending(fnCtx) {
			// The next caller runs fn again: no operator's steps here,
			// which would stop the re-run (ExecutionError.Rerun).
			return res, readInto(c.uncertainRun(l, o, fnCtx, fmt.Errorf(what+rerunNote(fnCtx), args...)), read, l.token)
		}
		return res, readInto(c.uncertainRun(l, o, fnCtx, fmt.Errorf(what+rerunNote(fnCtx)+". "+advice, args...)), read, l.token)
	}
	if fnErr != nil {
		return res, &FinalError{Namespace: o.namespace, Key: key, Token: l.token, Message: finalMsg, Err: fnErr}
	}
	if encErr != nil {
		return res, fmt.Errorf("%w: key %q/%q is completed but its result was not stored (%w); "+
			"an operator can store it with SetResult", ErrResultLost, o.namespace, key, encErr)
	}
	return res, nil
}

// rerunPending reports whether the attempt of fnCtx, stopped without an
// outcome, leaves the key to the next caller with WithRerun (attempts
// remain under its bound).
func rerunPending(fnCtx context.Context) bool {
	ri, ok := fnCtx.Value(runKey{}).(*runInfo)
	return ok && ri.attempt < ri.maxAttempts
}

// rerunSuccessor returns the key's row when the attempt of fnCtx (under
// WithRerun) lost its lease and a re-run took the key over: its caller
// then gets what a new call would (the re-run's stored result, Cached, or
// ErrInProgress while it runs), not an uncertain key that is being, or
// was, run again. nil otherwise, and when the row cannot be read. read is
// the row whenever it was read (for the caller's ErrUncertain, readInto).
func (c *Client) rerunSuccessor(ctx context.Context, l *Lease, fnCtx context.Context) (successor, read *Execution) {
	ri, _ := fnCtx.Value(runKey{}).(*runInfo)
	if lost := l.ended(); ri == nil || ri.maxAttempts <= 1 || lost == nil || errors.Is(lost, ErrReleased) {
		return nil, nil
	}
	ex, err := c.readExecution(ctx, l.ns, l.key)
	if err != nil {
		return nil, nil
	}
	if ex.Token == l.token || ex.Attempt <= ri.attempt {
		return nil, ex
	}
	return ex, ex
}

// rerunNote tells the caller of an attempt that stopped without an outcome
// under WithRerun that the key will be re-run, when it will, or that this
// was the last attempt its bound allows: "" without WithRerun.
func rerunNote(fnCtx context.Context) string {
	ri, ok := fnCtx.Value(runKey{}).(*runInfo)
	switch {
	case !ok || ri.maxAttempts <= 1:
		return ""
	case !rerunPending(fnCtx):
		// Said as the next caller's error says it (Client.reject).
		return fmt.Sprintf(" (attempt %d, the last WithRerun allows (%d): no re-run is left)", ri.attempt, ri.maxAttempts)
	}
	return fmt.Sprintf(" (WithRerun: unless an operator acts first, the next Once call for the key with WithRerun runs fn again, "+
		"as attempt %d of at most %d)", ri.attempt+1, ri.maxAttempts)
}

// attemptMeta is the metadata a failed or retryable event of the attempt
// of fnCtx carries under WithRerun (the key's bound above 1): its attempt
// and the bound, so that the history tells an attempt the next caller
// re-runs from the last one. None without WithRerun.
func attemptMeta(fnCtx context.Context) []any {
	ri, ok := fnCtx.Value(runKey{}).(*runInfo)
	if !ok || ri.maxAttempts <= 1 {
		return nil
	}
	return []any{"attempt", ri.attempt, "max_attempts", ri.maxAttempts}
}

// withLoss adds to fn's error the loss of fn's lease, when it was lost
// while fn ran (no renewal in time, a takeover, the hard TTL): fn then
// usually returns its ctx's error, context.Canceled, which says nothing of
// why; with the loss the caller's error matches ErrLeaseLost (and
// ErrHardTTL) and says what happened.
func withLoss(l *Lease, fnErr error) error {
	if lost := l.ended(); lost != nil && !errors.Is(lost, ErrReleased) && !errors.Is(fnErr, lost) {
		return fmt.Errorf("%w (fn's lease was lost: %w)", fnErr, lost)
	}
	return fnErr
}

// handBack is the state a claim at attempt is handed back in (Retryable,
// or a claim given back before fn ran): claimed, so the next caller runs
// it; but in a re-run (attempt above 1: an earlier attempt may have had
// its effect) the key stays executing with its lease ended, rerunnable by
// a caller with WithRerun and uncertain for any other.
func handBack(attempt int) State {
	if attempt > 1 {
		return StateExecuting
	}
	return StateClaimed
}

// spentRerun reports whether a re-run at attempt, of the key's bound
// maxAttempts, that stops without handing the key back (handBack) leaves
// it uncertain: no attempt is left for the re-run it was left for, so its
// caller gets ErrUncertain, as for any other way a key becomes uncertain.
func spentRerun(attempt, maxAttempts int) bool {
	return attempt > 1 && attempt >= maxAttempts
}

// testAfterFn, set by tests only, runs after fn returned and before its
// outcome is recorded, so that a test can kill the process there.
var testAfterFn func(key string)

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
	if o, err = c.onceOptions(key, opts, state); err != nil {
		return o, nil, nil, nil, nil, err
	}
	if g := rerunhook.From(ctx); g != nil {
		// package idempotency's rerun guard: for this call, not fn's calls.
		o.rerunGuard, ctx = g, rerunhook.WithGuard(ctx, nil)
	}
	slot := handback.From(ctx)
	if slot != nil {
		// package idempotency's hand-back slot: for this call, not fn's calls.
		ctx = handback.WithSlot(ctx, nil)
	}
	ex, l, fnCtx, cleanup, err = c.begin(ctx, key, o, state)
	if slot != nil && l != nil && err == nil {
		slot.GiveBack = c.giveBackWhileRunning(l, o, fnCtx, state)
	}
	return o, ex, l, fnCtx, cleanup, err
}

// giveBackWhileRunning is the hand-back package idempotency calls through
// internal/handback while fn still runs (its handler switched protocols,
// and what follows is not protected by the key): the transition a
// Retryable outcome makes (Once: to claimed, or in a re-run left
// executing; OnceTx: claimed, its lease ended), with the same guarded
// statement, from the claim's state and by its owner and token. The lease
// then ends as released, which does not cancel fn's ctx (l.onEnd), also
// when the statement failed: fn goes on, and the hand-back made when it
// returns tries again (it finds the key given back, or moved on, and
// writes nothing).
func (c *Client) giveBackWhileRunning(l *Lease, o callOptions, fnCtx context.Context, state State) func(string) bool {
	return func(reason string) bool {
		to := StateClaimed
		if state == StateExecuting {
			to = handBack(Attempt(fnCtx))
		}
		wctx, cancel := context.WithTimeout(context.WithoutCancel(fnCtx), c.cfg.ReleaseTimeout)
		defer cancel()
		landed, err := c.finish(wctx, l, o, to, nil, "", "", []State{state}, false, "released", "reason", reason)
		l.end(ErrReleased)
		if err != nil {
			c.cfg.Logger.Warn("sentinel: giving the key back while fn runs failed; it is given back when fn returns",
				"namespace", l.ns, "key", l.key, "token", l.token, "err", err)
		}
		return err == nil && landed
	}
}

// onceOptions resolves the options of a Once (state executing) or OnceTx
// (state claimed) call; o.rerun is the caller's WithRerun bound, 1 without.
func (c *Client) onceOptions(key string, opts []Option, state State) (callOptions, error) {
	o, err := c.resolveCall(key, opts, func(o callOptions) error {
		if o.force || o.token != 0 || o.limitSet || o.labelSet || o.afterSet {
			return invalid("option", "WithForce, WithToken, WithLimit, WithLabel and WithAfterEvent do not apply to Once")
		}
		return o.rerunApplies(state)
	})
	if err != nil {
		return o, err
	}
	if o.rerun, err = o.checkRerun(); err != nil {
		return o, err
	}
	if !o.hardSet {
		o.hardTTL = max(c.cfg.OnceHardTTL, o.ttl)
	}
	if o.codec == nil {
		o.codec = JSONCodec{}
	}
	if _, err := metadataJSON(o.metadata); err != nil {
		return o, err
	}
	return o, nil
}

// begin claims the key when this call may run it, in one statement that
// otherwise returns the key's row (sqlClaim): a fresh key costs that
// statement and the completion, a replay that statement alone, or a
// primary-key read when this client saw the key completed. It returns
// either the execution to replay or reject (ex, with err describing a
// rejection), or a held execution lease with fn's context and a cleanup
// func. With WithWait, a key in progress elsewhere is waited for.
func (c *Client) begin(ctx context.Context, key string, o callOptions, state State) (
	ex *Execution, l *Lease, fnCtx context.Context, cleanup func(), err error) {
	var (
		wake      chan struct{}
		listening bool
		// watched: the token of the claim this call counted itself in as
		// a waiter of (0: none). A claim that takes the key over starts
		// its count again (migration 19), so a call that goes on waiting
		// on another claim counts itself in again, on that claim.
		watched int64
		// rerunToken: the token of the stopped attempt the rerun guard
		// approved re-running after (0: none yet; without a guard, any).
		rerunToken int64
		// hinted: this client saw the key completed (replayhint.go).
		hinted = c.done.has(o.namespace, key)
	)
	if o.wait {
		// Counted among the client's waits, so Close wakes this one and
		// waits for it to count out of the claim it waits for.
		if !c.beginWait() {
			return nil, nil, nil, nil, ErrClosed
		}
		defer c.endWait() // last: after the count-out below
		// Subscribe before the first claim, so an outcome between the
		// claim and the wait is not missed.
		wake, listening = c.ln.subscribe(ctx, notifyExecution, o.namespace, key)
		defer c.ln.unsubscribe(notifyExecution, o.namespace, key, wake)
	}
	meta, err := metadataJSON(o.metadata)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	defer func() {
		// Counted in and leaving without the outcome it waited for (its
		// ctx ended, an error): count out, so that the outcome wakes
		// nobody for this call. Not after a claim of its own (which
		// started the count again), nor once the key moved on past the
		// claim it counted in on (a completed key, or another claim).
		if watched != 0 && l == nil && (ex == nil || ex.Token == watched && ex.State != StateCompleted) {
			c.unwatch(ctx, o.namespace, key, watched)
		}
	}()
	for races := 0; ; {
		if o.wait && c.closed.Load() {
			// Woken by Close (endWaits): a wait does not outlive its client.
			return nil, nil, nil, nil, fmt.Errorf("sentinel: waiting for %q/%q: %w", o.namespace, key, ErrClosed)
		}
		// With a rerun guard, a key is re-run only after the guard
		// approved the stopped attempt, and only that attempt (its token;
		// -1: none yet, so no re-run).
		rerun, only := o.rerun, rerunToken
		if o.rerunGuard != nil && rerunToken == 0 {
			only = -1
		}
		sent := time.Now()
		var claimed bool
		if hinted {
			// Seen completed by this client: most likely a replay, which
			// a primary-key read decides for less than the claim costs
			// (replayhint.go). Any other answer: claim as usual.
			hinted = false
			ex, err = scanExecution(c.co.queryRow(ctx, ctx, coRead, c.exe.read, o.namespace, key))
			if err == nil && ex.State == StateCompleted {
				return ex, nil, nil, nil, c.reject(ctx, ex, o, false)
			}
			if err == nil || errors.Is(err, pgx.ErrNoRows) {
				c.done.drop(o.namespace, key)
			}
			sent = time.Now()
		}
		// A claim commits on its own: it may outlive ctx by grantGrace so
		// that a claim made as ctx ends is known and given back below,
		// instead of keeping the key in progress for a TTL.
		sctx, scancel := graceCtx(ctx, grantGrace)
		ex, claimed, err = scanClaim(c.co.queryRow(sctx, ctx, coClaim, c.exe.claim, o.namespace, key, string(state), c.cfg.Owner,
			c.cfg.Host, c.cfg.PID, us(o.ttl), us(o.hardTTL), meta, rerun, only), o.namespace, key, state, c.cfg.Owner, c.cfg.Host, c.cfg.PID)
		scancel()
		if errors.Is(err, pgx.ErrNoRows) {
			// A concurrent claim inserted the key after our snapshot: look
			// again.
			if races++; races > 5 {
				return nil, nil, nil, nil, fmt.Errorf("sentinel: claim %q/%q: the key changed hands too often, try again", o.namespace, key)
			}
			continue
		}
		if err != nil {
			return nil, nil, nil, nil, c.wrapErr(fmt.Sprintf("claim %q/%q", o.namespace, key), err)
		}
		if claimed {
			return c.claimed(ctx, ex, o, state, sent)
		}
		if ex.State == StateCompleted {
			c.done.add(o.namespace, key)
		}
		// The current row: completed, held, uncertain, reconciling, or
		// one this call could have taken but a concurrent claim (or the
		// executor's VerifyExecutionToken guard) holds locked: in progress.
		if o.rerunGuard != nil && rerunToken != ex.Token && rerunnable(ex, o.rerun) {
			ok, gerr := o.rerunGuard(ctx, o.namespace, key, ex.Token)
			if gerr != nil {
				return nil, nil, nil, nil, fmt.Errorf("sentinel: claim %q/%q: %w", o.namespace, key, gerr)
			}
			if ok {
				rerunToken = ex.Token
				continue
			}
			return ex, nil, nil, nil, c.reject(ctx, ex, callOptions{metadata: o.metadata, rerun: 1}, false)
		}
		locked := claimable(ex, rerun, only)
		kind := rejection(ex, locked)
		if !o.wait || kind != ErrInProgress {
			return ex, nil, nil, nil, c.reject(ctx, ex, o, locked)
		}
		if ex.Token != watched {
			// Count in as a waiter of the claim in progress, so that its
			// outcome notifies us: once per claim, since a claim that
			// takes the key over starts the count again.
			var w *Execution
			w, err = scanExecution(c.queryRow(ctx, c.exe.watch, o.namespace, key))
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				continue // no longer in progress: claim again
			case err != nil && ctx.Err() != nil:
				// ctx ended as this call counted in: it ends the wait as
				// it would have a moment later (waitOutcome), with the
				// key in progress as the claim read it.
				e := c.reject(ctx, ex, callOptions{}, false)
				return nil, nil, nil, nil, fmt.Errorf("sentinel: waiting for %q/%q: %w (still: %w)", o.namespace, key, context.Cause(ctx), e)
			case err != nil:
				return nil, nil, nil, nil, c.wrapErr(fmt.Sprintf("wait for %q/%q", o.namespace, key), err)
			}
			watched, ex = w.Token, w
			if claimable(ex, rerun, only) || rejection(ex, false) != ErrInProgress {
				continue
			}
		}
		if err = c.waitOutcome(ctx, ex, wake, listening); err != nil {
			return nil, nil, nil, nil, err
		}
		listening = c.ln.listening()
	}
}

// sqlClaim is the first statement of every Once (and OnceTx): it claims
// key in state $3 (executing for Once, claimed for OnceTx) when this
// caller may run it, and otherwise returns the key's row as it is, writing
// nothing. A fresh key costs it and the completion: two round trips, two
// commits; a completed key (a replay) costs it alone.
//
// It reads the key's row (one primary-key probe, LEFT JOINed to a
// one-row relation so that an absent key still yields a row) and only
// when it found none, or a row this caller may take over (a claimed row
// whose lease expired; with WithRerun, $10 > 1, an executing one whose
// lease expired), calls once_claim_packed (migration 13), which takes
// the key (a fresh key with a guarded insert and its history, since
// migration 15; a takeover through once_claim of migration 9, one guarded
// statement) and returns what this caller does not know of the row it
// claimed. The call sits in the select list under a CASE, where the
// executor sets nothing up for it unless it runs: a replay, or a key
// in progress, uncertain or being reconciled, is the probe and nothing
// else, with no row lock, no transaction id, no WAL, and about the CPU of
// a primary-key SELECT (TestClaimReplayWritesNothing). Earlier shapes
// cost a replay more: the writes in CTEs 5-7x a SELECT's CPU; the call as
// a function scan behind a one-time filter, in a CTE under a UNION ALL,
// 1.15-1.3x its round trip (docs/benchmarks-history.md, issue 27).
//
// The function decides again, under the row lock and by the database
// clock, with a snapshot of its own: a key inserted meanwhile is left to its
// claimant, a row locked by a concurrent claim (or by the executor's
// VerifyExecutionToken guard) is left alone, and a re-run must still find
// attempts left (and, when $11 is not 0, the stopped attempt at token
// $11; -1: no re-run, but $10 is still the bound a new row records). The
// token is minted in the write that stores it, from the sequence named by
// {{seq}}; the history (claimed, started, and rerun before a re-run) is
// written in the same call.
//
// Result (scanClaim): the claimed row's fields packed as once_claim_packed
// returns them, with the read row's columns; NULL when nothing was
// claimed, and then the key as read (completed, held, uncertain,
// reconciling, or claimable but locked), or all NULL when the key was
// absent and inserted concurrently (the caller claims again).
// $1 ns, $2 key, $3 state, $4 owner, $5 host, $6 pid, $7 ttl µs,
// $8 hard TTL µs, $9 metadata, $10 the caller's WithRerun bound (1: none),
// $11 the token a re-run must find (0: any; -1: no re-run).
const sqlClaim = `
SELECT CASE WHEN t.key IS NULL OR NOT (coalesce(t.lease_expires_at > pg_catalog.clock_timestamp(), false)
        OR NOT (t.state = 'claimed' OR (t.state = 'executing' AND $10::int > 1 AND $11::bigint >= 0)))
    THEN {{schema}}.once_claim_packed($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, {{seq}}, t.key IS NULL) END,
    {{cols}}
FROM (SELECT) AS one
LEFT JOIN {{schema}}.executions t ON t.namespace = $1 AND t.key = $2`

// scanClaim reads sqlClaim's row. claimed reports that this caller
// claimed the key, in state; the returned row is then made from the
// packed fields and what the caller sent. Otherwise it is the key's row
// as read, or pgx.ErrNoRows when the key was absent and nothing was
// claimed (inserted concurrently).
func scanClaim(row pgx.Row, ns, key string, state State, owner, host string, pid int) (ex *Execution, claimed bool, err error) {
	var k claimCols
	if err := row.Scan(k.dest()...); err != nil {
		return nil, false, err
	}
	if k.packed != nil {
		if len(k.packed) != 9 {
			return nil, false, fmt.Errorf("sentinel: claim %q/%q: once_claim_packed returned %d fields, want 9", ns, key, len(k.packed))
		}
		p := k.packed
		return &Execution{Namespace: ns, Key: key, State: state, Owner: owner, Host: host, PID: pid, Token: p[0],
			Attempt: int(p[1]), MaxAttempts: int(p[2]),
			CreatedAt: time.UnixMicro(p[3]), UpdatedAt: time.UnixMicro(p[4]),
			LeaseExpiresAt: time.UnixMicro(p[5]), HardExpiresAt: time.UnixMicro(p[6]),
			LeaseAlive: p[7] == 1, remaining: time.Duration(p[8]) * time.Microsecond}, true, nil
	}
	if k.key == nil {
		return nil, false, pgx.ErrNoRows
	}
	e := &Execution{Namespace: *k.ns, Key: *k.key, State: State(*k.state), Owner: *k.owner, Host: *k.host, PID: *k.pid,
		Token: *k.token, CreatedAt: *k.created, UpdatedAt: *k.updated, Result: k.result, ResultByOperator: *k.byOperator,
		LeaseAlive: k.alive, remaining: k.left, Attempt: *k.attempt, MaxAttempts: *k.maxAttempts}
	e.setNullable(k.lease, k.hard, k.done, k.resErr, k.finalErr)
	return e, false, nil
}

// claimCols are sqlClaim's columns as scanned: all may be NULL (the key
// absent) but lease_alive and lease_left, which coalesce.
type claimCols struct {
	packed                        []int64
	ns, key, state, owner, host   *string
	pid, attempt, maxAttempts     *int
	token                         *int64
	created, updated, lease, hard *time.Time
	done                          *time.Time
	result                        []byte
	resErr, finalErr              *string
	byOperator                    *bool
	alive                         bool
	left                          time.Duration
}

func (k *claimCols) dest() []any {
	return []any{&k.packed, &k.ns, &k.key, &k.state, &k.owner, &k.host, &k.pid, &k.token, &k.created, &k.updated, &k.lease,
		&k.hard, &k.done, &k.result, &k.resErr, &k.finalErr, &k.byOperator, &k.alive, &k.left, &k.attempt, &k.maxAttempts}
}

// sqlWatch counts a caller in as waiting for the outcome of an
// in-progress key's current claim (see sqlFinish) and returns the row; no
// row when the key is not in progress any more. The count is the claim's:
// a claim that takes the key over sets it to 0 (once_claim, migration 19;
// sqlClaimSet), and a caller that goes on waiting on the new claim counts
// itself in again (Client.begin). A caller that leaves without the outcome
// counts itself out (sqlUnwatch).
const sqlWatch = `
UPDATE {{schema}}.executions t SET waiters = t.waiters + 1
WHERE t.namespace = $1 AND t.key = $2 AND t.state IN ('claimed', 'executing')
RETURNING {{cols}}`

// sqlUnwatch counts out a caller that waited for the outcome of the claim
// at token $3 and leaves without it (its ctx ended). A row locked by
// another transaction (a claim, a finish, a renewal: one statement, or
// the waiter's own claim still running on the server after its ctx was
// cancelled) is skipped rather than waited for, and the statement says
// so: counted is whether it counted the caller out, skipped whether the
// claim's row, still counting waiters, was locked (Client.unwatch tries
// again). Only a waiter pays for it, never a Once that nobody waits for.
// $1 namespace, $2 key, $3 token.
const sqlUnwatch = `
WITH lk AS (
    SELECT t.namespace, t.key FROM {{schema}}.executions t
    WHERE t.namespace = $1 AND t.key = $2 AND t.token = $3 AND t.waiters > 0
    FOR NO KEY UPDATE SKIP LOCKED
), up AS (
    UPDATE {{schema}}.executions t SET waiters = t.waiters - 1
    FROM lk WHERE t.namespace = lk.namespace AND t.key = lk.key
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM up) AS counted,
       NOT EXISTS (SELECT 1 FROM up) AND EXISTS (
           SELECT 1 FROM {{schema}}.executions t
           WHERE t.namespace = $1 AND t.key = $2 AND t.token = $3 AND t.waiters > 0) AS skipped`

// unwatchPause is the pause before sqlUnwatch is sent again after it
// found the row locked: a statement's lock, held for milliseconds.
const unwatchPause = 20 * time.Millisecond

// unwatch runs sqlUnwatch on a fresh context bounded by ReleaseTimeout
// (the caller's ctx has usually ended), again while it finds the row
// locked: a count left high would make the claim's outcome send a
// wake-up for nobody. Not counted out by then, or on an error, the count
// stays high: a NOTIFY for nobody, no other effect.
func (c *Client) unwatch(ctx context.Context, ns, key string, token int64) {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ReleaseTimeout)
	defer cancel()
	for {
		var counted, skipped bool
		err := c.pool.QueryRow(uctx, c.exe.unwatch, ns, key, token).Scan(&counted, &skipped)
		if err != nil {
			c.cfg.Logger.Debug("sentinel: counting a waiter out failed; the outcome wakes nobody for it", "namespace", ns, "key", key, "err", err)
			return
		}
		if !skipped {
			return // counted out, or the claim moved on: nothing to count out of
		}
		t := time.NewTimer(unwatchPause)
		select {
		case <-uctx.Done():
			t.Stop()
			c.cfg.Logger.Debug("sentinel: counting a waiter out: the key's row stayed locked; the outcome wakes nobody for it", "namespace", ns, "key", key)
			return
		case <-t.C:
		}
	}
}

// claimed sets up the run of fn on the execution this call just claimed
// (ex): its lease, renewed by the heartbeat, and fn's context, cancelled
// when the lease is lost, carrying the token, the attempt and the effect
// key. A claim that landed after ctx ended, or while the client closed, is
// given back at once.
func (c *Client) claimed(ctx context.Context, ex *Execution, o callOptions, state State, sent time.Time) (
	*Execution, *Lease, context.Context, func(), error) {
	l := c.newLease(kindExecution, o.namespace, ex.Key, ex.Token, o.ttl)
	if ctx.Err() != nil {
		// Claimed after the caller's ctx ended: fn will not run, so
		// give the key back for the next caller, now. The claim's
		// deadline bounds finish's retries of a transient error (with
		// ReleaseTimeout); the lease, never registered with the
		// heartbeat, would have none, and get one attempt.
		l.mu.Lock()
		l.deadline = sent.Add(ex.remaining - l.margin)
		l.mu.Unlock()
		wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ReleaseTimeout)
		landed, ferr := c.finish(wctx, l, o, handBack(ex.Attempt), nil, "", "", []State{state}, false, "released", "reason", "caller's context ended")
		wcancel()
		l.end(ErrReleased)
		what := "claimed as it ended: given back"
		if ferr != nil || !landed {
			what = c.claimNotGivenBack(l, o, state, "it ended", ferr)
		}
		err := fmt.Errorf("sentinel: claim %q/%q: %w (%s)", o.namespace, ex.Key, context.Cause(ctx), what)
		if state == StateExecuting && spentRerun(ex.Attempt, ex.MaxAttempts) {
			err = c.uncertain(l, o, fmt.Errorf("%w, without running fn, in attempt %d, the last WithRerun allows: "+
				"an earlier attempt may have had its effect, and no re-run is left", err, ex.Attempt))
		}
		return nil, nil, nil, nil, err
	}
	switch {
	case state != StateExecuting:
		l.exec = execTx // OnceTx: the claim is taken over once it expires
	case ex.Attempt < ex.MaxAttempts:
		l.exec = execRerun // a caller with WithRerun runs it again (rerunPending)
	default:
		l.exec = execOnce
	}
	fctx, cancel := context.WithCancelCause(ctx)
	l.onEnd = func(err error) {
		if !errors.Is(err, ErrReleased) {
			cancel(err)
		}
	}
	if !c.hb.add(l, sent, ex.remaining, ex.LeaseExpiresAt, ex.HardExpiresAt) {
		// Close began while the claim was in flight: fn has not run,
		// so give the key back for the next caller, now.
		wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ReleaseTimeout)
		landed, ferr := c.finish(wctx, l, o, handBack(ex.Attempt), nil, "", "", []State{state}, false, "released", "reason", "client closed")
		wcancel()
		l.end(ErrReleased)
		cancel(ErrClosed)
		if state == StateExecuting && spentRerun(ex.Attempt, ex.MaxAttempts) {
			return nil, nil, nil, nil, c.uncertain(l, o, fmt.Errorf("%w: the re-run claimed as the client closed, in attempt %d, the last WithRerun allows, "+
				"was given back without running fn; an earlier attempt may have had its effect, and no re-run is left", ErrClosed, ex.Attempt))
		}
		if ferr != nil || !landed {
			// The key stays in progress until its lease expires: say so.
			return nil, nil, nil, nil, fmt.Errorf("sentinel: claim %q/%q: %w (%s)", o.namespace, ex.Key, ErrClosed,
				c.claimNotGivenBack(l, o, state, "the client closed", ferr))
		}
		return nil, nil, nil, nil, ErrClosed
	}
	if ex.Attempt > 1 && state == StateExecuting {
		c.cfg.Logger.Info("sentinel: re-running a key whose executor stopped without an outcome (WithRerun)",
			"namespace", o.namespace, "key", ex.Key, "token", ex.Token, "attempt", ex.Attempt, "max_attempts", ex.MaxAttempts)
	}
	fctx = context.WithValue(fctx, runKey{}, &runInfo{token: ex.Token, attempt: ex.Attempt, maxAttempts: ex.MaxAttempts, ns: o.namespace, key: ex.Key})
	return nil, l, fctx, func() { l.end(ErrReleased); cancel(context.Canceled) }, nil
}

// claimNotGivenBack says, and logs, what became of a claim made as its
// caller's ctx ended, or as the client closed (as: "it ended", "the
// client closed"), whose give-back failed (ferr; nil: the statement
// found the key no longer at this claim): the key stays in state until
// its lease expires. A claimed key is then run by the next call; an
// executing one (Once claims straight to executing) reads as uncertain,
// though fn never ran, unless a call with WithRerun may run it again.
func (c *Client) claimNotGivenBack(l *Lease, o callOptions, state State, as string, ferr error) string {
	if ferr == nil {
		ferr = errors.New("the key was no longer at this claim")
	}
	then := "a call after that runs fn"
	if state == StateExecuting {
		then = fmt.Sprintf("after that it reads as uncertain (ErrUncertain) though fn never ran, unless a call with WithRerun "+
			"may run it again: reconcile it (%s)", c.inspectCommand(o.namespace, l.key))
	}
	c.cfg.Logger.Warn("sentinel: giving back a claim made as "+as+" failed; the key stays "+string(state)+" until its lease expires",
		"namespace", o.namespace, "key", l.key, "token", l.token, "err", ferr)
	return fmt.Sprintf("claimed as %s; giving it back failed, so the key stays %s until its lease expires, within its TTL (%s), "+
		"unless the give-back committed; %s: %v", as, state, o.ttl, then, ferr)
}

// waitOutcome sleeps until the key in progress (ex) may have an outcome: a
// notification from the statement that ends it, the holder's expiry as
// the database computed it, or (without a listener) WaitRecheck.
func (c *Client) waitOutcome(ctx context.Context, ex *Execution, wake chan struct{}, listening bool) error {
	delay := ex.remaining + time.Millisecond
	if !listening {
		delay = min(delay, c.cfg.WaitRecheck)
	}
	// A claimed key whose lease already expired is locked by a concurrent
	// claim: back off a little instead of spinning.
	delay = max(delay, 10*time.Millisecond)
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-wake:
		return nil
	case <-t.C:
		return nil
	case <-ctx.Done():
		e := c.reject(ctx, ex, callOptions{}, false)
		return fmt.Errorf("sentinel: waiting for %q/%q: %w (still: %w)", ex.Namespace, ex.Key, context.Cause(ctx), e)
	}
}
