package sentinel

// This file: what a Once that did not claim its key learns: whether it could (claimable, rerunnable), the error it gets (rejection, reject, with the command that shows the key) and the replay of a completed key (replayOr).

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sentinel-coordination/sentinel/internal/shell"
)

// claimable reports whether this call's claim (with WithRerun bound
// rerun, and the approved token rerunToken: 0 any, -1 none) may take ex over:
// a claimed key whose lease expired, or a rerunnable one (see rerunnable).
// An absent key is claimed by insert. A claim that found ex claimable yet
// did not take it found the row locked: someone else is taking it now.
func claimable(ex *Execution, rerun int, rerunToken int64) bool {
	return (ex.State == StateClaimed && !ex.LeaseAlive) ||
		(rerunnable(ex, rerun) && (rerunToken == 0 || ex.Token == rerunToken))
}

// rerunnable reports whether a caller with WithRerun bound rerun may run
// ex again: its executor stopped without an outcome and attempts are left
// under both the key's bound and the caller's (see WithRerun).
func rerunnable(ex *Execution, rerun int) bool {
	return ex.Rerunnable() && ex.Attempt < rerun
}

// rejection is why a caller may not run ex: nil for a completed key
// (replay), else ErrInProgress, ErrUncertain or ErrReconciling. locked:
// the caller's claim found ex claimable but locked by a concurrent claim.
func rejection(ex *Execution, locked bool) error {
	switch {
	case ex.State == StateCompleted:
		return nil
	case ex.State == StateReconciling:
		return ErrReconciling
	case ex.LeaseAlive, ex.State == StateClaimed, locked:
		// A claimed key with an expired lease reaches here only when a
		// concurrent claim holds its row: someone is taking it over now.
		return ErrInProgress
	default:
		return ErrUncertain // executing with an expired lease
	}
}

// reject returns the error for a key this call may not run; nil for a
// completed key (replay). locked: as for rejection.
func (c *Client) reject(ctx context.Context, ex *Execution, o callOptions, locked bool) error {
	kind := rejection(ex, locked)
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
	var cause error
	switch {
	case kind == ErrUncertain && ex.Rerunnable() && o.rerun > 1 && ex.Attempt >= o.rerun:
		// Stopped under WithRerun, attempts left under the key's bound,
		// but this caller's own bound is reached: it never runs the key
		// again, however often it calls (OnceRetry does not retry it).
		cause = fmt.Errorf("its executor stopped without an outcome at attempt %d of %d; this call's WithRerun(%d) allows no attempt after %d, "+
			"so no re-run is left for it and it did not run fn: a caller with WithRerun above %d runs it again; "+
			"only if no such caller comes does an operator need to reconcile it",
			ex.Attempt, ex.MaxAttempts, o.rerun, o.rerun, ex.Attempt)
	case kind == ErrUncertain && ex.Rerunnable():
		// Stopped under WithRerun, attempts left, but not for this
		// caller (no WithRerun, or its rerun guard refused).
		cause = fmt.Errorf("its executor stopped without an outcome at attempt %d of %d; it was started with WithRerun, "+
			"and this call did not run fn: a caller with WithRerun above %d runs it again; "+
			"only if no such caller comes does an operator need to reconcile it",
			ex.Attempt, ex.MaxAttempts, ex.Attempt)
	case kind == ErrUncertain && ex.MaxAttempts > 1:
		// Said as the caller of that last attempt was told (rerunNote).
		cause = fmt.Errorf("its executor stopped without an outcome at attempt %d, the last WithRerun allows (%d): no re-run is left; "+
			"an operator must Reconcile it (its History lists the rerun events, and a completion_refused event if fn returned before its completion was refused)",
			ex.Attempt, ex.MaxAttempts)
	case kind == ErrUncertain:
		cause = errors.New("its executor stopped without an outcome (crashed, failed, or lost its lease); " +
			"an operator must Reconcile it (if fn returned before its completion was refused, " +
			"its History holds a completion_refused event with fn's result)")
	case kind == ErrInProgress:
		cause = errors.New("another worker is running it: retry later, or use WithWait")
	}
	e := &ExecutionError{Kind: kind, Namespace: ex.Namespace, Key: ex.Key, State: ex.State, Owner: ex.Owner,
		Token: ex.Token, LeaseExpiresAt: ex.LeaseExpiresAt, Since: ex.Since(), Cause: cause}
	if kind == ErrUncertain {
		e.look = c.inspectCommand(ex.Namespace, ex.Key)
		e.Rerun = ex.Rerunnable()
		// A claim finds a key this caller may re-run locked (in progress),
		// not uncertain; a caller superseded by a re-run (rerunSuccessor)
		// finds it here, and may.
		e.rerunHere = e.Rerun && rerunnable(ex, o.rerun)
	}
	return e
}

// inspectCommand is the `sentinel inspect` command line that shows key of
// namespace ns in the client's schema, for messages to a person: it
// carries -n and --schema when they differ from the command's defaults,
// each value quoted for a POSIX shell, so that it runs as printed given
// the database connection. The command's output ends with the commands
// that come next.
func (c *Client) inspectCommand(ns, key string) string {
	flags := ""
	if ns != "" && ns != "default" {
		flags += " -n " + shell.Quote(ns)
	}
	if c.cfg.Schema != "" && c.cfg.Schema != "sentinel" {
		flags += " --schema " + shell.Quote(c.cfg.Schema)
	}
	if strings.HasPrefix(key, "-") {
		// A key that reads as a flag goes after "--", the flags before.
		return "sentinel inspect" + flags + " -- " + shell.Quote(key)
	}
	return "sentinel inspect " + shell.Quote(key) + flags
}

func replayOr[T any](ex *Execution, o callOptions, err error) (Result[T], error) {
	var res Result[T]
	if err != nil {
		return res, err
	}
	res.Cached, res.Token = true, ex.Token
	if ex.FinalError != "" && ex.ResultError != "" {
		// A Final outcome whose value could not be stored: the outcome is
		// the error, replayed as the call that ran fn returned it (a
		// *FinalError), not as a missing result (ErrResult without ErrFinal).
		return res, &FinalError{Namespace: ex.Namespace, Key: ex.Key, Token: ex.Token, Message: ex.FinalError}
	}
	if ex.ResultError != "" {
		return res, fmt.Errorf("%w: key %q/%q completed but its result was not stored: %s (an operator can store it with SetResult)",
			ErrResultLost, ex.Namespace, ex.Key, ex.ResultError)
	}
	if ex.Result != nil {
		if _, isJSON := o.codec.(JSONCodec); isJSON && ex.ResultByOperator {
			// An operator's value is checked against T: a typo in a
			// member name must not reach the caller as a zero value.
			if err := strictDecode(ex.Namespace, ex.Key, ex.Result, &res.Value); err != nil {
				var zero T
				res.Value = zero
				return res, fmt.Errorf("%w: the result of %q/%q was stored by an operator and does not fit %T: %w "+
					"(an operator can replace it with SetResult at token %d)", ErrResult, ex.Namespace, ex.Key, res.Value, err, ex.Token)
			}
		} else if err := o.codec.Decode(ex.Result, &res.Value); err != nil {
			return res, fmt.Errorf("%w: decode stored result of %q/%q into %T: %w", ErrResult, ex.Namespace, ex.Key, res.Value, err)
		}
	}
	if ex.FinalError != "" {
		return res, &FinalError{Namespace: ex.Namespace, Key: ex.Key, Token: ex.Token, Message: ex.FinalError}
	}
	return res, nil
}
