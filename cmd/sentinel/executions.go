package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/internal/reltime"
)

// execJSON is an execution as the command prints it with --json.
type execJSON struct {
	Namespace string         `json:"namespace"`
	Key       string         `json:"key"`
	State     sentinel.State `json:"state"`
	Uncertain bool           `json:"uncertain"`
	Owner     string         `json:"owner"`
	Host      string         `json:"host"`
	PID       int            `json:"pid"`
	Token     int64          `json:"token"`
	CreatedAt *string        `json:"created_at"`
	UpdatedAt *string        `json:"updated_at"` // the row's last write (an attempt's start, a step)
	// Since is when the key entered the state shown (the text's "since"
	// and SINCE): Execution.Since.
	Since          *string         `json:"since"`
	LeaseExpiresAt *string         `json:"lease_expires_at"`
	HardExpiresAt  *string         `json:"hard_expires_at"`
	CompletedAt    *string         `json:"completed_at"`
	LeaseAlive     bool            `json:"lease_alive"`
	Attempt        int             `json:"attempt"`                 // fn's attempt under Token (re-runs: WithRerun)
	MaxAttempts    int             `json:"max_attempts"`            // the key's bound on attempts (1: no re-run)
	Rerunnable     bool            `json:"rerunnable"`              // stopped, and the next caller with WithRerun runs it again
	EffectKey      string          `json:"effect_key"`              // what sentinel.EffectKey gave fn for the key
	Result         json.RawMessage `json:"result,omitempty"`        // when the stored result is JSON
	ResultBase64   string          `json:"result_base64,omitempty"` // when it is not (another codec)
	ResultError    string          `json:"result_error,omitempty"`
	FinalError     string          `json:"final_error,omitempty"` // fn returned Final(err): callers get this error (ErrFinal)
	// ResultByOperator: an operator stored the result (force-complete,
	// set-result); callers decode it strictly.
	ResultByOperator bool `json:"result_by_operator,omitempty"`
	// ResultType is the result type declared for the key, if any
	// (sentinel.RegisterResultType): inspect only.
	ResultType *resultTypeJSON `json:"result_type,omitempty"`
	// CompletionRefused is the evidence that fn returned success although
	// its completion was refused (the lease was lost first): the event
	// carries fn's result. Only for uncertain and reconciling keys.
	CompletionRefused *eventJSON `json:"completion_refused,omitempty"`
	// TakenFrom is the worker an operator's reconcile took the key from,
	// while the row names the operator (reconciling, and after
	// force-complete or reset): where the stopped attempt ran, from the
	// reconciling event's history. Inspect only.
	TakenFrom *takenFromJSON `json:"taken_from,omitempty"`
	// IdempotencyKey: the key is an HTTP request's, written by the
	// idempotency middleware; the idempotency commands address it by
	// this scope and client's key (sentinel idempotency inspect KEY
	// --scope SCOPE -n NAMESPACE), and resolve it with an HTTP response.
	IdempotencyKey *idemRefJSON `json:"idempotency_key,omitempty"`
}

// takenFromJSON is the worker a reconcile took a key from.
type takenFromJSON struct {
	Owner string  `json:"owner"`
	Host  string  `json:"host"`
	PID   int     `json:"pid"`
	Token int64   `json:"token"` // the worker's fencing token
	At    *string `json:"at"`    // when the key was reconciled
	// By is the owner of the process that reconciled it: the operator's
	// own (the CLI's NAME/sentinel-PID), or the console's (sentinel
	// serve's) for an action taken there, whose operator OperatorName names.
	By string `json:"by"`
	// OperatorName is the operator the history names for the reconcile
	// (operator_name: the console's form or token) when it is not By;
	// omitted when there is none (By names the operator).
	OperatorName string `json:"operator_name,omitempty"`
	at           time.Time
}

// byText is who reconciled the key, as inspect prints it: the operator
// and, apart, the process it went through ("Ada through
// root@host/sentinel-PID"), as the console's key page names them; the
// process's owner alone when the history names no other operator.
func (t *takenFromJSON) byText() string {
	if t.OperatorName == "" {
		return t.By
	}
	return t.OperatorName + " through " + t.By
}

// idemRefJSON names the HTTP request of a middleware's key: the scope
// Options.Scope returned ("" for idempotency.SingleTenant) and the
// client's Idempotency-Key value.
type idemRefJSON struct {
	Scope string `json:"scope"`
	Key   string `json:"key"`
}

// uncertain reports whether e is uncertain: executing with an expired
// lease, and no re-run left (WithRerun).
func uncertain(e *sentinel.Execution) bool {
	return e.State == sentinel.StateExecuting && !e.LeaseAlive && !e.Rerunnable()
}

// handedBack reports whether e was handed back: claimed with no live
// lease, so nothing runs it and the next caller does.
func handedBack(e *sentinel.Execution) bool {
	return e.State == sentinel.StateClaimed && !e.LeaseAlive
}

func toExecJSON(e *sentinel.Execution) execJSON {
	j := execJSON{
		Namespace: e.Namespace, Key: e.Key, State: e.State, Uncertain: uncertain(e),
		Owner: e.Owner, Host: e.Host, PID: e.PID, Token: e.Token,
		CreatedAt: tsJSON(e.CreatedAt), UpdatedAt: tsJSON(e.UpdatedAt), Since: tsJSON(e.Since()),
		LeaseExpiresAt: tsJSON(e.LeaseExpiresAt), HardExpiresAt: tsJSON(e.HardExpiresAt),
		CompletedAt: tsJSON(e.CompletedAt), LeaseAlive: e.LeaseAlive, ResultError: e.ResultError, FinalError: e.FinalError,
		ResultByOperator: e.ResultByOperator,
		Attempt:          e.Attempt, MaxAttempts: e.MaxAttempts, Rerunnable: e.Rerunnable(),
		EffectKey: e.EffectKey(),
	}
	if scope, key, ok := idempotency.ParseExecutionKey(e.Key); ok {
		j.IdempotencyKey = &idemRefJSON{Scope: scope, Key: key}
	}
	if len(e.Result) > 0 {
		if json.Valid(e.Result) {
			j.Result = json.RawMessage(e.Result)
		} else {
			j.ResultBase64 = base64.StdEncoding.EncodeToString(e.Result)
		}
	}
	return j
}

// resultTypeJSON is a declared result type with --json.
type resultTypeJSON struct {
	Name   string          `json:"name"`
	Prefix string          `json:"prefix"`
	Shape  string          `json:"shape"`
	Schema json.RawMessage `json:"schema"`
}

func toResultTypeJSON(rt *sentinel.ResultType) *resultTypeJSON {
	if rt == nil {
		return nil
	}
	return &resultTypeJSON{Name: rt.Name, Prefix: rt.Prefix, Shape: rt.Shape(), Schema: rt.Schema}
}

// resultType returns the result type declared for key in namespace ns,
// or nil when none is.
func (a *app) resultType(ctx context.Context, ns, key string) (*sentinel.ResultType, error) {
	rt, err := a.client.ResultType(ctx, key, sentinel.WithNamespace(ns))
	if errors.Is(err, sentinel.ErrNotFound) {
		return nil, nil
	}
	return rt, err
}

// stateLabel is the state as an operator reads it.
func stateLabel(e *sentinel.Execution) string {
	switch {
	case uncertain(e):
		return "executing (UNCERTAIN: lease expired, outcome unknown)"
	case handedBack(e):
		return "claimed (" + handedBackLabel + ": nothing runs it, the next caller does)"
	case e.Rerunnable():
		return rerunLabel(e, defaultRerunPendingAfter, isHTTPKey(e.Key))
	case e.State == sentinel.StateExecuting || e.State == sentinel.StateClaimed:
		return string(e.State) + " (in progress)"
	case e.State == sentinel.StateCompleted && e.FinalError != "":
		return "completed (Final outcome: every caller gets fn's error, ErrFinal)"
	case e.ResultLost():
		return "completed (RESULT NOT STORED: every caller gets ErrResult until an operator stores it)"
	}
	return string(e.State)
}

func resultText(e *sentinel.Execution) string {
	switch {
	case e.ResultError != "":
		return "(not stored: " + e.ResultError + ")"
	case len(e.Result) == 0:
		return "-"
	case utf8.Valid(e.Result) && json.Valid(e.Result):
		s := string(e.Result)
		if len(s) > 500 {
			s = s[:500] + fmt.Sprintf("... (%d bytes)", len(e.Result))
		}
		return s
	}
	return fmt.Sprintf("(%d bytes, not JSON)", len(e.Result))
}

// refusedEvidence returns the completion_refused event of the key's last
// run, if any: fn returned success but its completion was refused. evs is
// the key's history or its last run (Client.LastRun), oldest first.
func refusedEvidence(evs []sentinel.Event) *sentinel.Event {
	for i := len(evs) - 1; i >= 0; i-- {
		switch evs[i].Type {
		case "completion_refused":
			return &evs[i]
		case "started", "claimed":
			return nil // a later run, without evidence
		}
	}
	return nil
}

// takenFrom returns the worker the key's reconcile took it from, from
// the reconciling event of evs (the key's last run, oldest first), which
// records it (Event.PreviousHolder; nil for an event written before
// reconcile recorded it).
func takenFrom(evs []sentinel.Event) *takenFromJSON {
	for i := len(evs) - 1; i >= 0; i-- {
		ev := evs[i]
		if ev.Type != "reconciling" {
			continue
		}
		p, ok := ev.PreviousHolder()
		if !ok {
			return nil
		}
		t := &takenFromJSON{Owner: p.Owner, Host: p.Host, PID: p.PID, Token: p.Token, At: tsJSON(ev.At), By: ev.Owner, at: ev.At}
		// The console records the operator who acted (its form, or the
		// token's name) apart from its own process, which the event's
		// owner names: the console's key page reads it so too.
		if name, _ := ev.Metadata["operator_name"].(string); name != "" && name != ev.Owner {
			t.OperatorName = name
		}
		return t
	}
	return nil
}

// printExecution prints inspect's view of e; a key rerun pending whose
// lease ended more than after.rerunPending ago (--rerun-pending-after) is
// an operator's case, with steps (nextSteps); one reconciling for longer
// than after.reconciling (--reconciling-after) is marked as such.
func (a *app) printExecution(e *sentinel.Execution, refused *sentinel.Event, taken *takenFromJSON, rt *sentinel.ResultType, after attentionAfter) error {
	rerunAfter := after.rerunPending
	if a.jsonOut {
		j := toExecJSON(e)
		if refused != nil {
			ev := toEventJSON(*refused)
			j.CompletionRefused = &ev
		}
		j.TakenFrom = taken
		j.ResultType = toResultTypeJSON(rt)
		// needs_operator as list --json judges it, by the same threshold.
		return a.printJSON(listExecJSON{execJSON: j, NeedsOperator: needsOperator(e, after)})
	}
	w := a.table()
	row(w, "namespace:", e.Namespace)
	row(w, "key:", e.Key)
	row(w, "state:", inspectStateLabel(e, after))
	row(w, "since:", ts(e.Since())+"  ("+relative(e.Since())+")")
	row(w, "owner:", fmt.Sprintf("%s (host %s, pid %d)", e.Owner, e.Host, e.PID))
	if taken != nil {
		// The row names the operator's process; the worker's is in the history.
		row(w, "taken from:", fmt.Sprintf("%s (host %s, pid %d), token %d, by reconcile at %s (%s)",
			taken.Owner, taken.Host, taken.PID, taken.Token, ts(taken.at), taken.byText()))
	}
	row(w, "token:", e.Token)
	attemptRow(w, e)
	row(w, "effect key:", e.EffectKey()+"  (sentinel.EffectKey: look the effect up at the provider by it)")
	if !e.LeaseExpiresAt.IsZero() {
		row(w, "lease expires:", ts(e.LeaseExpiresAt)+"  ("+relative(e.LeaseExpiresAt)+")")
	}
	switch {
	case e.HardExpiresAt.IsZero():
	case !e.LeaseExpiresAt.IsZero() && (e.State == sentinel.StateExecuting || e.State == sentinel.StateClaimed && e.LeaseAlive):
		// It bounds the claim of the row's holder.
		row(w, "hard expiry:", ts(e.HardExpiresAt))
	case e.State == sentinel.StateClaimed && !e.LeaseAlive:
		// Handed back (by a reset, or a caller that gave up): the row
		// keeps the last holder's value, and nothing holds the key.
		row(w, "hard expiry:", "none (nothing holds the key; "+ts(e.HardExpiresAt)+" was the previous holder's)")
	default:
		// Without a lease (an operator's reconcile or force-complete, a
		// completion) nothing happens at it: the row keeps the worker's
		// value.
	}
	row(w, "created:", ts(e.CreatedAt))
	if !e.CompletedAt.IsZero() {
		row(w, "completed:", ts(e.CompletedAt))
	}
	res := resultText(e)
	if e.ResultByOperator {
		res += "  (stored by an operator)"
	}
	row(w, "result:", res)
	if e.FinalError != "" {
		row(w, "final error:", e.FinalError)
	}
	if rt != nil {
		row(w, "result type:", fmt.Sprintf("%s (declared for keys starting with %q)", rt.Name, rt.Prefix))
		row(w, "expected shape:", rt.Shape())
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if refused != nil {
		if final := finalOf(refused); final != "" {
			fprintf(a.stdout, "\nevidence: fn returned a Final outcome, error %q (callers would get it as ErrFinal), but its completion was refused (%s, token %d: %v)\n",
				final, ts(refused.At), refused.Token, refused.Metadata["cause"])
		} else {
			fprintf(a.stdout, "\nevidence: fn returned success but its completion was refused (%s, token %d: %v)\n",
				ts(refused.At), refused.Token, refused.Metadata["cause"])
		}
		if r, ok := refused.Metadata["result"]; ok {
			b, _ := json.Marshal(r)
			fprintf(a.stdout, "fn's result: %s\n", b)
		}
	}
	stale := e.Rerunnable() && -e.LeaseLeft() >= rerunAfter // nextSteps: an operator's case now
	if scope, key, ok := idempotency.ParseExecutionKey(e.Key); ok && (uncertain(e) || e.State == sentinel.StateReconciling || stale || e.ResultLost()) {
		// idempotency inspect judges a rerun pending key, and a key
		// reconciling, by the same thresholds: given others, the copied
		// line carries them.
		flags := afterFlags(after)
		fprintf(a.stdout, "\nnext: this is an HTTP Idempotency-Key; see its request and resolve it with a response:\n  %s\n",
			a.idemCommand("inspect", key, scope, e.Namespace, flags...))
		return nil
	}
	a.nextSteps(e, refused, rerunAfter)
	return nil
}

// inspectStateLabel is inspect's (and idempotency inspect's) state line
// of e: stateLabel, but a key rerun pending is judged by
// after.rerunPending, and a key reconciling by after.reconciling, in the
// words list and idempotency list show for it (rerunLabel,
// reconcilingLabel).
func inspectStateLabel(e *sentinel.Execution, after attentionAfter) string {
	switch {
	case e.Rerunnable():
		return rerunLabel(e, after.rerunPending, isHTTPKey(e.Key))
	case reconcilingStale(e, after.reconciling):
		return reconcilingLabel(e, after.reconciling)
	}
	return stateLabel(e)
}

// attemptRow prints inspect's "attempt:" line of e to w, for a key run
// WithRerun (or one that ran more than once): fn's attempt under the key's
// token, of the key's bound, which tells an operator how many times the
// effect may have happened. inspect and idempotency inspect print it
// alike; nothing for a key run once without WithRerun.
func attemptRow(w io.Writer, e *sentinel.Execution) {
	if e.MaxAttempts > 1 || e.Attempt > 1 {
		row(w, "attempt:", fmt.Sprintf("%d of at most %d (WithRerun)", e.Attempt, e.MaxAttempts))
	}
}

// finalOf is the error of a Final outcome that ev, a completion_refused
// event, records: fn returned Final(err), not a success. "" for none.
func finalOf(ev *sentinel.Event) string {
	if ev == nil {
		return ""
	}
	s, _ := ev.Metadata["final_error"].(string)
	return s
}

// nextSteps prints what an operator does next with e, each command on a
// line of its own, runnable as printed. A key rerun pending gets steps
// once its lease ended more than rerunAfter ago (--rerun-pending-after).
func (a *app) nextSteps(e *sentinel.Execution, refused *sentinel.Event, rerunAfter time.Duration) {
	tok := strconv.FormatInt(e.Token, 10)
	final := finalOf(refused)
	switch {
	case uncertain(e) && final != "":
		fprintf(a.stdout, "\nnext: fn returned a Final outcome (%q), which no operator command stores; reconcile, then decide what callers get:\n  %s\n",
			final, a.keyCommand("reconcile", []string{e.Key}, "-n", e.Namespace, "--token", tok))
	case e.State == sentinel.StateReconciling && final != "":
		fprintf(a.stdout, "\nnext: fn returned a Final outcome (%q), which no operator command stores: force-complete stores a value every caller gets as a success.\n", final)
		fprintf(a.stdout, "if callers should get a value, store it (it asks for the value):\n  %s\n",
			a.keyCommand("force-complete", []string{e.Key}, "-n", e.Namespace, "--token", tok))
		fprintf(a.stdout, "if the next caller should run fn again (it decides anew):\n  %s\n", a.keyCommand("reset", []string{e.Key}, "-n", e.Namespace, "--token", tok))
	case uncertain(e) && refused != nil:
		fprintf(a.stdout, "\nnext: the work happened (fn returned); reconcile, then force-complete with fn's result:\n  %s\n",
			a.keyCommand("reconcile", []string{e.Key}, "-n", e.Namespace, "--token", tok))
	case uncertain(e):
		fprintf(a.stdout, "\nnext: find out whether the work happened, then reconcile:\n  %s\n",
			a.keyCommand("reconcile", []string{e.Key}, "-n", e.Namespace, "--token", tok))
	case e.State == sentinel.StateReconciling:
		complete := a.keyCommand("force-complete", []string{e.Key}, "-n", e.Namespace, "--token", tok)
		how := "store its result (it asks for the value)"
		if refused != nil {
			if r, ok := refused.Metadata["result"]; ok {
				b, _ := json.Marshal(r)
				complete = a.keyCommand("force-complete", []string{e.Key, string(b)}, "-n", e.Namespace, "--token", tok)
				how = "store fn's result"
			}
		}
		fprintf(a.stdout, "\nnext: if the work happened, %s:\n  %s\n", how, complete)
		fprintf(a.stdout, "if it did not, let the next caller run it:\n  %s\n", a.keyCommand("reset", []string{e.Key}, "-n", e.Namespace, "--token", tok))
	case e.Rerunnable() && -e.LeaseLeft() >= rerunAfter:
		// Nothing runs it until the next caller with WithRerun, which has
		// not come for as long as status --exit-code waits before it
		// pages (--rerun-pending-after, status's default unless given):
		// the operator takes it as an uncertain key. A
		// key that stopped a moment ago is no operator's case yet: no
		// command, lest reconcile stop the re-run the application asked for.
		fprintf(a.stdout, "\nnext: its lease ended %s and no caller with WithRerun came back to run attempt %d of %d; if none will, find out whether the work happened, then reconcile (no caller re-runs it after that):\n  %s\n",
			reltime.Millis((-e.LeaseLeft()).Milliseconds()), e.Attempt+1, e.MaxAttempts, a.keyCommand("reconcile", []string{e.Key}, "-n", e.Namespace, "--token", tok))
	case e.ResultLost():
		fprintf(a.stdout, "\nnext: fn succeeded but its result was not stored; store it (it asks for the value):\n  %s\n",
			a.keyCommand("set-result", []string{e.Key}, "-n", e.Namespace, "--token", tok))
	}
}

func (a *app) inspectCmd() *cobra.Command {
	var th attentionAfter
	cmd := &cobra.Command{
		Use:   "inspect KEY",
		Short: "Show the execution record of a Once key",
		Long: `inspect shows a Once key's state, owner, fencing token, lease expiry and
stored result. An executing key whose lease expired is UNCERTAIN: its
outcome is unknown and Sentinel will not run it again until an operator
reconciles it; unless it was run with WithRerun and has attempts left
(shown as "rerun pending: attempt N of M stopped", N the attempts made,
as on the "attempt: N of at most M" line): then the next caller runs
attempt N+1. When fn returned success but its completion was refused
(the lease was lost first), inspect shows that evidence and fn's result
from the history. For a key an operator took over (reconciling,
force-completed, reset), whose owner, host and pid are the operator's, it
shows where the stopped attempt ran (taken from: the worker, its host,
pid and token), from the history, and who reconciled it: for an action
taken on the console, the operator the history names and the console's
process it went through ("Ada through root@host/sentinel-PID"; --json:
taken_from's "operator_name" and "by"). When the application declared the result type of the
key's space (sentinel.RegisterResultType), inspect shows it and the
expected shape of a value. It ends with the commands that come next, each
runnable as printed. Exit code 3 when the key has no execution; the error
then names the namespaces where it has one, each with the same command
there.

"since" (SINCE; --json "since") is when the key entered the state
shown: for a key claimed or executing whose lease has ended on the
database clock (uncertain, rerun pending, handed back by a caller that
gave up) the lease's end, as status --exit-code ages it; for any other
key its last change. "updated_at" in --json stays the row's last write,
which for a stopped attempt is when it started (renewals do not move it).

A key rerun pending (its executor stopped with re-runs left, WithRerun)
gets no step: the next caller with WithRerun runs it again. Once its
lease ended more than --rerun-pending-after (default 15m, as status
--exit-code) ago, no caller came back and none may: inspect marks its
state "rerun pending, needs an operator", as list does, and prints the
steps of an uncertain key (reconcile; for an HTTP request's key, the
idempotency inspect line, with the same --rerun-pending-after when it is
not the default). Give it the value status --exit-code was given, so the
two agree about the key. A key reconciling for longer than
--reconciling-after (default 1h, as status --exit-code, which pages on
it) is marked "reconciling (needs an operator: for more than D)". With
--json, "needs_operator" is true for such keys, for an uncertain one and
for one whose result was not stored, as list --json says it: what
status --exit-code pages on.`,
		Example: `  sentinel inspect payment-order-789 -n payments
  sentinel inspect payment-order-789 -n payments --json | jq .state
  sentinel inspect payment-order-789 -n payments --rerun-pending-after 1h
  sentinel inspect payment-order-789 -n payments --reconciling-after 4h`,
		Args: args(1, 1),
		RunE: a.runEChecked(func(*cobra.Command, []string) error {
			if err := checkAfter(th); err != nil {
				return err
			}
			return nil
		}, func(cmd *cobra.Command, args []string) error {
			e, err := a.client.Inspect(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			var (
				refused *sentinel.Event
				taken   *takenFromJSON
			)
			// An operator's key (reconciling, force-completed, reset to
			// claimed) names the operator's process: the worker's is in
			// the last run's reconciling event.
			operators := e.State == sentinel.StateReconciling || e.ResultByOperator || e.State == sentinel.StateClaimed
			if uncertain(e) || operators {
				evs, err := a.client.LastRun(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				if uncertain(e) || e.State == sentinel.StateReconciling {
					refused = refusedEvidence(evs)
				}
				if operators {
					taken = takenFrom(evs)
				}
			}
			rt, err := a.resultType(cmd.Context(), e.Namespace, e.Key)
			if err != nil {
				return err
			}
			return a.printExecution(e, refused, taken, rt, th)
		}),
	}
	addAfterFlags(cmd, &th, "a key rerun pending (its lease ended, on the database clock) longer than this needs an operator: inspect prints its steps (status --exit-code's threshold)")
	return cmd
}

// eventJSON is a history event as printed with --json.
type eventJSON struct {
	ID        int64          `json:"id"`
	Namespace string         `json:"namespace"`
	Key       string         `json:"key"`
	Type      string         `json:"type"`
	State     sentinel.State `json:"state"`
	Token     int64          `json:"token"`
	Owner     string         `json:"owner"`
	At        *string        `json:"at"`
	Metadata  map[string]any `json:"metadata,omitempty"`
	Cursor    string         `json:"cursor,omitempty"` // follow only: the position to resume from
}

func toEventJSON(e sentinel.Event) eventJSON {
	return eventJSON{ID: e.ID, Namespace: e.Namespace, Key: e.Key, Type: e.Type, State: e.State,
		Token: e.Token, Owner: e.Owner, At: tsJSON(e.At), Metadata: e.Metadata}
}

func metadataText(m map[string]any) string {
	if len(m) == 0 {
		return ""
	}
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Sprint(m)
	}
	return string(b)
}

func (a *app) historyCmd() *cobra.Command {
	var (
		limit   int
		lastRun bool
	)
	cmd := &cobra.Command{
		Use:   "history KEY",
		Short: "Show the event history of a Once key, oldest first",
		Long: `history lists every transition a Once key went through: claimed, started,
completed, failed, reconciling, force_completed, reset, ... with the fencing
token, owner and metadata of each. --limit N shows only the newest N.
--last-run shows only the key's latest run: its newest claimed event and
every event after it, without the records of callers turned away or
replayed (Config.RecordRejections), which can bury it.
Exit code 3 when the key has no history; the error then names the
namespaces where it has an execution, each with the same command there.`,
		Example: `  sentinel history payment-order-789 -n payments
  sentinel history payment-order-789 -n payments --last-run
  sentinel history payment-order-789 -n payments --json`,
		Args: args(1, 1),
		RunE: a.runEChecked(func(*cobra.Command, []string) error {
			if limit < 0 {
				return usageErr("--limit must be 0 (all) or more, got %d", limit)
			}
			if lastRun && limit > 0 {
				return usageErr("--last-run and --limit exclude each other")
			}
			return nil
		}, func(cmd *cobra.Command, args []string) error {
			var opts []sentinel.Option
			if limit > 0 {
				// One more than shown: whether older events exist.
				opts = append(opts, sentinel.WithLimit(limit+1))
			}
			read := a.client.History
			if lastRun {
				read = a.client.LastRun
			}
			evs, err := read(cmd.Context(), args[0], opts...)
			if err != nil {
				return err
			}
			if len(evs) == 0 {
				return fmt.Errorf("no history for %q/%q: %w", a.namespace, args[0], sentinel.ErrNotFound)
			}
			older := limit > 0 && len(evs) > limit
			if older {
				evs = evs[1:]
				// On stderr, with --json too: the array alone cannot say it.
				defer fprintf(a.stderr, "earlier events not shown (--limit %d; --limit 0 shows all)\n", limit)
			}
			if a.jsonOut {
				out := make([]eventJSON, len(evs))
				for i, e := range evs {
					out[i] = toEventJSON(e)
				}
				return a.printJSON(out)
			}
			w := a.table()
			row(w, "ID", "AT", "EVENT", "STATE", "TOKEN", "OWNER", "METADATA")
			for _, e := range evs {
				row(w, e.ID, ts(e.At), e.Type, e.State, e.Token, e.Owner, metadataText(e.Metadata))
			}
			return w.Flush()
		}),
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "show only the newest N events (0: all)")
	cmd.Flags().BoolVar(&lastRun, "last-run", false, "show only the key's latest run (callers turned away left out)")
	return cmd
}

// checkValue refuses a VALUE given as an argument (force-complete,
// set-result) that is not JSON, before the connection: a typo exits 2
// even when the database does not answer.
func checkValue(_ *cobra.Command, args []string) error {
	if len(args) > 1 && args[1] != "" {
		return valueErr(args[1])
	}
	return nil
}

// valueErr is why value is not a VALUE to store: not JSON, or not UTF-8
// (the library refuses it too, but only once connected: callers would
// decode each bad byte as U+FFFD); nil when it is one.
func valueErr(value string) error {
	switch {
	case !json.Valid([]byte(value)):
		return notJSON(value)
	case !utf8.ValidString(value):
		return usageErr("VALUE must be UTF-8 JSON (give text as a JSON string of valid characters, bytes in base64), got %q", value)
	}
	return nil
}

// notJSON is the refusal of a VALUE that is not JSON.
func notJSON(value string) error {
	return usageErr("VALUE must be a JSON document (quote strings: '\"text\"'), got %q", value)
}

// storeValue is the body of force-complete and set-result: VALUE (args[1],
// or stdin when it is omitted) must be JSON; the operator confirms
// question (namespace, key, value); store (a method of the client,
// connected when the body runs) stores it for KEY (args[0]); done
// (namespace, key) is printed.
func (a *app) storeValue(f *operatorFlags, question string,
	store func(*sentinel.Client, context.Context, string, any, ...sentinel.Option) error, done string) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		key := args[0]
		var value string
		var err error
		switch {
		case len(args) > 1:
			value = args[1]
		case !isTerminal(a.stdin):
			if value, err = a.readValue(key, nil); err != nil {
				return err
			}
		}
		// A value piped in is checked before the database is read (one
		// given as an argument was checked before the connection).
		if value != "" {
			if err := valueErr(value); err != nil {
				return err
			}
		}
		rt, err := a.resultType(cmd.Context(), a.namespace, key)
		if err != nil {
			return err
		}
		if value == "" {
			if value, err = a.readValue(key, rt); err != nil { // on the terminal, showing the shape
				return err
			}
		}
		if err := valueErr(value); err != nil {
			return err
		}
		if err := idempotency.CheckResult(key, []byte(value)); err != nil {
			scope, ckey, _ := idempotency.ParseExecutionKey(key)
			_, why := idempotency.DecodeResponse([]byte(value))
			return usageErr("%q is the Idempotency-Key %q of the idempotency middleware, which could not replay this value to the client (%w); "+
				"resolve it with an HTTP response:\n  %s", key, ckey, why, a.idemCommand("resolve", ckey, scope, a.namespace))
		}
		if rt != nil {
			// Checked again by the library when it stores the value;
			// checked here so that no question is asked about a value
			// that will be refused.
			if err := rt.Check(key, []byte(value)); err != nil {
				return fmt.Errorf("%w\nexpected shape (%s): %s", err, rt.Name, rt.Shape())
			}
		}
		if err := a.confirm(f.yes, question, a.namespace, key, value); err != nil {
			return err
		}
		if err := store(a.client, cmd.Context(), key, json.RawMessage(value), f.options()...); err != nil {
			return err
		}
		return a.printChanged(cmd.Context(), key, done)
	}
}

// printChanged reports an operator's change of key: with --json the
// execution as it is now (read back), else the sentence done (namespace,
// key).
func (a *app) printChanged(ctx context.Context, key, done string) error {
	if !a.jsonOut {
		fprintf(a.stdout, done, a.namespace, key)
		return nil
	}
	e, err := a.client.Inspect(ctx, key)
	if err != nil {
		// Not wrapped: the change was made; only the read-back failed.
		return fmt.Errorf("%q/%q was changed, but reading it back for --json failed: %v", a.namespace, key, err)
	}
	return a.printJSON(toExecJSON(e))
}

// readValue reads a value (JSON) from stdin: on a terminal it asks for it
// and reads lines until they hold a JSON document (or end); otherwise it
// reads stdin to its end.
func (a *app) readValue(key string, rt *sentinel.ResultType) (string, error) {
	if !isTerminal(a.stdin) {
		b, err := io.ReadAll(a.input())
		if err != nil {
			return "", err
		}
		if strings.TrimSpace(string(b)) == "" {
			return "", usageErr("give VALUE, as an argument or on stdin")
		}
		return strings.TrimSpace(string(b)), nil
	}
	fprintf(a.stderr, "The result of %s/%s, as JSON", a.namespace, key)
	if rt != nil {
		fprintf(a.stderr, " (%s: %s)", rt.Name, rt.Shape())
	}
	fmt.Fprintln(a.stderr, "; it ends when the lines typed form a JSON document:")
	var b strings.Builder
	for {
		line, err := a.input().ReadString('\n')
		b.WriteString(line)
		if v := strings.TrimSpace(b.String()); v != "" && json.Valid([]byte(v)) {
			return v, nil
		}
		if err != nil {
			if v := strings.TrimSpace(b.String()); v != "" {
				return v, nil // not JSON: refused by the caller, with the value
			}
			return "", usageErr("no value given")
		}
	}
}

// operatorFlags are the flags shared by reconciliation steps.
type operatorFlags struct {
	yes    bool
	token  int64
	reason string
}

func (f *operatorFlags) add(cmd *cobra.Command) {
	addYes(cmd, &f.yes)
	cmd.Flags().Int64Var(&f.token, "token", 0, "act only if the key is still at this fencing token (the one inspect showed)")
	cmd.Flags().StringVar(&f.reason, "reason", "", "why, recorded in the key's history (UTF-8 text)")
}

// check refuses a --token below 1 before the connection: no key is ever
// at such a token (they start at 1), and --token 0 would drop the guard
// in silence.
func (f *operatorFlags) check(cmd *cobra.Command, _ []string) error {
	if cmd.Flags().Changed("token") && f.token < 1 {
		return usageErr("--token %d: give the fencing token inspect showed (1 or more), or leave --token out", f.token)
	}
	return nil
}

// checkWith is check, then more.
func (f *operatorFlags) checkWith(more func(*cobra.Command, []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := f.check(cmd, args); err != nil {
			return err
		}
		return more(cmd, args)
	}
}

func (f *operatorFlags) options() []sentinel.Option {
	var opts []sentinel.Option
	if f.token != 0 {
		opts = append(opts, sentinel.WithToken(f.token))
	}
	if f.reason != "" {
		opts = append(opts, sentinel.WithMetadata(map[string]any{"reason": f.reason}))
	}
	return opts
}

func (a *app) reconcileCmd() *cobra.Command {
	var f operatorFlags
	cmd := &cobra.Command{
		Use:   "reconcile KEY",
		Short: "Start reconciling an uncertain key (executing, lease expired)",
		Long: `reconcile moves an uncertain key (executing with an expired lease) to
reconciling and mints a new fencing token, so the worker that held it can no
longer complete it. Once callers then get ErrReconciling. Establish whether
the work happened, then finish with force-complete (it did) or reset (it
did not). A key waiting for a re-run (WithRerun attempts left: "rerun
pending" in status and list) is executing with an expired lease too:
reconcile takes it as well, and its next caller no longer re-runs it.

Exit code 4 when the key is not executing with an expired lease (its lease
is alive, or it is in another state, or --token no longer matches); 3 when
it does not exist.`,
		Example: `  sentinel reconcile payment-order-789 -n payments --token 41 --reason "checking the PSP" --yes`,
		Args:    args(1, 1),
		RunE: a.runEChecked(f.check, func(cmd *cobra.Command, args []string) error {
			if err := a.confirm(f.yes, "reconcile %q/%q", a.namespace, args[0]); err != nil {
				return err
			}
			e, err := a.client.Reconcile(cmd.Context(), args[0], f.options()...)
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(toExecJSON(e))
			}
			fprintf(a.stdout, "%s/%s is reconciling, token %d\n", e.Namespace, e.Key, e.Token)
			if scope, key, ok := idempotency.ParseExecutionKey(e.Key); ok {
				fprintf(a.stdout, "\nnext: if the request took effect, give the response its retries get (it asks for it):\n  %s\n",
					a.idemCommand("resolve", key, scope, e.Namespace, "--token", strconv.FormatInt(e.Token, 10)))
				fprintf(a.stdout, "if it did not, let the retry run it:\n  %s\n",
					a.keyCommand("reset", []string{e.Key}, "-n", e.Namespace, "--token", strconv.FormatInt(e.Token, 10)))
				return nil
			}
			evs, err := a.client.LastRun(cmd.Context(), e.Key, sentinel.WithNamespace(e.Namespace))
			if err != nil {
				return err
			}
			a.nextSteps(e, refusedEvidence(evs), defaultRerunPendingAfter) // reconciling: no rerun pending
			return nil
		}),
	}
	f.add(cmd)
	return cmd
}

func (a *app) forceCompleteCmd() *cobra.Command {
	var f operatorFlags
	cmd := &cobra.Command{
		Use:   "force-complete KEY [VALUE]",
		Short: "Resolve a reconciling key as done, with VALUE (JSON) as its result",
		Long: `force-complete resolves a reconciling key as done: VALUE, a JSON document,
becomes its stored result and every later Once caller gets it as a cached
result (decoded into the caller's type). Only allowed from reconciling.
Without VALUE it reads the value from stdin (on a terminal it asks for it,
showing the expected shape).

When the application declared the result type of the key's space
(sentinel.RegisterResultType), VALUE must match it: an unknown member (a
typo), a missing member or a wrong type is refused with the JSON path of
the first error, and nothing is written. Without a declaration, a value
the callers cannot decode is stored, and each caller gets an error instead
of it (never a silent zero value).

Exit code 2 when VALUE is not JSON or not UTF-8, or --reason is not UTF-8
(nothing is written); 4 when it does not match the declared type, when the
key is not reconciling or --token no longer matches; 3 when it does not
exist.`,
		Example: `  sentinel force-complete payment-order-789 '{"charge_id":"ch_123","amount":500}' -n payments --token 42 --yes
  sentinel force-complete payment-order-789 -n payments --token 42    # asks for the value
  sentinel force-complete webhook-17 null -n hooks --yes`,
		Args: args(1, 2),
		RunE: a.runEChecked(f.checkWith(checkValue), a.reconcileFirst("force-complete", a.storeValue(&f, "force-complete %q/%q with result %s", (*sentinel.Client).ForceComplete,
			"%s/%s is completed; callers now get the stored result\n"))),
	}
	f.add(cmd)
	return cmd
}

func (a *app) resetCmd() *cobra.Command {
	var f operatorFlags
	cmd := &cobra.Command{
		Use:   "reset KEY",
		Short: "Resolve a reconciling key as not done: the next caller runs it",
		Long: `reset resolves a reconciling key as not done: it is handed back (safe to
retry), as status, list and inspect then show it (claimed with no live
lease), so the next Once caller runs fn again, with a new token. Only
allowed from reconciling.

Exit code 4 when the key is not reconciling or --token no longer matches;
3 when it does not exist.`,
		Example: `  sentinel reset payment-order-789 -n payments --token 42 --reason "PSP has no charge" --yes`,
		Args:    args(1, 1),
		RunE: a.runEChecked(f.check, a.reconcileFirst("reset", func(cmd *cobra.Command, args []string) error {
			if err := a.confirm(f.yes, "reset %q/%q so that the next caller runs it again", a.namespace, args[0]); err != nil {
				return err
			}
			if err := a.client.ResetToClaimed(cmd.Context(), args[0], f.options()...); err != nil {
				return err
			}
			// In the words status, list and inspect then show it in.
			return a.printChanged(cmd.Context(), args[0], "%s/%s is "+handedBackLabel+": nothing runs it, the next caller does\n")
		})),
	}
	f.add(cmd)
	return cmd
}

func (a *app) setResultCmd() *cobra.Command {
	var f operatorFlags
	cmd := &cobra.Command{
		Use:   "set-result KEY [VALUE]",
		Short: "Store VALUE (JSON) as the result of a key completed without one",
		Long: `set-result stores VALUE, a JSON document, as the result of a key that
completed but whose result could not be stored (fn succeeded, but its result
could not be encoded or was over MaxResultSize: inspect shows
"result: (not stored: ...)" and callers get ErrResult), or replaces a result
an operator stored that the callers cannot decode. Afterwards callers get
VALUE as the cached result. Allowed only for such a key. Without VALUE it
reads the value from stdin (on a terminal it asks for it). VALUE is checked
against the key's declared result type, as by force-complete.

Exit code 2 when VALUE is not JSON or not UTF-8, or --reason is not UTF-8
(nothing is written); 4 when it does not match the declared type, when the
key is not such a key or --token no longer matches; 3 when it does not
exist.`,
		Example: `  sentinel inspect report-2026-11 -n reports     # result: (not stored: ...)
  sentinel set-result report-2026-11 '{"rows":1204}' -n reports --token 88 --yes`,
		Args: args(1, 2),
		RunE: a.runEChecked(f.checkWith(checkValue), a.storeValue(&f, "set the result of %q/%q to %s", (*sentinel.Client).SetResult,
			"%s/%s now replays the stored result\n")),
	}
	f.add(cmd)
	return cmd
}

// pruneJSON is prune's --json output.
type pruneJSON struct {
	Namespace  *string `json:"namespace"` // null: every namespace
	OlderThan  string  `json:"older_than"`
	Executions int64   `json:"executions"`
	HandedBack int64   `json:"handed_back"`
	Events     int64   `json:"events"`
	Leases     int64   `json:"leases"`

	QueueEvents int64 `json:"queue_events"`
	Tickets     int64 `json:"tickets"`
	Queues      int64 `json:"queues"`
	Leaders     int64 `json:"leaders"`
	Members     int64 `json:"members"`
}

func (a *app) pruneCmd() *cobra.Command {
	var (
		yes       bool
		olderThan time.Duration
		all       bool
	)
	cmd := &cobra.Command{
		Use:   "prune --older-than DURATION",
		Short: "Delete completed executions, old history and long-expired lease, queue and election rows",
		Long: `prune deletes, in one statement, completed executions completed before
--older-than, keys handed back (claimed with no live lease: safe to retry)
unchanged since then, history events older than that (except those of
uncertain, reconciling and in-progress keys), and lease rows expired for
longer than that and at least an hour. Uncertain, in-progress and
reconciling executions are never pruned. A pruned key can run again (the
next Once finds no record), so --older-than must exceed any redelivery
window; it must be at least 1h (sentinel.MinRetention), else exit 2.

The same statement prunes queue events older than --older-than (except
those of tickets still queued), dead tickets, and leader and member rows
expired for longer than that and at least an hour; then the queue rows of
resources with no ticket left. Live tickets, the current leader and running
electors are never pruned.

It acts on --namespace only; --all-namespaces prunes every namespace.`,
		Example: `  sentinel prune --older-than 168h -n payments --yes
  sentinel prune --older-than 720h --all-namespaces --yes`,
		Args: args(0, 0),
		RunE: a.runEChecked(func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("older-than") {
				return usageErr("--older-than is required (e.g. --older-than 168h)")
			}
			if olderThan < sentinel.MinRetention {
				return usageErr("--older-than %s: give %s (sentinel.MinRetention) or more: a pruned key runs again when its event is redelivered", olderThan, sentinel.MinRetention)
			}
			return nil
		}, func(cmd *cobra.Command, args []string) error {
			scope := fmt.Sprintf("namespace %q", a.namespace)
			if all {
				scope = "every namespace"
			}
			if err := a.confirm(yes, "prune %s: completed executions, history, and dead lease, queue and election rows older than %s", scope, olderThan); err != nil {
				return err
			}
			opts := []sentinel.Option{sentinel.WithAllNamespaces()}
			out := pruneJSON{OlderThan: olderThan.String()}
			if !all {
				opts = []sentinel.Option{sentinel.WithNamespace(a.namespace)}
				out.Namespace = &a.namespace
			}
			res, err := a.client.Prune(cmd.Context(), olderThan, opts...)
			if err != nil {
				return err
			}
			out.Executions, out.HandedBack, out.Events, out.Leases = res.Executions, res.HandedBack, res.Events, res.Leases
			out.QueueEvents, out.Tickets, out.Queues, out.Leaders, out.Members = res.QueueEvents, res.Tickets, res.Queues, res.Leaders, res.Members
			if a.jsonOut {
				return a.printJSON(out)
			}
			fprintf(a.stdout, "pruned %s: %d completed executions, %d handed-back keys, %d events, %d lease rows, %d queue events, %d dead tickets, %d queue rows, %d leader rows, %d member rows\n",
				scope, res.Executions, res.HandedBack, res.Events, res.Leases, res.QueueEvents, res.Tickets, res.Queues, res.Leaders, res.Members)
			return nil
		}),
	}
	addYes(cmd, &yes)
	cmd.Flags().DurationVar(&olderThan, "older-than", 0, "age past which completed executions, events and dead rows are deleted (required)")
	cmd.Flags().BoolVar(&all, "all-namespaces", false, "prune every namespace instead of --namespace")
	return cmd
}

// reconcileFirst wraps fn (force-complete, reset: steps from reconciling)
// so that its refusal of a key still uncertain (executing, its lease
// expired, no re-run left: not reconciled yet) says to reconcile it
// first, with the command line; the refusal and its exit code stay.
func (a *app) reconcileFirst(step string, fn func(cmd *cobra.Command, args []string) error) func(cmd *cobra.Command, args []string) error {
	return func(cmd *cobra.Command, args []string) error {
		err := fn(cmd, args)
		if !errors.Is(err, sentinel.ErrWrongState) || len(args) == 0 {
			return err
		}
		ex, ierr := a.client.Inspect(cmd.Context(), args[0])
		if ierr != nil || ex.State != sentinel.StateExecuting || ex.LeaseAlive || ex.Rerunnable() {
			return err
		}
		return fmt.Errorf("%w\nthe key is uncertain, not reconciled yet: reconcile it first (a new fencing token), then %s it:\n  %s",
			err, step, a.keyCommand("reconcile", []string{ex.Key}, "-n", ex.Namespace, "--token", strconv.FormatInt(ex.Token, 10)))
	}
}
