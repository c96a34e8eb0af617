package main

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/internal/names"
	"github.com/sentinel-coordination/sentinel/internal/reltime"
)

// The idempotency commands address keys written by the idempotency
// middleware by the client's Idempotency-Key value and --scope (what
// Options.Scope returned; omitted for idempotency.SingleTenant), never by
// the execution key the middleware derives from them. The stored format is
// package idempotency's (record.go); nothing here parses it.

func (a *app) idempotencyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "idempotency",
		Short: "Find, inspect and resolve Idempotency-Key requests (the idempotency middleware)",
		Long: `idempotency operates the keys of the idempotency middleware (package
idempotency): KEY is the client's own Idempotency-Key value and --scope the
principal the server's Options.Scope returned for the request (omit it for
idempotency.SingleTenant).

A request that crashed or panicked mid-handler leaves its key UNCERTAIN:
the client's retries get a 500 problem and nothing runs again. Find out
what happened (your own records, the payment provider), then resolve the
key with the HTTP response the client should get: its retry of the same
request (same method, path, query and body) then gets exactly that
response, with Idempotent-Replayed: true. If nothing happened, reconcile
and reset the execution instead (sentinel reset), so the retry runs.`,
		Example: `  sentinel idempotency list --uncertain
  sentinel idempotency inspect 8e03978e --scope acct_42 -n payments
  sentinel idempotency resolve 8e03978e --scope acct_42 -n payments --token 7 \
      --status 201 --body '{"charge_id":"ch_97ea3056"}' --yes`,
		// An unknown subcommand (a typo) is a usage error, exit 2, as
		// at the top level; alone, it shows this help.
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.idemListCmd(), a.idemInspectCmd(), a.idemResolveCmd())
	return cmd
}

// idemKeyJSON is a listed key with --json.
type idemKeyJSON struct {
	Scope     string         `json:"scope"`
	Key       string         `json:"key"`
	Namespace string         `json:"namespace"`
	State     sentinel.State `json:"state"`
	Uncertain bool           `json:"uncertain"`
	// HandedBack: claimed with no live lease; the client's retry runs it.
	HandedBack bool `json:"handed_back"`
	// RerunPending: the handler stopped with re-runs left
	// (Options.Rerun): the client's repeat of the request runs it again.
	RerunPending bool `json:"rerun_pending"`
	// NeedsOperator: uncertain, completed with the response not stored,
	// rerun pending whose lease ended more than --rerun-pending-after ago
	// (no repeat of the request came back, so none will), or reconciling
	// for longer than --reconciling-after: what status --exit-code pages
	// on (needsOperator).
	NeedsOperator bool    `json:"needs_operator"`
	Token         int64   `json:"token"`
	EffectKey     string  `json:"effect_key"` // what sentinel.EffectKey gave the handler for the key
	Method        string  `json:"method,omitempty"`
	Path          string  `json:"path,omitempty"`
	UpdatedAt     *string `json:"updated_at"`
	Since         *string `json:"since"` // when it entered the state shown (SINCE): Execution.Since
	CreatedAt     *string `json:"created_at"`
	// rerunState is the STATE of a key rerun pending (rerunLabel), as
	// list and inspect show it; not in --json.
	rerunState string
}

func (a *app) idemListCmd() *cobra.Command {
	var (
		unc    bool
		state  string
		limit  int
		cursor string
		scope  string
		ns     nsFlags
		// A rerun pending key whose lease ended longer ago, or a key
		// reconciling for longer, needs an operator (status
		// --exit-code's thresholds).
		th attentionAfter
	)
	cmd := &cobra.Command{
		Use:   "list [PREFIX]",
		Short: "List the middleware's keys not completed: uncertain first",
		Long: `list shows the Idempotency-Keys of every namespace (or only of the one
given with --namespace) that are not completed (uncertain, being
reconciled, in progress, handed back), uncertain ones first, each with its
namespace, scope, key, the request's method and path, and how long it has
been in its state. --uncertain keeps only the uncertain ones; --state only
the keys in that state, a page of --limit at a time (the oldest state
change first, as list), with the command that lists the next page (--after
CURSOR): --state completed lists the completed keys, each with its scope
(the one to give inspect), which are not listed otherwise. It ends with
the command that inspects each uncertain key. Other schemas of the
database with uncertain executions (the first five that hold Sentinel's
tables, in name order) are named on stderr, with the same listing there.

--scope S keeps only the keys of scope S (--scope '' those of
idempotency.SingleTenant); PREFIX, with --scope, only the keys starting
with PREFIX: the key a client or an alert names, found without paging
through every completed key. The scope is stored before the key, so a
PREFIX needs its --scope (inspect KEY without --scope says where else to
look).

A key handed back (the handler called NoEffect, or the request gave up
before the handler ran) is listed as "handed back (safe to retry)": the
client's retry runs it.

A key whose handler stopped with re-runs left (Options.Rerun) is rerun
pending: the client's repeat of the request runs it again. Once its lease
ended more than --rerun-pending-after (default 15m, as status
--exit-code) ago, no repeat came back and none will: it is listed as
"executing (rerun pending, needs an operator: ...)", as sentinel list and
inspect show it, after the uncertain keys, and
followed, as they are, by the command that inspects it (with the same
--rerun-pending-after when it is not the default), which prints its
steps. A key reconciling for longer than --reconciling-after (default
1h, as status --exit-code) is listed as "reconciling (needs an operator:
for more than D)", followed by its inspect command too. With --json,
"needs_operator" is true for such keys, for an uncertain one and for one
whose response was not stored: what status --exit-code pages on.

Before 0.3 it covered only --namespace (default "default"); scripts that
relied on that pass -n default.`,
		Example: `  sentinel idempotency list --uncertain
  sentinel idempotency list -n payments
  sentinel idempotency list --uncertain --json
  sentinel idempotency list --rerun-pending-after 1h --json | jq '.keys[] | select(.needs_operator)'
  sentinel idempotency list --state completed -n payments   # a completed key's scope
  sentinel idempotency list --state completed --limit 500 --json
  sentinel idempotency list --state completed 8e03978e --scope acct_42   # keys starting with 8e03978e`,
		Args: args(0, 1),
		RunE: a.runEChecked(func(cmd *cobra.Command, args []string) error {
			if err := a.checkState(cmd, state); err != nil {
				return err
			}
			if unc && state != "" && sentinel.State(state) != sentinel.StateExecuting {
				return usageErr("--uncertain keys are executing: give --uncertain or --state %s, not both", state)
			}
			if len(args) == 1 && !cmd.Flags().Changed("scope") {
				return usageErr("PREFIX %s needs --scope: the stored key starts with the scope the service gave the request "+
					"(--scope '' for idempotency.SingleTenant); to find a key's scope, list without PREFIX", argText(args[0]))
			}
			if len(args) == 1 && args[0] == "" {
				return usageErr("PREFIX is empty: give the start of the key, or leave PREFIX out")
			}
			if cmd.Flags().Changed("scope") {
				prefix := ""
				if len(args) == 1 {
					prefix = args[0]
				}
				if why := names.Text(idempotency.ExecutionKey(scope, prefix)); why != "" || len(idempotency.ExecutionKey(scope, prefix)) > sentinel.MaxKeyLen {
					return usageErr("invalid PREFIX %s or --scope %s: the start of the stored key (the key with its scope) must be at most %d bytes of UTF-8 text without NUL bytes",
						argText(prefix), argText(scope), sentinel.MaxKeyLen)
				}
			}
			if err := checkAfter(th); err != nil {
				return err
			}
			if state == "" && (cmd.Flags().Changed("limit") || cmd.Flags().Changed("after")) {
				return usageErr("--limit and --after page a listing of one state: give --state too (the keys not completed are listed whole)")
			}
			return checkLimit(limit)
		}, func(cmd *cobra.Command, args []string) (err error) {
			namespace, err := ns.listing(cmd, a)
			if err != nil {
				return err
			}
			// Only the middleware's keys (a page is not filled with the
			// others' rows); with --scope, that scope's keys, starting
			// with PREFIX: a prefix of the stored key, which the primary
			// key serves.
			keyPrefix := idempotency.KeyPrefix
			if cmd.Flags().Changed("scope") {
				keyPrefix = idempotency.ExecutionKey(scope, "")
				if len(args) == 1 {
					keyPrefix = idempotency.ExecutionKey(scope, args[0])
				}
			}
			// Uncertain work of other schemas (an application whose
			// middleware's client sets a Config.Schema of its own): named on
			// stderr, as list --uncertain does; stdout unchanged.
			defer func() {
				if err != nil {
					return // the listing failed: its error says why
				}
				found, _, _, schemasErr := a.uncertainInSchemas(cmd.Context())
				a.noteSchemasUnread(schemasErr)
				if len(found) == 0 {
					return
				}
				fprintf(a.stderr, "sentinel: note: uncertain executions in other schemas of this database too: %s; the same listing for every namespace there:\n", quoteAll(found))
				for _, line := range strings.Split(strings.TrimPrefix(a.schemaCommands(cmd, found, "namespace", "all-namespaces"), "\n"), "\n") {
					fprintln(a.stderr, line)
				}
			}()
			var keys []idemKeyJSON
			var execs []sentinel.Execution
			next := "" // with --state: the cursor of the next page
			states := []sentinel.State{sentinel.StateExecuting, sentinel.StateReconciling, sentinel.StateClaimed}
			if state != "" {
				states = []sentinel.State{sentinel.State(state)}
			}
			for _, st := range states {
				if unc && st != sentinel.StateExecuting {
					continue
				}
				f := sentinel.ExecutionFilter{State: st, Uncertain: unc, Limit: sentinel.MaxExecutionsLimit,
					Namespace: namespace, AllNamespaces: ns.all, KeyPrefix: keyPrefix}
				if state != "" {
					// One state (completed keys can be millions): one
					// page, and the command for the next.
					f.Limit, f.After = limit, cursor
					page, n, err := a.client.Executions(cmd.Context(), f)
					if err != nil {
						return err
					}
					execs, next = page, n
					break
				}
				for {
					page, next, err := a.client.Executions(cmd.Context(), f)
					if err != nil {
						return err
					}
					execs = append(execs, page...)
					if next == "" {
						break
					}
					f.After = next
				}
			}
			for i := range execs {
				e := &execs[i]
				scope, key, ok := idempotency.ParseExecutionKey(e.Key)
				if !ok {
					continue
				}
				k := idemKeyJSON{Scope: scope, Key: key, Namespace: e.Namespace, State: e.State, Uncertain: uncertain(e),
					HandedBack: handedBack(e), RerunPending: e.Rerunnable(), NeedsOperator: needsOperator(e, th), Token: e.Token, EffectKey: e.EffectKey(), UpdatedAt: tsJSON(e.UpdatedAt), Since: tsJSON(e.Since()), CreatedAt: tsJSON(e.CreatedAt)}
				switch {
				case e.Rerunnable():
					k.rerunState = rerunLabel(e, th.rerunPending, true)
				case reconcilingStale(e, th.reconciling):
					k.rerunState = reconcilingLabel(e, th.reconciling)
				}
				evs, err := a.client.LastRun(cmd.Context(), e.Key, sentinel.WithNamespace(e.Namespace))
				if err != nil {
					return err
				}
				if req, ok := idempotency.RequestOf(evs); ok {
					k.Method, k.Path = req.Method, req.Path
				}
				keys = append(keys, k)
			}
			rank := func(k idemKeyJSON) int {
				switch {
				case k.Uncertain:
					return 0
				case k.RerunPending && k.NeedsOperator: // no repeat came back
					return 1
				case k.State == sentinel.StateReconciling:
					return 2
				case k.HandedBack:
					return 4
				case k.State == sentinel.StateCompleted:
					return 5
				}
				return 3
			}
			sort.SliceStable(keys, func(i, j int) bool { return rank(keys[i]) < rank(keys[j]) })
			if a.jsonOut {
				if keys == nil {
					keys = []idemKeyJSON{}
				}
				if state != "" {
					return a.printJSON(map[string]any{"keys": keys, "next": next})
				}
				return a.printJSON(map[string]any{"keys": keys})
			}
			if len(keys) == 0 {
				what := map[bool]string{true: "uncertain ", false: "open "}[unc]
				if state != "" && !unc {
					what = state + " "
				}
				which := ""
				if cmd.Flags().Changed("scope") {
					which = fmt.Sprintf("of scope %s ", argText(scope))
					if len(args) == 1 {
						which += fmt.Sprintf("starting with %s ", argText(args[0]))
					}
				}
				fprintf(a.stdout, "no Idempotency-Keys %s%sin %s\n", what, which, nsLabel(namespace))
				if next != "" { // a page of executions that are not the middleware's
					fprintf(a.stderr, "more:\n  %s\n", a.again(cmd, "after", next))
				}
				return nil
			}
			w := a.table()
			row(w, "STATE", "NAMESPACE", "SCOPE", "KEY", "METHOD", "PATH", "SINCE", "TOKEN")
			for _, k := range keys {
				state := string(k.State)
				switch {
				case k.Uncertain:
					state = "UNCERTAIN"
				case k.HandedBack:
					state = handedBackLabel
				case k.rerunState != "": // rerun pending, or reconciling too long
					state = k.rerunState
				case k.State == sentinel.StateExecuting || k.State == sentinel.StateClaimed:
					state += " (in progress)"
				}
				row(w, state, k.Namespace, idemOrDash(k.Scope), k.Key, idemOrDash(k.Method), idemOrDash(k.Path),
					relative(timeOf(k.Since)), k.Token)
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if next != "" {
				fprintf(a.stderr, "more:\n  %s\n", a.again(cmd, "after", next))
			}
			first := true
			for _, k := range keys {
				if !k.Uncertain {
					continue
				}
				if first {
					fprintf(a.stdout, "\nnext: inspect each uncertain key, then resolve it:\n")
					first = false
				}
				fprintf(a.stdout, "  %s\n", a.idemCommand("inspect", k.Key, k.Scope, k.Namespace))
			}
			// inspect judges a rerun pending key, and a key reconciling,
			// by the same thresholds, so that it prints the steps and the
			// state this listing promises.
			flags := afterFlags(th)
			first = true
			for _, k := range keys {
				if !k.RerunPending || !k.NeedsOperator {
					continue
				}
				if first {
					fprintf(a.stdout, "\nnext: no repeat of these requests came back for more than %s to re-run them, so none will; inspect each, then resolve it:\n", durationArg(th.rerunPending))
					first = false
				}
				fprintf(a.stdout, "  %s\n", a.idemCommand("inspect", k.Key, k.Scope, k.Namespace, flags...))
			}
			first = true
			for _, k := range keys {
				if k.State != sentinel.StateReconciling || !k.NeedsOperator {
					continue
				}
				if first {
					fprintf(a.stdout, "\nnext: reconciling for more than %s (every retry of the request is answered 503 until an operator resolves it); inspect each, then resolve it or reset it:\n", durationArg(th.reconciling))
					first = false
				}
				fprintf(a.stdout, "  %s\n", a.idemCommand("inspect", k.Key, k.Scope, k.Namespace, flags...))
			}
			return nil
		}),
	}
	ns.add(cmd)
	cmd.Flags().Lookup("all-namespaces").Usage = "every namespace (the default unless --namespace is given)"
	cmd.Flags().BoolVar(&unc, "uncertain", false, "only uncertain keys (the request crashed: outcome unknown)")
	cmd.Flags().StringVar(&state, "state", "", "only keys in this state: claimed, executing, reconciling, completed (completed keys are listed only so)")
	cmd.Flags().IntVar(&limit, "limit", sentinel.DefaultExecutionsLimit, fmt.Sprintf("with --state: keys per page (1..%d)", sentinel.MaxExecutionsLimit))
	cmd.Flags().StringVar(&cursor, "after", "", "with --state: the cursor printed with the previous page")
	cmd.Flags().StringVar(&scope, "scope", "", "only the keys of this scope, the principal Options.Scope returned ('' for idempotency.SingleTenant); needed with PREFIX")
	addAfterFlags(cmd, &th, "a key rerun pending (its lease ended, on the database clock) longer than this needs an operator: listed as such, with its inspect command (status --exit-code's threshold)")
	return cmd
}

// timeOf reads back a time printed by tsJSON; zero for none.
func timeOf(s *string) time.Time {
	if s == nil {
		return time.Time{}
	}
	t, _ := time.Parse(time.RFC3339Nano, *s)
	return t
}

func idemOrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// idemResponseJSON is a response with --json; the body as text when it is
// UTF-8, else base64.
type idemResponseJSON struct {
	Status     int         `json:"status"`
	Header     http.Header `json:"header,omitempty"`
	Body       *string     `json:"body,omitempty"`
	BodyBase64 string      `json:"body_base64,omitempty"`
	Trailer    http.Header `json:"trailer,omitempty"` // sent after the body
}

func toIdemResponseJSON(r *idempotency.Response) *idemResponseJSON {
	if r == nil {
		return nil
	}
	j := &idemResponseJSON{Status: r.Status, Header: r.Header, Trailer: r.Trailer}
	if utf8.Valid(r.Body) {
		s := string(r.Body)
		j.Body = &s
	} else {
		j.BodyBase64 = base64.StdEncoding.EncodeToString(r.Body)
	}
	return j
}

// idemRecordJSON is inspect's --json output.
type idemRecordJSON struct {
	Scope         string            `json:"scope"`
	Key           string            `json:"key"`
	ExecutionKey  string            `json:"execution_key"`
	Namespace     string            `json:"namespace"`
	State         sentinel.State    `json:"state"`
	Uncertain     bool              `json:"uncertain"`
	RerunPending  bool              `json:"rerun_pending"`  // stopped with re-runs left (Options.Rerun): the client's repeat runs it again
	NeedsOperator bool              `json:"needs_operator"` // what status --exit-code pages on, by --rerun-pending-after and --reconciling-after, as idempotency list --json says
	Token         int64             `json:"token"`
	Attempt       int               `json:"attempt"`      // the handler's attempt under Token (re-runs: Options.Rerun, WithRerun)
	MaxAttempts   int               `json:"max_attempts"` // the key's bound on attempts (1: no re-run)
	EffectKey     string            `json:"effect_key"`   // what sentinel.EffectKey gave the handler for the key
	UpdatedAt     *string           `json:"updated_at"`
	Since         *string           `json:"since"` // when it entered the state shown (since:): Execution.Since
	Method        string            `json:"method,omitempty"`
	Path          string            `json:"path,omitempty"`
	Fingerprint   string            `json:"fingerprint,omitempty"`
	Response      *idemResponseJSON `json:"response,omitempty"`
	ResponseError string            `json:"response_error,omitempty"`
	Refused       *idemResponseJSON `json:"refused_response,omitempty"`
}

// idemNotFound is the error of an Idempotency-Key of scope with no
// execution in the command's namespace: where else it is (elsewhereAs),
// and, when no --scope was given, that a key the service scoped is found
// only with its scope (the key an operator copies from a client's log
// comes without it).
func (a *app) idemNotFound(cmd *cobra.Command, scope, key string, notFound error) error {
	err := a.elsewhereAs(cmd, executionLookup, idempotency.ExecutionKey(scope, key), key, notFound)
	list := a.command("idempotency", "list")
	listDone := a.command("idempotency", "list", "--state", "completed")
	if scope != "" {
		if found, _, _, lerr := a.lookElsewhere(cmd.Context(), executionLookup, idempotency.ExecutionKey(scope, key)); lerr != nil || len(found) > 0 {
			return err // in another namespace, with this scope
		}
		// The scope may be the wrong one: the listing names each key's.
		return &codeError{code: exitNotFound, err: errors.New(err.Error() + fmt.Sprintf("\nis %q the scope the service gave the request? "+
			"The keys not completed, each with its scope:\n  %s\nthe completed ones:\n  %s", scope, list, listDone))}
	}
	return &codeError{code: exitNotFound, err: errors.New(err.Error() + "\nno --scope was given: a key the service scopes " +
		"(idempotency.Options.Scope) is found only with its scope, the principal the service gave the request; " +
		"the keys not completed, each with its scope:\n  " + list + "\nthe completed ones:\n  " + listDone)}
}

func (a *app) idemInspectCmd() *cobra.Command {
	var (
		scope string
		th    attentionAfter
	)
	cmd := &cobra.Command{
		Use:   "inspect KEY",
		Short: "Show an Idempotency-Key: its request, state and response",
		Long: `inspect shows the key's state and fencing token, the request that claimed
it (method, path, fingerprint), and its stored response (status, headers,
decoded body) when completed, or the response the handler produced when
its completion was refused (the lease was lost first). Exit code 3 when the
key has no execution; the error then names the namespaces where the key
of that scope has one, each with the same command there.

A key run with re-runs (Options.Rerun) shows its attempt, "attempt N of
at most M (WithRerun)" (--json: "attempt", "max_attempts"), as sentinel
inspect does: the handler may have taken effect once per attempt.

A key whose handler stopped with re-runs left (Options.Rerun) is rerun
pending: the client's repeat of the request runs it again, and inspect
prints no step. Once its lease ended more than --rerun-pending-after
(default 15m, as status --exit-code) ago, no repeat came back and none
will: inspect marks its state "rerun pending, needs an operator", as
idempotency list and sentinel list do, and prints the steps of
an uncertain key (resolve, or reconcile then reset). status, given another --rerun-pending-after, prints this
command with it, so the two agree about the key. A key reconciling for
longer than --reconciling-after (default 1h, as status --exit-code) is
marked "reconciling (needs an operator: for more than D)". With --json,
"needs_operator" is true for such keys, for an uncertain one and for one
whose response was not stored, as idempotency list --json says it.`,
		Example: `  sentinel idempotency inspect 8e03978e --scope acct_42 -n payments
  sentinel idempotency inspect 8e03978e --scope acct_42 -n payments --json
  sentinel idempotency inspect 8e03978e --scope acct_42 -n payments --rerun-pending-after 1h`,
		Args: args(1, 1),
		RunE: a.runEChecked(func(*cobra.Command, []string) error {
			return checkAfter(th)
		}, func(cmd *cobra.Command, args []string) error {
			rec, err := idempotency.Inspect(cmd.Context(), a.client, scope, args[0], sentinel.WithNamespace(a.namespace))
			if errors.Is(err, sentinel.ErrNotFound) {
				return a.idemNotFound(cmd, scope, args[0], err)
			}
			if err != nil {
				return err
			}
			e := rec.Execution
			if a.jsonOut {
				return a.printJSON(idemRecordJSON{Scope: rec.Scope, Key: rec.Key, ExecutionKey: e.Key, Namespace: e.Namespace,
					State: e.State, Uncertain: uncertain(e), RerunPending: e.Rerunnable(), NeedsOperator: needsOperator(e, th), Token: e.Token,
					Attempt: e.Attempt, MaxAttempts: e.MaxAttempts, EffectKey: e.EffectKey(), UpdatedAt: tsJSON(e.UpdatedAt), Since: tsJSON(e.Since()),
					Method: rec.Request.Method, Path: rec.Request.Path, Fingerprint: rec.Request.Fingerprint,
					Response: toIdemResponseJSON(rec.Response), ResponseError: rec.ResponseError, Refused: toIdemResponseJSON(rec.Refused)})
			}
			w := a.table()
			row(w, "key:", esc(rec.Key))
			row(w, "scope:", esc(idemOrDash(rec.Scope)))
			row(w, "namespace:", e.Namespace)
			row(w, "state:", inspectStateLabel(e, th))
			row(w, "since:", ts(e.Since())+"  ("+relative(e.Since())+")")
			row(w, "token:", e.Token)
			attemptRow(w, e)
			row(w, "effect key:", e.EffectKey()+"  (sentinel.EffectKey: look the effect up at the provider by it)")
			if rec.Request.Method != "" {
				row(w, "request:", esc(rec.Request.Method+" "+rec.Request.Path))
				row(w, "fingerprint:", rec.Request.Fingerprint)
			} else {
				row(w, "request:", "- (no claim in the history: pruned)")
			}
			if rec.ResponseError != "" {
				row(w, "response:", "(cannot be replayed: "+rec.ResponseError+")")
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if rec.Response != nil {
				fmt.Fprintln(a.stdout, "\nstored response:")
				a.printResponse(rec.Response)
			}
			if rec.Refused != nil {
				fmt.Fprintln(a.stdout, "\nrefused response (the handler finished, but its lease was lost before the response was stored):")
				a.printResponse(rec.Refused)
			}
			tok := strconv.FormatInt(e.Token, 10)
			// A key rerun pending for as long as status --exit-code waits
			// before it pages (--rerun-pending-after, status's default):
			// no repeat of the request came back (the client gave up), so
			// the operator takes it as an uncertain key. A key that
			// stopped a moment ago gets no step, lest it stop the re-run
			// the client's repeat makes.
			stale := rerunStale(e, th.rerunPending)
			stalled := "" // fprintf escapes its arguments: no newline here
			if stale {
				stalled = fmt.Sprintf("its lease ended %s and no repeat of the request came back to run attempt %d of %d; "+
					"if none will (no repeat re-runs it after this), ", reltime.Millis((-e.LeaseLeft()).Milliseconds()), e.Attempt+1, e.MaxAttempts)
			}
			switch {
			case e.ResultLost():
				// Every retry gets 500 (ProblemNotStored) until the
				// response is stored: resolve stores it, with the
				// request's fingerprint, as set-result would a value.
				fprintf(a.stdout, "\nnext: the handler ran, but its response was not stored (every retry of the request gets 500 until it is); find out what the request did, then give the response its retries get (it asks for it):\n  %s\n",
					a.idemCommand("resolve", rec.Key, rec.Scope, e.Namespace, "--token", tok))
			case uncertain(e) || e.State == sentinel.StateReconciling || stale:
				if rec.Refused != nil {
					fprintf(a.stdout, "\nnext: %sthe handler finished; send its response to the client's retries:\n  %s\n", stalled,
						a.idemCommand("resolve", rec.Key, rec.Scope, e.Namespace, "--refused", "--token", tok))
				} else {
					fprintf(a.stdout, "\nnext: %sfind out whether the request took effect; if it did, give the response its retries get (it asks for it):\n  %s\n", stalled,
						a.idemCommand("resolve", rec.Key, rec.Scope, e.Namespace, "--token", tok))
				}
				if uncertain(e) || stale {
					fprintf(a.stdout, "if it did not, reconcile it, then reset it (the retry runs it):\n  %s\n",
						a.keyCommand("reconcile", []string{e.Key}, "-n", e.Namespace, "--token", tok))
				} else {
					fprintf(a.stdout, "if it did not, reset it (the retry runs it):\n  %s\n",
						a.keyCommand("reset", []string{e.Key}, "-n", e.Namespace, "--token", tok))
				}
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&scope, "scope", "", "the principal Options.Scope returned for the request (omit for idempotency.SingleTenant)")
	addAfterFlags(cmd, &th, "a key rerun pending (its lease ended, on the database clock) longer than this needs an operator: inspect prints its steps (status --exit-code's threshold)")
	return cmd
}

// printResponse prints a response: status, headers, body (decoded).
func (a *app) printResponse(r *idempotency.Response) {
	if r.Status == -1 {
		fmt.Fprintln(a.stdout, "  (the handler's response was too large to store)")
		return
	}
	fmt.Fprintf(a.stdout, "  %d %s\n", r.Status, http.StatusText(r.Status))
	a.printFields(r.Header, "")
	defer a.printFields(r.Trailer, "trailer ")
	switch {
	case len(r.Body) == 0:
		fmt.Fprintln(a.stdout, "  (no body)")
	case utf8.Valid(r.Body):
		for _, line := range strings.Split(strings.TrimRight(string(r.Body), "\n"), "\n") {
			fmt.Fprintf(a.stdout, "  %s\n", esc(line))
		}
	default:
		fmt.Fprintf(a.stdout, "  (%d bytes, not text; base64) %s\n", len(r.Body), base64.StdEncoding.EncodeToString(r.Body))
	}
}

// printFields prints header fields, sorted by name, each line prefixed
// (the trailer's after the body).
func (a *app) printFields(h http.Header, prefix string) {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		for _, v := range h[k] {
			fmt.Fprintf(a.stdout, "  %s%s: %s\n", prefix, esc(k), esc(v))
		}
	}
}

func (a *app) idemResolveCmd() *cobra.Command {
	var (
		scope, body string
		status      int
		headers     []string
		refusedResp bool
		f           operatorFlags
		ask         bool        // no response given: ask for it on the terminal
		hdr         http.Header // the response given, once checked
		bodyBytes   []byte
	)
	cmd := &cobra.Command{
		Use:   "resolve KEY (--status N --body JSON|@FILE [--header 'K: V']... | --refused)",
		Short: "Resolve an uncertain Idempotency-Key (or one whose response was not stored) with the HTTP response its retries get",
		Long: `resolve completes an uncertain (or reconciling) Idempotency-Key with an HTTP
response, keeping the fingerprint of the request that claimed it: the
client's retry of the same request (same method, path, query and body) then
gets exactly that response, with Idempotent-Replayed: true. A different
request with the key still gets 422.

  --status N        the status (200-599)
  --body TEXT       the body (JSON, or any text); @FILE reads it from FILE
  --header 'K: V'   a response header, repeatable; Content-Type defaults to
                    application/json when the body is JSON. Credentials
                    (Set-Cookie, Authorization, ...), Retry-After and
                    per-connection headers are dropped, as the middleware
                    never stores them.
  --refused         the response the handler produced when its completion
                    was refused (inspect shows it), instead of the above

Without any of them, on a terminal, it asks for the status, the headers and
the body. A body whose Content-Type is JSON must be JSON (exit 4).

An uncertain key is reconciled first (a new fencing token, so a late
completion by the crashed request is refused), then completed. A key
that completed with its response not stored (every retry gets 500,
ProblemNotStored; status and list say "result not stored") gets the
response as its result, as set-result stores a value (--refused does not
apply to it). Every write
acts only if the key is still at the token of the request resolve read
(or at --token, the one inspect showed): if another operator reset the key
meanwhile and a newer request claimed it, resolve is refused (exit 4) and
the newer request is left alone.

Exit code 2 for bad input (nothing is written); 3 when the key does not
exist; 4 when it is not uncertain, reconciling or completed with its
response not stored, or --token no longer matches.`,
		Example: `  sentinel idempotency resolve 8e03978e --scope acct_42 -n payments --token 7 \
      --status 201 --body '{"charge_id":"ch_97ea3056"}' --yes
  sentinel idempotency resolve 8e03978e --scope acct_42 -n payments --body @response.json --status 201 --yes
  sentinel idempotency resolve 8e03978e --scope acct_42 -n payments --refused --yes`,
		Args: args(1, 1),
		RunE: a.runEChecked(f.checkWith(func(cmd *cobra.Command, _ []string) error {
			// The response given on the command line is checked before the
			// connection; one asked for on the terminal, once it is typed.
			given := cmd.Flags().Changed
			if refusedResp && (given("status") || given("body") || given("header")) {
				return usageErr("give --refused or --status/--body/--header, not both")
			}
			if refusedResp {
				return nil
			}
			if !given("status") && !given("body") && !given("header") && isTerminal(a.stdin) {
				ask = true
				return nil
			}
			if !given("status") || !given("body") {
				return usageErr("give --status and --body (the response the client's retries get), or --refused")
			}
			var err error
			hdr, bodyBytes, err = responseOf(status, headers, body, true)
			return err
		}), func(cmd *cobra.Command, args []string) error {
			if ask {
				var err error
				if status, headers, body, err = a.askResponse(args[0]); err != nil {
					return err
				}
				if hdr, bodyBytes, err = responseOf(status, headers, body, false); err != nil {
					return err
				}
			}
			rec, err := idempotency.Inspect(cmd.Context(), a.client, scope, args[0], sentinel.WithNamespace(a.namespace))
			if errors.Is(err, sentinel.ErrNotFound) {
				return a.idemNotFound(cmd, scope, args[0], err)
			}
			if err != nil {
				return err
			}
			var resp idempotency.Response
			if refusedResp {
				if rec.Refused == nil {
					if rec.Execution.ResultLost() {
						return refused("%q completed, and its response was not stored: give the response its retries get with --status and --body", args[0])
					}
					return refused("%q has no refused response in its history: give the response with --status and --body", args[0])
				}
				resp = *rec.Refused
			} else {
				resp, err = idempotency.NewResponse(rec.Request.Fingerprint, status, hdr, bodyBytes)
				if err != nil {
					return refused("%w", err)
				}
			}
			who := esc(args[0])
			if scope != "" {
				who += " (scope " + esc(scope) + ")"
			}
			if err := a.confirm(f.yes, "resolve Idempotency-Key %s in %q: its retries of %s get %d with a %d-byte body",
				who, a.namespace, esc(rec.Request.Method+" "+rec.Request.Path), resp.Status, len(resp.Body)); err != nil {
				return err
			}
			// One compare-and-set: the response was built for the claim
			// inspected here, so the writes act only at its token (or at
			// the operator's --token).
			opts := append([]sentinel.Option{sentinel.WithNamespace(a.namespace), sentinel.WithToken(rec.Execution.Token)}, f.options()...)
			// A key that completed with its response not stored gets
			// resp stored as its result, headers alike (Resolve says so).
			token, err := idempotency.Resolve(cmd.Context(), a.client, scope, args[0], resp, opts...)
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(map[string]any{"scope": scope, "key": args[0], "namespace": a.namespace, "token": token,
					"response": toIdemResponseJSON(&resp)})
			}
			fmt.Fprintf(a.stdout, "Idempotency-Key %s is resolved (token %d): retries of %s now get %d %s with Idempotent-Replayed: true\n",
				who, token, esc(rec.Request.Method+" "+rec.Request.Path), resp.Status, http.StatusText(resp.Status))
			return nil
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&scope, "scope", "", "the principal Options.Scope returned for the request (omit for idempotency.SingleTenant)")
	fl.IntVar(&status, "status", 0, "the response's HTTP status (200-599)")
	fl.StringVar(&body, "body", "", "the response body (JSON or text); @FILE reads FILE")
	fl.StringArrayVar(&headers, "header", nil, "a response header 'Name: value' (repeatable)")
	fl.BoolVar(&refusedResp, "refused", false, "resolve with the response of the run whose completion was refused")
	f.add(cmd)
	return cmd
}

// responseOf checks the response resolve was given (or was typed on the
// terminal): the status, the header lines, and the body (@FILE read when
// fromFlags), returning the header and body to store; Content-Type
// defaults to application/json for a JSON body.
func responseOf(status int, headers []string, body string, fromFlags bool) (http.Header, []byte, error) {
	if status < 200 || status > 599 {
		return nil, nil, usageErr("--status %d: give a final HTTP status from 200 to 599", status)
	}
	bodyBytes := []byte(body)
	if name, ok := strings.CutPrefix(body, "@"); ok && fromFlags {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, nil, usageErr("--body @%s: %w", name, err)
		}
		bodyBytes = b
	}
	hdr := http.Header{}
	for _, h := range headers {
		k, v, ok := strings.Cut(h, ":")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" || strings.ContainsAny(k, " \t\r\n") || strings.ContainsAny(v, "\r\n") {
			return nil, nil, usageErr("--header %q: want 'Name: value'", h)
		}
		if !utf8.ValidString(h) {
			// The stored response is JSON, which would carry each bad
			// byte as U+FFFD: the retries would get another header.
			return nil, nil, usageErr("--header %q: must be UTF-8", h)
		}
		hdr.Add(k, v)
	}
	// The header as package idempotency checks it (names HTTP tokens,
	// values without control characters): bad input, exit 2, before the
	// connection, not a refusal (4) once the key was read. The body is
	// checked against the Content-Type later (exit 4, as documented).
	if _, err := idempotency.NewResponse("-", status, hdr, nil); err != nil {
		return nil, nil, usageErr("--header: %w", err)
	}
	if hdr.Get("Content-Type") == "" && json.Valid(bodyBytes) {
		hdr.Set("Content-Type", "application/json")
	}
	return hdr, bodyBytes, nil
}

// askResponse asks, on the terminal, for the response the retries of key
// get: the status, header lines (until an empty line) and the body (until
// an empty line, or the end of input).
func (a *app) askResponse(key string) (status int, headers []string, body string, err error) {
	in := a.input()
	fprintf(a.stderr, "The response the client's retries of %s get.\nStatus (200-599): ", key)
	line, _ := in.ReadString('\n')
	if status, err = strconv.Atoi(strings.TrimSpace(line)); err != nil {
		return 0, nil, "", usageErr("status %q: give a final HTTP status from 200 to 599", strings.TrimSpace(line))
	}
	fmt.Fprintln(a.stderr, "Headers, one 'Name: value' a line, then an empty line (Content-Type defaults to application/json for a JSON body):")
	for {
		line, err := in.ReadString('\n')
		if strings.TrimSpace(line) == "" {
			break
		}
		headers = append(headers, strings.TrimRight(line, "\r\n"))
		if err != nil {
			break
		}
	}
	fmt.Fprintln(a.stderr, "Body, then an empty line:")
	var b strings.Builder
	for {
		line, err := in.ReadString('\n')
		if strings.TrimRight(line, "\r\n") == "" {
			break
		}
		b.WriteString(line)
		if err != nil {
			break
		}
	}
	return status, headers, strings.TrimRight(b.String(), "\r\n"), nil
}
