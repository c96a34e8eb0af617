package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
)

// nsFlags is --all-namespaces for commands that default to --namespace.
type nsFlags struct{ all bool }

func (f *nsFlags) add(cmd *cobra.Command) {
	cmd.Flags().BoolVarP(&f.all, "all-namespaces", "A", false, "every namespace instead of --namespace")
}

// listing is resolve for the commands that look for what needs an
// operator (status, list, idempotency list): they cover every namespace
// unless --namespace is given.
func (f *nsFlags) listing(cmd *cobra.Command, a *app) (string, error) {
	if !cmd.Flags().Changed("namespace") {
		f.all = true
	}
	return f.resolve(cmd, a)
}

// resolve returns the namespace to use ("" with all) or a usage error when
// both --namespace and --all-namespaces were given.
func (f *nsFlags) resolve(cmd *cobra.Command, a *app) (string, error) {
	if !f.all {
		return a.namespace, nil
	}
	if cmd.Flags().Changed("namespace") {
		return "", usageErr("give --namespace or --all-namespaces, not both")
	}
	return "", nil
}

// countJSON is one line of status's counts.
type countJSON struct {
	Namespace string         `json:"namespace"`
	State     sentinel.State `json:"state"`
	Uncertain bool           `json:"uncertain"`
	// HandedBack: claimed with no live lease (a Retryable error, a
	// caller that gave up before fn ran, a reset): nothing runs it, the
	// next caller does; the text's "handed back (safe to retry)". A
	// claimed count without it is in progress.
	HandedBack bool `json:"handed_back"`
	// RerunPending: executing, stopped, with attempts left (WithRerun):
	// nothing runs it until the next caller with WithRerun (for an HTTP
	// request's key, the client's repeat of the request).
	RerunPending bool `json:"rerun_pending"`
	// ResultLost: completed, but fn's result was not stored: every
	// caller gets ErrResult until an operator stores it (set-result).
	ResultLost bool    `json:"result_lost"`
	Count      int64   `json:"count"`
	Oldest     *string `json:"oldest_updated_at"` // the earliest updated_at (StateCount.Oldest)
	// OldestSince is the earliest "since" of the row's keys
	// (StateCount.OldestSince): the text's OLDEST.
	OldestSince *string `json:"oldest_since"`
}

// statusJSON is what status prints with --json.
type statusJSON struct {
	Counts    []countJSON `json:"counts"`
	Uncertain []execJSON  `json:"uncertain"`
	// More is true when there are more uncertain executions than listed.
	More bool `json:"more_uncertain"`
	// RerunPendingHTTP are the HTTP requests (the idempotency
	// middleware's keys, each with its "idempotency_key") rerun pending
	// whose lease ended more than --rerun-pending-after ago: no repeat of
	// the request came back to re-run them (the text names them with
	// idempotency inspect). At most --limit of them.
	RerunPendingHTTP []execJSON `json:"rerun_pending_http_requests"`
	// MoreRerunPendingHTTP is true when there are more of them than listed.
	MoreRerunPendingHTTP bool `json:"more_rerun_pending_http_requests"`
	// RerunPendingKeys are the other keys (not HTTP requests') rerun
	// pending whose lease ended more than --rerun-pending-after ago: no
	// caller with WithRerun came back to re-run them (the text names
	// them with inspect). At most --limit of them.
	RerunPendingKeys []execJSON `json:"rerun_pending_keys"`
	// MoreRerunPendingKeys is true when there are more of them than listed.
	MoreRerunPendingKeys bool `json:"more_rerun_pending_keys"`
	// UncertainElsewhere names the other schemas of the database with
	// uncertain executions (of the first five that hold Sentinel's
	// tables, in name order). needs_operator_in_other_schemas says what
	// else they hold that needs an operator.
	UncertainElsewhere []string `json:"uncertain_in_other_schemas,omitempty"`
	// NeedsOperatorElsewhere is what status --exit-code pages on in the
	// other schemas of the database (the same first five), with or
	// without --exit-code, --namespace or --schema: a line per schema,
	// namespace and kind, as "attention"."found" (uncertain, result_lost,
	// rerun_pending past --rerun-pending-after, reconciling past
	// --reconciling-after, with the count, how many are HTTP requests'
	// keys, and since when). The text names each schema with the status
	// command for it.
	NeedsOperatorElsewhere []attentionJSON `json:"needs_operator_in_other_schemas,omitempty"`
	// OtherSchemasUnread says why the other schemas could not be looked
	// in (the catalog could not be read): uncertain_in_other_schemas and
	// needs_operator_in_other_schemas are then not known, not empty.
	OtherSchemasUnread string `json:"other_schemas_unread,omitempty"`
	// UncertainOtherSchemasUnread are the other schemas holding
	// Sentinel's tables that could not be read for uncertain executions
	// and the rest of what needs an operator (an older version, no
	// privilege).
	UncertainOtherSchemasUnread []string `json:"uncertain_other_schemas_unread,omitempty"`
	// MoreOtherSchemas is true when more than five other schemas hold
	// Sentinel's tables: only the first five (in name order) were looked
	// in for uncertain_in_other_schemas and
	// needs_operator_in_other_schemas.
	MoreOtherSchemas bool `json:"more_other_schemas,omitempty"`
	// UncertainOtherNamespaces, with --namespace: the other namespaces
	// with uncertain executions, and how many each has.
	UncertainOtherNamespaces []nsCountJSON `json:"uncertain_in_other_namespaces,omitempty"`
	// NeedsOperatorOtherNamespaces, with --namespace: the rest of what
	// status --exit-code pages on in the other namespaces of the schema
	// (results not stored, keys rerun pending for longer than
	// --rerun-pending-after, reconciling for longer than
	// --reconciling-after), a line per namespace and kind, in the shape
	// of "attention"."found".
	NeedsOperatorOtherNamespaces []attentionJSON `json:"needs_operator_in_other_namespaces,omitempty"`
	// Attention, with --exit-code: what needs an operator, which the
	// exit code pages on.
	Attention *statusAttentionJSON `json:"attention,omitempty"`
}

// nsCountJSON is a namespace and a count.
type nsCountJSON struct {
	Namespace string `json:"namespace"`
	Count     int64  `json:"count"`
}

func (a *app) statusCmd() *cobra.Command {
	var (
		ns           nsFlags
		limit        int
		exitCodeFlag bool
		after        attentionAfter
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Count executions per state; list uncertain ones first",
		Long: `status counts the Once executions of every namespace (or only of the one
given with --namespace) per state, with the oldest in each state, and lists the
uncertain ones (executing, lease expired on the database clock: their
worker crashed or lost its lease mid-run, and the outcome is unknown) with
their owner and since when. Those need an operator: see 'sentinel inspect'
and 'sentinel reconcile'.

"since" (SINCE; --json "since") is when the key entered the state
shown: for a key claimed or executing whose lease has ended on the
database clock (uncertain, rerun pending, handed back by a caller that
gave up) the lease's end, as status --exit-code ages it; for any other
key its last change. "updated_at" in --json stays the row's last write,
which for a stopped attempt is when it started (renewals do not move it).
The counts' OLDEST is the earliest "since" in each state (--json
"oldest_since"), as SINCE shows it; --json "oldest_updated_at" is the
earliest last change.

Keys handed back (claimed, no live lease: fn returned a Retryable error,
the caller gave up before fn ran, an operator reset them) are counted as
"handed back (safe to retry)": nothing runs them, the next caller does,
and prune removes them after the retention. Keys whose executor stopped
with re-runs left (WithRerun) are counted as "rerun pending", not in
progress: nothing runs them until the next caller with WithRerun (for
an HTTP request's key, the client's repeat of the request).
Each uncertain key is followed by the inspect command that prints its
steps (reconcile). Uncertain keys of HTTP requests (the idempotency middleware's) are listed
with the others, then each with the command that inspects it by its
client's Idempotency-Key and scope (sentinel idempotency inspect), which
leads to idempotency resolve (--json: "idempotency_key", the scope and
key, on each such execution). So is each HTTP request rerun pending
whose lease ended more than --rerun-pending-after (default 15m) ago, as
--exit-code pages on: no repeat of the request came back to re-run it
(--json: "rerun_pending_http_requests", at most --limit such executions,
each with its "idempotency_key", and "more_rerun_pending_http_requests").
Every other key rerun pending that long is named too, with the inspect
command that prints its steps (--json: "rerun_pending_keys" and
"more_rerun_pending_keys").
Completed keys whose result was not stored (fn's value could not be
encoded: every caller gets ErrResult) are counted apart as RESULT NOT
STORED, with the command that lists them: they need an operator too
(inspect, then set-result). So is each namespace with a key reconciling
for more than --reconciling-after (default 1h, as --exit-code), with the
command that lists those keys (inspect, then force-complete or reset).

With --namespace, other namespaces that have uncertain executions are
named at the end, with the command that shows them all, so none is
missed (--json: "uncertain_in_other_namespaces"), and so are those
holding the rest of what --exit-code pages on (results not stored, keys
rerun pending or reconciling for longer than the thresholds; --json:
"needs_operator_in_other_namespaces"). So are other schemas
of the database that hold Sentinel's tables (the first five in name
order) and anything --exit-code pages on: uncertain executions (--json:
"uncertain_in_other_schemas"), and results not stored, keys rerun
pending for longer than --rerun-pending-after and keys reconciling for
longer than --reconciling-after, each schema with what it holds (--json:
"needs_operator_in_other_schemas", a line per schema, namespace and
kind, the uncertain ones included), with the command for each: an
application that sets its own schema is not missed by a status run
without --schema, and an operator paged by --exit-code for one finds it
named here. Both thresholds are taken with or without --exit-code.

Without --exit-code, status exits 0 whether or not anything needs an
operator. With --exit-code (as git diff --exit-code), for a cron job or a
monitoring check, it exits 5 when something does, after its usual output,
and says what on stderr, each with the command that lists it:

  - an uncertain execution;
  - a completed execution whose result was not stored (RESULT NOT STORED);
  - an execution rerun pending for longer than --rerun-pending-after
    (default 15m): its lease ended that long ago on the database clock
    and no caller with WithRerun came back to re-run it (a client that
    gave up, a job not redelivered), so nothing ever will: "rerun
    pending, needs an operator", as list, inspect and the console say. The command
    printed, sentinel list --rerun-pending, lists every rerun pending
    key: the ones paged about are those whose lease ended more than
    --rerun-pending-after ago (inspect shows when; --json:
    "lease_expires_at"), the others may still be re-run by a caller
    coming back;
  - an execution reconciling for longer than --reconciling-after
    (default 1h): an operator started reconciling it (reconcile, or the
    console) that long ago on the database clock and never resolved it
    with force-complete or reset, and every caller gets ErrReconciling
    until someone does. Reconciling is a person's step (look the effect
    up, then decide); an hour leaves time for that, and past it the step
    was most likely abandoned.

Each line counts apart the HTTP requests' keys among its keys (the
idempotency middleware's; --json: "http_requests"), which are resolved
with the response the client's retries get (idempotency inspect, then
idempotency resolve), not reconciled or force-completed, and re-run by
the client's repeat of the request, not by a caller with WithRerun; the
line says so when it counts any.

It covers every namespace, and, when neither --namespace nor --schema is
given, every other schema of the database that holds Sentinel's tables
(up to 100, in name order; a note, --json "more_schemas", says when there
are more): an operator who names nothing is paged for anything anywhere. --namespace or --schema sets the check's scope to
what they name (one alert per team); the other namespaces with uncertain
executions, and the other schemas (the first five) with anything it
pages on, are still named in the output, as without --exit-code. With --json, "attention" holds what was found ("found": a
line per schema, namespace and kind, with its count, how many of them
are HTTP requests' keys, and since when) and
"needs_operator". Exit 1 when the database cannot be read: a check must
not read that as nothing to do.`,
		Example: `  sentinel status
  sentinel status -n payments
  sentinel status --json
  sentinel status --exit-code                             # exit 5: needs an operator
  sentinel status --exit-code --rerun-pending-after 1h --json
  sentinel status --exit-code --reconciling-after 4h      # slow investigations`,
		Args: args(0, 0),
		RunE: a.runEChecked(func(cmd *cobra.Command, _ []string) error {
			if err := checkLimit(limit); err != nil {
				return err
			}
			if after.rerunPending <= 0 {
				return usageErr("--rerun-pending-after %s: give a duration of more than 0 (such as 15m)", durationArg(after.rerunPending))
			}
			if after.reconciling <= 0 {
				return usageErr("--reconciling-after %s: give a duration of more than 0 (such as 1h)", durationArg(after.reconciling))
			}
			return nil
		}, func(cmd *cobra.Command, _ []string) (err error) {
			namespace, err := ns.listing(cmd, a)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			// One connection attempt, before the reads below make one each.
			if err := a.reachable(ctx); err != nil {
				return err
			}
			// With --exit-code: read first, from the database, so that
			// nothing printed can hide it; the exit code and the message
			// come last, after the output and its notes.
			var found []attentionJSON
			var unreadFor []string
			var moreFor bool
			if exitCodeFlag {
				if found, unreadFor, moreFor, err = a.attention(cmd, namespace, after); err != nil {
					return err
				}
				defer func() {
					if err == nil {
						if len(unreadFor) > 0 && !a.jsonOut { // --json: "schemas_unread"
							fprintf(a.stderr, "sentinel: note: schemas %s of this database hold Sentinel's tables but could not be read for what needs an operator (an older version, or no privilege)\n", quoteAll(unreadFor))
						}
						if moreFor && !a.jsonOut { // --json: "more_schemas"
							fprintf(a.stderr, "sentinel: note: more than %d other schemas of this database hold Sentinel's tables; only the first %d (in name order) were read for what needs an operator: check the others with --schema\n", maxAttentionSchemas, maxAttentionSchemas)
						}
						err = a.attentionErr(found, after)
					}
				}()
			}
			// Namespaces other than the one asked for that need attention.
			var elsewhere []string
			var elsewhereJSON []nsCountJSON
			var needsElsewhere []attentionJSON
			if !ns.all {
				all, err := a.client.ExecutionCounts(ctx, "", true)
				if err != nil {
					return err
				}
				for _, c := range all {
					if c.Uncertain && c.Namespace != namespace {
						elsewhere = append(elsewhere, fmt.Sprintf("%s (%d)", c.Namespace, c.Count))
						elsewhereJSON = append(elsewhereJSON, nsCountJSON{Namespace: c.Namespace, Count: c.Count})
					}
				}
				// The rest of what --exit-code pages on, by its thresholds:
				// results not stored, rerun pending or reconciling too long.
				rows, err := a.attentionIn(ctx, a.schema, "", after)
				if err != nil {
					return err
				}
				for _, r := range rows {
					if r.Kind != attentionUncertain && r.Namespace != namespace {
						needsElsewhere = append(needsElsewhere, r)
					}
				}
			}
			// Other schemas of the database that need attention: an
			// application with a Config.Schema of its own, an operator who
			// gave no --schema.
			// What status --exit-code pages on there (uncertain, result not
			// stored, rerun pending or reconciling too long), by the same
			// thresholds, named whether or not --exit-code was given.
			var schemas, unread []string
			var others []attentionJSON
			var moreSchemas bool
			var schemasErr error
			if !a.jsonOut {
				defer func() {
					if len(schemas) > 0 {
						// every namespace there: the check looked at all
						text := fmt.Sprintf("\nuncertain executions in other schemas of this database too: %s; every namespace there:", quoteAll(schemas)) +
							a.schemaCommands(cmd, schemas, "namespace", "all-namespaces")
						for _, line := range strings.Split(text, "\n") {
							fprintln(a.stdout, line)
						}
					}
					if more, text := otherSchemasText(others, schemas, after); len(more) > 0 {
						for _, line := range strings.Split("\n"+text+a.schemaCommands(cmd, more, "namespace", "all-namespaces"), "\n") {
							fprintln(a.stdout, line)
						}
					}
					if err == nil { // else that error says it
						a.noteSchemasUnread(schemasErr)
					}
					if len(unread) > 0 {
						fprintf(a.stderr, "sentinel: note: schemas %s of this database hold Sentinel's tables but could not be read for uncertain executions or anything else that needs an operator (an older version, or no privilege)\n", quoteAll(unread))
					}
					if moreSchemas {
						fprintf(a.stderr, "sentinel: note: more than %d other schemas of this database hold Sentinel's tables; only the first %d (in name order) were looked at\n", maxSchemasShown, maxSchemasShown)
					}
				}()
			}
			defer func() {
				if len(elsewhere) > 0 && !a.jsonOut {
					fprintf(a.stdout, "\nuncertain executions in other namespaces too: %s; every namespace:\n  %s\n",
						strings.Join(elsewhere, ", "), a.command("status"))
				}
				if len(needsElsewhere) > 0 && !a.jsonOut {
					fprintf(a.stdout, "\nkeys that need an operator in other namespaces too (what status --exit-code pages on): %s; every namespace:\n  %s\n",
						otherNamespacesText(needsElsewhere, after), a.command(append([]string{"status"}, afterFlags(after)...)...))
				}
			}()
			others, unread, moreSchemas, schemasErr = a.attentionInSchemas(ctx, after, maxSchemasShown)
			for _, f := range others {
				if f.Kind == attentionUncertain && (len(schemas) == 0 || schemas[len(schemas)-1] != f.Schema) {
					schemas = append(schemas, f.Schema)
				}
			}
			counts, err := a.client.ExecutionCounts(ctx, namespace, ns.all)
			if err != nil {
				return err
			}
			unc, next, err := a.client.Executions(ctx, sentinel.ExecutionFilter{
				Uncertain: true, Namespace: namespace, AllNamespaces: ns.all, Limit: limit})
			if err != nil {
				return err
			}
			var stale staleRerun // rerun pending longer than --rerun-pending-after
			for _, c := range counts {
				if c.RerunPending {
					if stale, err = a.staleRerunPending(ctx, namespace, ns.all, after.rerunPending, limit); err != nil {
						return err
					}
					break
				}
			}
			if a.jsonOut {
				out := statusJSON{Counts: []countJSON{}, Uncertain: []execJSON{}, More: next != "", UncertainElsewhere: schemas,
					NeedsOperatorElsewhere: others, UncertainOtherNamespaces: elsewhereJSON, NeedsOperatorOtherNamespaces: needsElsewhere}
				if schemasErr != nil {
					out.OtherSchemasUnread = schemasErr.Error()
				}
				out.UncertainOtherSchemasUnread, out.MoreOtherSchemas = unread, moreSchemas
				if exitCodeFlag {
					out.Attention = &statusAttentionJSON{NeedsOperator: len(found) > 0, RerunPendingAfter: after.rerunPending.String(),
						ReconcilingAfter: after.reconciling.String(), Found: append([]attentionJSON{}, found...), SchemasUnread: unreadFor, MoreSchemas: moreFor}
				}
				for _, c := range counts {
					out.Counts = append(out.Counts, countJSON{Namespace: c.Namespace, State: c.State,
						Uncertain: c.Uncertain, HandedBack: c.HandedBack, RerunPending: c.RerunPending, ResultLost: c.ResultLost, Count: c.Count, Oldest: tsJSON(c.Oldest), OldestSince: tsJSON(c.OldestSince)})
				}
				for i := range unc {
					out.Uncertain = append(out.Uncertain, toExecJSON(&unc[i]))
				}
				out.RerunPendingHTTP, out.MoreRerunPendingHTTP = []execJSON{}, stale.moreHTTP
				for i := range stale.http {
					out.RerunPendingHTTP = append(out.RerunPendingHTTP, toExecJSON(&stale.http[i]))
				}
				out.RerunPendingKeys, out.MoreRerunPendingKeys = []execJSON{}, stale.moreKeys
				for i := range stale.keys {
					out.RerunPendingKeys = append(out.RerunPendingKeys, toExecJSON(&stale.keys[i]))
				}
				return a.printJSON(out)
			}
			if len(counts) == 0 {
				fprintf(a.stdout, "no executions in %s\n", nsLabel(namespace))
				return nil
			}
			w := a.table()
			var lost int64 // completed, result not stored
			row(w, "NAMESPACE", "STATE", "COUNT", "OLDEST")
			for _, c := range counts {
				state := string(c.State)
				switch {
				case c.Uncertain:
					state = "UNCERTAIN"
				case c.HandedBack:
					state = handedBackLabel
				case c.RerunPending:
					state = rerunPendingLabel
				case c.ResultLost:
					state = resultLostLabel
					lost += c.Count
				case c.State == sentinel.StateClaimed || c.State == sentinel.StateExecuting:
					state += " (in progress)"
				}
				row(w, c.Namespace, state, c.Count, ts(c.OldestSince)+" ("+relative(c.OldestSince)+")")
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if lost > 0 {
				// An HTTP request's key among them is resolved with the
				// response its retries get (idempotency resolve), not
				// given a value with set-result: counted as --exit-code
				// counts them.
				f := attentionJSON{Count: lost}
				if rows, err := a.attentionIn(ctx, a.schema, namespace, after); err == nil {
					for _, r := range rows {
						if r.Kind == attentionResultLost {
							f.HTTPRequests += r.HTTPRequests
						}
					}
				}
				fprintf(a.stdout, "\n%d completed execution(s) whose result was not stored: every caller gets ErrResult until an operator stores it (%s):\n  %s\n",
					lost, attentionTodo(f, "set-result"), a.command(append([]string{"list", "--result-lost"}, nsArgs(namespace)...)...))
			}
			if len(unc) == 0 {
				fmt.Fprintln(a.stdout)
				fprintf(a.stdout, "no uncertain executions in %s\n", nsLabel(namespace))
			} else {
				fprintf(a.stdout, "\nuncertain executions (outcome unknown; inspect, then reconcile):\n")
				a.execTable(unc, after)
				a.uncertainKeysNext(unc)
				if next != "" {
					fprintf(a.stdout, "... more:\n  %s\n", a.command(append([]string{"list", "--uncertain"}, nsArgs(namespace)...)...))
				}
				a.httpKeysNext(unc, next != "", namespace)
			}
			a.rerunPendingNext(stale.keys, stale.moreKeys, namespace, after.rerunPending)
			a.httpRerunPendingNext(stale.http, stale.moreHTTP, namespace, after.rerunPending)
			a.reconcilingNext(counts, after.reconciling)
			return nil
		}),
	}
	ns.add(cmd)
	cmd.Flags().Lookup("all-namespaces").Usage = "every namespace (the default unless --namespace is given)"
	cmd.Flags().IntVar(&limit, "limit", 20, "list at most this many uncertain executions (and as many keys, and HTTP requests, rerun pending past --rerun-pending-after)")
	cmd.Flags().BoolVar(&exitCodeFlag, "exit-code", false, fmt.Sprintf("exit %d when something needs an operator: uncertain, result not stored, rerun pending or reconciling too long", exitAttention))
	durationFlag(cmd.Flags(), &after.rerunPending, "rerun-pending-after", defaultRerunPendingAfter, "a key rerun pending (its lease ended, on the database clock) longer than this needs an operator: --exit-code pages on it, and status lists such keys with or without --exit-code")
	durationFlag(cmd.Flags(), &after.reconciling, "reconciling-after", defaultReconcilingAfter, "a key reconciling (since reconcile, on the database clock) longer than this needs an operator: --exit-code pages on it, and status names it with or without --exit-code")
	return cmd
}

// httpKeysNext follows a listing of uncertain executions with what to do
// about those that are HTTP requests' (the idempotency middleware's keys):
// they are resolved with the response the client's retries get, not
// force-completed with a value, so each gets the command that shows its
// request, addressed by scope and client's key; when the listing was cut
// short (more), the command that lists every uncertain HTTP one too.
func (a *app) httpKeysNext(es []sentinel.Execution, more bool, namespace string) {
	var lines []string
	for i := range es {
		if scope, key, ok := idempotency.ParseExecutionKey(es[i].Key); ok && uncertain(&es[i]) {
			lines = append(lines, a.idemCommand("inspect", key, scope, es[i].Namespace))
		}
	}
	if len(lines) == 0 {
		return
	}
	what := fmt.Sprintf("%d of them are HTTP requests' Idempotency-Keys", len(lines))
	if len(lines) == 1 {
		what = "1 of them is an HTTP request's Idempotency-Key"
	}
	fprintf(a.stdout, "\n%s (the idempotency middleware's): not force-completed with a value, but resolved with the response the client's retries get; inspect, then resolve:\n", what)
	for _, l := range lines {
		fprintf(a.stdout, "  %s\n", l)
	}
	if more {
		fprintf(a.stdout, "every uncertain HTTP request:\n  %s\n", a.command(append([]string{"idempotency", "list", "--uncertain"}, nsArgs(namespace)...)...))
	}
}

// uncertainKeysNext follows status's table of uncertain executions with
// the inspect command of each that is no HTTP request's (httpKeysNext
// names those by their idempotency inspect command), which prints its
// steps: the command the table's "inspect, then reconcile" asks for.
func (a *app) uncertainKeysNext(es []sentinel.Execution) {
	var lines []string
	for i := range es {
		if _, _, ok := idempotency.ParseExecutionKey(es[i].Key); !ok && uncertain(&es[i]) {
			lines = append(lines, a.keyCommand("inspect", []string{es[i].Key}, "-n", es[i].Namespace))
		}
	}
	if len(lines) == 0 {
		return
	}
	fprintf(a.stdout, "inspect each, which prints its steps:\n")
	for _, l := range lines {
		fprintf(a.stdout, "  %s\n", l)
	}
}

// rerunAfterFlag is the --rerun-pending-after flag a printed command
// carries so that it judges keys by after as the printing one did: none
// for the default.
func rerunAfterFlag(after time.Duration) []string {
	if after == defaultRerunPendingAfter {
		return nil
	}
	return []string{"--rerun-pending-after", durationArg(after)}
}

// reconcilingAfterFlag is the --reconciling-after flag a printed command
// carries so that it judges keys by after as the printing one did: none
// for the default.
func reconcilingAfterFlag(after time.Duration) []string {
	if after == defaultReconcilingAfter {
		return nil
	}
	return []string{"--reconciling-after", durationArg(after)}
}

// afterFlags are the threshold flags (rerunAfterFlag,
// reconcilingAfterFlag) a printed command carries: none for the defaults.
func afterFlags(after attentionAfter) []string {
	return append(rerunAfterFlag(after.rerunPending), reconcilingAfterFlag(after.reconciling)...)
}

// checkAfter refuses a threshold of 0 or less, before the connection.
func checkAfter(after attentionAfter) error {
	if after.rerunPending <= 0 {
		return usageErr("--rerun-pending-after %s: give a duration of more than 0 (such as 15m)", durationArg(after.rerunPending))
	}
	if after.reconciling <= 0 {
		return usageErr("--reconciling-after %s: give a duration of more than 0 (such as 1h)", durationArg(after.reconciling))
	}
	return nil
}

// addAfterFlags adds --rerun-pending-after and --reconciling-after to a
// command that judges keys as status --exit-code does (list, inspect,
// idempotency list and inspect), with status's defaults; rerunUsage is
// the first's usage, which says what the command does with it.
func addAfterFlags(cmd *cobra.Command, after *attentionAfter, rerunUsage string) {
	durationFlag(cmd.Flags(), &after.rerunPending, "rerun-pending-after", defaultRerunPendingAfter, rerunUsage)
	durationFlag(cmd.Flags(), &after.reconciling, "reconciling-after", defaultReconcilingAfter,
		"a key reconciling (since reconcile, on the database clock) longer than this needs an operator: marked as such (status --exit-code's threshold)")
}

// staleRerun is what staleRerunPending found: the keys rerun pending
// longer than --rerun-pending-after, HTTP requests' apart from the rest,
// at most limit of each, and whether there are more of each.
type staleRerun struct {
	http, keys         []sentinel.Execution
	moreHTTP, moreKeys bool
}

// staleRerunPending returns the keys rerun pending whose lease ended
// more than after ago (--rerun-pending-after, which status --exit-code
// pages on): no caller with WithRerun (for an HTTP request, the idempotency
// middleware's key, no repeat of the request) came back to re-run them,
// so nothing will. At most limit of each kind, and whether there are
// more.
func (a *app) staleRerunPending(ctx context.Context, namespace string, all bool, after time.Duration, limit int) (staleRerun, error) {
	var found staleRerun
	f := sentinel.ExecutionFilter{RerunPending: true, Namespace: namespace, AllNamespaces: all, Limit: sentinel.MaxExecutionsLimit}
	for {
		page, next, err := a.client.Executions(ctx, f)
		if err != nil {
			return staleRerun{}, err
		}
		for i := range page {
			e := &page[i]
			if !e.Rerunnable() || -e.LeaseLeft() < after {
				continue
			}
			list, more := &found.keys, &found.moreKeys
			if _, _, ok := idempotency.ParseExecutionKey(e.Key); ok {
				list, more = &found.http, &found.moreHTTP
			}
			if len(*list) == limit {
				*more = true
			} else {
				*list = append(*list, *e)
			}
			if found.moreHTTP && found.moreKeys {
				return found, nil
			}
		}
		if next == "" {
			return found, nil
		}
		f.After = next
	}
}

// rerunPendingNext follows status's listing with the stale rerun pending
// keys that are not HTTP requests' (staleRerunPending): each with the
// inspect command that prints its steps (with after when it is not the
// default, which inspect judges the key by); then, when there are more
// (more), the command that lists every rerun pending key.
func (a *app) rerunPendingNext(es []sentinel.Execution, more bool, namespace string, after time.Duration) {
	if len(es) == 0 {
		return
	}
	flags := rerunAfterFlag(after)
	var lines []string
	for i := range es {
		lines = append(lines, a.keyCommand("inspect", []string{es[i].Key}, append([]string{"-n", es[i].Namespace}, flags...)...))
	}
	what := fmt.Sprintf("%d keys", len(es))
	if more {
		what = "keys"
	} else if len(es) == 1 {
		what = "1 key"
	}
	a.staleRerunNext(fmt.Sprintf("%s %s: lease ended more than %s ago, no caller with WithRerun came back to re-run it (a job not redelivered, a caller that gave up), so nothing will; inspect, then reconcile:",
		what, rerunNeedsOperator, durationArg(after)), lines, more, flags, namespace)
}

// staleRerunNext prints heading, then each of lines (the commands that
// inspect the keys rerun pending too long), then, when there are more
// (more), the command that lists every rerun pending key of namespace,
// with flags (rerunAfterFlag).
func (a *app) staleRerunNext(heading string, lines []string, more bool, flags []string, namespace string) {
	fprintf(a.stdout, "\n%s\n", heading)
	for _, l := range lines {
		fprintf(a.stdout, "  %s\n", l)
	}
	if more {
		fprintf(a.stdout, "... more, among every rerun pending key:\n  %s\n", a.command(append(append([]string{"list", "--rerun-pending"}, flags...), nsArgs(namespace)...)...))
	}
}

// reconcilingNext follows status's listing with each namespace among
// counts holding a key reconciling for longer than after (on the
// database clock, from its oldest one's state change), as status
// --exit-code pages on: every caller gets ErrReconciling until an operator
// force-completes or resets it. Each gets the list command --exit-code
// prints, which names each key's inspect command.
func (a *app) reconcilingNext(counts []sentinel.StateCount, after time.Duration) {
	cutoff := dbNow().Add(-after)
	for _, c := range counts {
		if c.State != sentinel.StateReconciling || c.OldestSince.IsZero() || !c.OldestSince.Before(cutoff) {
			continue
		}
		fprintf(a.stdout, "\nreconciling for more than %s in namespace %q (every caller gets ErrReconciling until an operator resolves them), the oldest since %s (%s); inspect, then force-complete (the work happened) or reset (it did not):\n  %s\n",
			durationArg(after), c.Namespace, ts(c.OldestSince), relative(c.OldestSince),
			a.command(append([]string{"list", "--state", "reconciling", "--older-than", durationArg(after), "-n", c.Namespace}, reconcilingAfterFlag(after)...)...))
	}
}

// httpRerunPendingNext follows status's listing with the stale rerun
// pending HTTP requests (staleRerunPending). Like an uncertain
// request, each gets the command that shows it by scope and client's key
// (idempotency inspect, which leads to resolve; with after when it is not
// the default, which inspect judges the key by), not the derived execution
// key of list --rerun-pending; then, when there are more (more), the
// command that lists every rerun pending key.
func (a *app) httpRerunPendingNext(es []sentinel.Execution, more bool, namespace string, after time.Duration) {
	if len(es) == 0 {
		return
	}
	// inspect judges the key stale by the same threshold, so that it
	// prints the steps status promises.
	flags := rerunAfterFlag(after)
	var lines []string
	for i := range es {
		scope, key, _ := idempotency.ParseExecutionKey(es[i].Key)
		lines = append(lines, a.idemCommand("inspect", key, scope, es[i].Namespace, flags...))
	}
	what := fmt.Sprintf("%d HTTP requests' Idempotency-Keys", len(lines))
	if more {
		what = "HTTP requests' Idempotency-Keys"
	} else if len(lines) == 1 {
		what = "1 HTTP request's Idempotency-Key"
	}
	a.staleRerunNext(fmt.Sprintf("%s (the idempotency middleware's) %s: lease ended more than %s ago, no repeat of the request came back to re-run it, so nothing will; inspect, then resolve:",
		what, rerunNeedsOperator, durationArg(after)), lines, more, flags, namespace)
}

// maxListHTTPKeysNext is how many HTTP requests' inspect commands list
// --uncertain and list --rerun-pending print after their table; past it,
// the idempotency listing that names each.
const maxListHTTPKeysNext = 10

// Which HTTP requests' keys listHTTPKeysNext names, after which listing.
const (
	httpKeysUncertain = iota // list --uncertain: every HTTP key listed
	httpKeysRerun            // list --rerun-pending: every HTTP key listed
	httpKeysStale            // plain list: the HTTP keys it marked rerunNeedsOperator
)

// listHTTPKeysNext follows list --uncertain (or --rerun-pending, or a
// plain list, as which says) with, on stderr as list's other hints, the
// idempotency inspect command of each HTTP request (the idempotency
// middleware's key) among es, or, after a plain list, of each it marked
// rerunNeedsOperator (rerun pending longer than rerunAfter, rerunStale):
// the table shows the derived execution key (idempotency:N:scope:key), and
// the idempotency commands address it by scope and client's key and
// resolve it with an HTTP response. At most maxListHTTPKeysNext, then the
// idempotency listing (of namespace, "" for every one) that names them.
func (a *app) listHTTPKeysNext(es []sentinel.Execution, which int, namespace string, rerunAfter time.Duration) {
	// idempotency inspect (and list) judge a rerun pending key by the
	// same threshold: given another, the copied line carries it.
	var flags []string
	if which != httpKeysUncertain {
		flags = rerunAfterFlag(rerunAfter)
	}
	var lines []string
	n := 0
	for i := range es {
		scope, key, ok := idempotency.ParseExecutionKey(es[i].Key)
		if !ok || which == httpKeysStale && !rerunStale(&es[i], rerunAfter) {
			continue
		}
		n++
		if len(lines) < maxListHTTPKeysNext {
			lines = append(lines, a.idemCommand("inspect", key, scope, es[i].Namespace, flags...))
		}
	}
	if n == 0 {
		return
	}
	what := fmt.Sprintf("%d of the keys listed are HTTP requests' Idempotency-Keys", n)
	if n == 1 {
		what = "1 of the keys listed is an HTTP request's Idempotency-Key"
	}
	todo := "inspect each by its scope and client's key, then resolve it with the response the client's retries get"
	list := append([]string{"idempotency", "list", "--uncertain"}, nsArgs(namespace)...)
	switch which {
	case httpKeysRerun:
		todo = "the client's repeat of the request re-runs each; inspect each by its scope and client's key, which says when no repeat will come and what to do then"
		list = append(append([]string{"idempotency", "list"}, nsArgs(namespace)...), flags...)
	case httpKeysStale:
		what = fmt.Sprintf("%d of the keys listed are %s (for more than %s) and HTTP requests' Idempotency-Keys", n, rerunNeedsOperator, durationArg(rerunAfter))
		if n == 1 {
			what = fmt.Sprintf("1 of the keys listed is %s (for more than %s) and an HTTP request's Idempotency-Key", rerunNeedsOperator, durationArg(rerunAfter))
		}
		todo = "no repeat of the request came back; inspect each by its scope and client's key, which prints its steps (resolve it with the response the client's retries get)"
		list = append(append([]string{"idempotency", "list"}, nsArgs(namespace)...), flags...)
	}
	fprintf(a.stderr, "sentinel: note: %s (the idempotency middleware's): %s:\n", what, todo)
	for _, l := range lines {
		fprintf(a.stderr, "  %s\n", l)
	}
	if n > len(lines) {
		fprintf(a.stderr, "... and %d more, each with its scope:\n  %s\n", n-len(lines), a.command(list...))
	}
}

// listNeedsOperatorNext follows list's table with, on stderr as its other
// hints, the inspect command of each key listed that needs an operator,
// by kind: uncertain, completed with the result not stored, reconciling
// (an operator started and has yet to force-complete or reset it), and
// marked rerunNeedsOperator for being rerun pending longer than rerunAfter
// (rerunStale), carrying the threshold when it is not the default so that
// inspect judges the key as the table did. Inspect prints each key's step.
// An HTTP request's key is named by its idempotency inspect command,
// unless listHTTPKeysNext names it already (a rerunStale one, an uncertain
// one after list --uncertain). At most maxListHTTPKeysNext of each kind,
// then the count of the others.
func (a *app) listNeedsOperatorNext(es []sentinel.Execution, after attentionAfter, uncertainHTTPNamed bool) {
	rerunAfter := after.rerunPending
	flags := afterFlags(after)
	kinds := []struct {
		what, todo string
		// httpTodo is todo when an HTTP request's key is among them
		// (default: resolved with a response, or reset).
		httpTodo string
		match    func(e *sentinel.Execution) bool
		n        int
		lines    []string
		http     bool // an HTTP request's key among them: its steps are idempotency's
	}{
		{what: "uncertain (outcome unknown)", todo: "inspect each, which prints its steps (find out whether the work happened, then reconcile)",
			match: uncertain},
		{what: "completed with the result not stored (every caller gets ErrResult)", todo: "inspect each, which prints its step (set-result)",
			httpTodo: "inspect each, which prints its step (set-result; an HTTP request's key is resolved with the response its retries get)",
			match:    (*sentinel.Execution).ResultLost},
		{what: "reconciling (every caller gets ErrReconciling until an operator force-completes or resets it)", todo: "inspect each, which prints its steps (force-complete or reset)",
			match: func(e *sentinel.Execution) bool { return e.State == sentinel.StateReconciling }},
		{what: fmt.Sprintf("%s (for more than %s)", rerunNeedsOperator, durationArg(rerunAfter)), todo: "inspect each, which prints its steps",
			match: func(e *sentinel.Execution) bool { return rerunStale(e, rerunAfter) }},
	}
	for i := range es {
		e := &es[i]
		scope, key, isHTTP := idempotency.ParseExecutionKey(e.Key)
		for k := range kinds {
			if !kinds[k].match(e) {
				continue
			}
			var line string
			switch {
			case !isHTTP:
				line = a.keyCommand("inspect", []string{e.Key}, append([]string{"-n", e.Namespace}, flags...)...)
			case k == 3 || k == 0 && uncertainHTTPNamed:
				continue // listHTTPKeysNext names it
			default:
				line = a.idemCommand("inspect", key, scope, e.Namespace, flags...)
				kinds[k].http = true
			}
			kinds[k].n++
			if len(kinds[k].lines) < maxListHTTPKeysNext {
				kinds[k].lines = append(kinds[k].lines, line)
			}
			break
		}
	}
	for _, k := range kinds {
		if k.n == 0 {
			continue
		}
		verb := "are"
		if k.n == 1 {
			verb = "is"
		}
		todo := k.todo
		if k.http {
			todo = "inspect each, which prints its steps (an HTTP request's key is resolved with the response its retries get, or reset)"
			if k.httpTodo != "" {
				todo = k.httpTodo
			}
		}
		fprintf(a.stderr, "sentinel: note: %d of the keys listed %s %s; %s:\n", k.n, verb, k.what, todo)
		for _, l := range k.lines {
			fprintf(a.stderr, "  %s\n", l)
		}
		if k.n > len(k.lines) {
			fprintf(a.stderr, "... and %d more\n", k.n-len(k.lines))
		}
	}
}

// checkState refuses a --state that is not one of the library's states
// (the library would too, but only once connected). A word the tables
// show in their STATE column that is no state (UNCERTAIN, rerun pending,
// RESULT NOT STORED) is refused with the flag of cmd that lists those,
// and the command line with it instead of --state.
func (a *app) checkState(cmd *cobra.Command, state string) error {
	switch sentinel.State(state) {
	case "", sentinel.StateClaimed, sentinel.StateExecuting, sentinel.StateReconciling, sentinel.StateCompleted:
		return nil
	}
	err := usageErr("--state %q: give claimed, executing, reconciling or completed", state)
	word := strings.Join(strings.FieldsFunc(strings.ToLower(state), func(r rune) bool { return r == ' ' || r == '_' || r == '-' }), "-")
	flag := map[string]string{"uncertain": "uncertain", "rerun-pending": "rerun-pending", "rerun": "rerun-pending",
		"result-lost": "result-lost", "result-not-stored": "result-lost"}[word]
	if flag == "" || cmd.Flags().Lookup(flag) == nil {
		return err
	}
	return usageErr("%v\n%s is not a state: list them with --%s:\n  %s", err.(*codeError).err, state, flag,
		a.againWith(cmd, []string{"state"}, "--"+flag))
}

// checkLimit checks --limit against the library's page bounds.
func checkLimit(limit int) error {
	if limit < 1 || limit > sentinel.MaxExecutionsLimit {
		return usageErr("--limit must be 1..%d", sentinel.MaxExecutionsLimit)
	}
	return nil
}

// nsLabel names a namespace ("" is every namespace) for messages.
func nsLabel(ns string) string {
	if ns == "" {
		return "any namespace"
	}
	return fmt.Sprintf("namespace %q", ns)
}

// nsArgs are the words selecting ns on the command line of a listing
// command (status, list, idempotency list): none for every namespace, the
// default.
func nsArgs(ns string) []string {
	if ns == "" {
		return nil
	}
	return []string{"-n", ns}
}

// resultLostLabel is the state of a completed key whose result was not
// stored (ExecutionFilter.ResultLost): callers get ErrResult.
const resultLostLabel = "completed (RESULT NOT STORED: callers get ErrResult)"

// handedBackLabel is the state of a key handed back: claimed with no live
// lease (Retryable, NoEffect, a caller that gave up before fn ran, a
// reset). Nothing runs it; the next caller does.
const handedBackLabel = "handed back (safe to retry)"

// rerunPendingLabel is the state of a key whose executor stopped with
// attempts left (WithRerun): nothing runs it now, the next caller with
// WithRerun runs it again, or, for an HTTP request's key (the idempotency
// middleware's, with Options.Rerun), the client's repeat of the request.
// status's counts row says it of every rerun pending key of a namespace
// (ExecutionCounts does not count HTTP requests' keys apart), so it names
// both.
const rerunPendingLabel = "executing (rerun pending: nothing runs it until the next caller with WithRerun, or the client's repeat of an HTTP request)"

// rerunNeedsOperator is what every operator's view (status, list,
// inspect, idempotency list and inspect, the console) calls a key rerun
// pending whose lease ended more than --rerun-pending-after ago
// (rerunStale): the words an operator who saw it in one greps for in
// another. console says it alike (console.rerunNeedsOperator).
const rerunNeedsOperator = "rerun pending, needs an operator"

// rerunLabel is the state of e, a key rerun pending (Rerunnable), as list
// and idempotency list show it in STATE and inspect and idempotency
// inspect on their state: line, alike for the same key: "attempt N of M
// stopped", counted as inspect's attempt: row counts (fn's attempts made,
// of the key's bound), then who runs attempt N+1, or, once its lease
// ended more than rerunAfter ago (rerunStale), rerunNeedsOperator and
// since when no one came back. httpKey: the idempotency middleware's key,
// which a repeat of the request re-runs.
func rerunLabel(e *sentinel.Execution, rerunAfter time.Duration, httpKey bool) string {
	if rerunStale(e, rerunAfter) {
		who := "no caller with WithRerun"
		if httpKey {
			who = "no repeat of the request"
		}
		return fmt.Sprintf("executing (%s: attempt %d of %d stopped, %s came back for more than %s)",
			rerunNeedsOperator, e.Attempt, e.MaxAttempts, who, durationArg(rerunAfter))
	}
	next := "the next caller with WithRerun"
	if httpKey {
		next = "the client's repeat of the request"
	}
	return fmt.Sprintf("executing (rerun pending: attempt %d of %d stopped, %s runs attempt %d)",
		e.Attempt, e.MaxAttempts, next, e.Attempt+1)
}

// isHTTPKey reports whether key is the idempotency middleware's.
func isHTTPKey(key string) bool {
	_, _, ok := idempotency.ParseExecutionKey(key)
	return ok
}

// rerunStale reports whether e is rerun pending (its executor stopped
// with re-runs left, WithRerun) and its lease ended at least after ago on
// the database clock (--rerun-pending-after): no caller with WithRerun
// came back, which status --exit-code pages on.
func rerunStale(e *sentinel.Execution, after time.Duration) bool {
	return e.Rerunnable() && -e.LeaseLeft() >= after
}

// reconcilingStale reports whether e is reconciling and entered it at
// least after ago on the database clock (--reconciling-after): an
// operator began and has not resolved it, which status --exit-code pages
// on (sqlAttention ages it by updated_at alike).
func reconcilingStale(e *sentinel.Execution, after time.Duration) bool {
	return e.State == sentinel.StateReconciling && !e.UpdatedAt.After(dbNow().Add(-after))
}

// needsOperator reports whether e is what status --exit-code pages on,
// by after's thresholds: uncertain, completed with the result not stored,
// rerun pending longer than after.rerunPending, or reconciling longer
// than after.reconciling ("needs_operator" in the --json of list,
// inspect, idempotency list and inspect).
func needsOperator(e *sentinel.Execution, after attentionAfter) bool {
	return uncertain(e) || e.ResultLost() || rerunStale(e, after.rerunPending) || reconcilingStale(e, after.reconciling)
}

// reconcilingLabel is the state of e, reconciling, as list, inspect and
// the idempotency commands show it: marked as needing an operator once it
// has been reconciling longer than after (reconcilingStale).
func reconcilingLabel(e *sentinel.Execution, after time.Duration) string {
	if reconcilingStale(e, after) {
		return fmt.Sprintf("reconciling (needs an operator: for more than %s)", durationArg(after))
	}
	return string(sentinel.StateReconciling)
}

// execTable prints executions as a table: the columns an operator needs to
// pick one to inspect. A key rerun pending is shown as inspect shows it
// (rerunLabel): marked rerunNeedsOperator once its lease ended more than
// rerunAfter ago (rerunStale).
func (a *app) execTable(es []sentinel.Execution, after attentionAfter) {
	w := a.table()
	row(w, "NAMESPACE", "KEY", "STATE", "SINCE", "OWNER", "HOST", "PID", "TOKEN")
	for i := range es {
		e := &es[i]
		state := string(e.State)
		switch {
		case uncertain(e):
			state = "UNCERTAIN"
		case handedBack(e):
			state = handedBackLabel
		case e.Rerunnable():
			state = rerunLabel(e, after.rerunPending, isHTTPKey(e.Key))
		case e.State == sentinel.StateReconciling:
			state = reconcilingLabel(e, after.reconciling)
		case e.State == sentinel.StateCompleted && e.FinalError != "":
			state = "completed (final error)"
		case e.ResultLost():
			state = resultLostLabel
		}
		since := e.Since()
		row(w, e.Namespace, e.Key, state, ts(since)+" ("+relative(since)+")", e.Owner, e.Host, e.PID, e.Token)
	}
	_ = w.Flush()
}

func (a *app) listCmd() *cobra.Command {
	var (
		ns                     nsFlags
		state                  string
		unc, rerun, lost, all  bool
		before, after          string
		limit                  int
		cursor                 string
		updatedBefore, within  time.Duration
		updatedTo, updatedFrom time.Time // the time filters, read by the check
		// A rerun pending key whose lease ended longer ago, or a key
		// reconciling for longer, needs an operator (status
		// --exit-code's thresholds).
		th attentionAfter
	)
	cmd := &cobra.Command{
		Use:   "list [PREFIX]",
		Short: "List executions by key prefix, state, uncertain or rerun pending only, namespace and time",
		Long: `list pages through the Once executions of every namespace (or only of
the one given with --namespace), oldest state change first, each row naming
its namespace, with the filters of the library's ExecutionFilter:

  PREFIX             only keys starting with PREFIX (KeyPrefix): the key
                     or the family of keys an alert names, found without
                     paging through the others; a PREFIX starting with "-"
                     goes after "--" (sentinel list -- -k)
  --state S          claimed, executing, reconciling or completed
  --uncertain        executing with an expired lease: outcome unknown, and
                     no re-run left (WithRerun); a key that the next
                     caller re-runs is listed as "executing (rerun
                     pending: attempt N of M stopped, ...)" without
                     --uncertain
  --rerun-pending    executing with an expired lease and a re-run left
                     (WithRerun): nothing runs it until the next caller
                     with WithRerun; the keys status --exit-code pages on
                     once their lease ended more than --rerun-pending-after
                     ago. It lists every rerun pending key, the paged ones
                     and those whose lease ended a moment ago (--older-than
                     is by state change, not by lease end: an attempt that
                     ran long is old at once)
  --result-lost      completed, but fn's result was not stored (it could
                     not be encoded): every caller gets ErrResult until
                     an operator stores it (set-result)
  --updated-before T / --updated-after T   RFC 3339 times
  --older-than D / --newer-than D          the same, relative to now on
                                           the database's clock (D more
                                           than 0: 0 or less exits 2)

Every filter combines with the others. It prints --limit rows and, when
there are more, the command that lists the next page (--after CURSOR, with
the same PREFIX and filters); --all follows every page. With --json it
prints {"executions": [...], "next": CURSOR}. When nothing matches in the
namespace given with --namespace but other namespaces have matches, stderr
says so with the listing for every namespace.

With --uncertain or --rerun-pending, a key of an HTTP request (the
idempotency middleware's, listed as idempotency:N:SCOPE:KEY) is followed,
on stderr after the table, by the command that inspects it by the client's
Idempotency-Key and scope (sentinel idempotency inspect), which leads to
idempotency resolve (--json: "idempotency_key" on each such execution).

A key handed back (claimed, no live lease: fn returned a Retryable error,
the caller gave up before fn ran, an operator reset it) is listed as
"handed back (safe to retry)": nothing runs it, the next caller does.

"since" (SINCE; --json "since") is when the key entered the state
shown: for a key claimed or executing whose lease has ended on the
database clock (uncertain, rerun pending, handed back by a caller that
gave up) the lease's end, as status --exit-code ages it; for any other
key its last change. "updated_at" in --json stays the row's last write,
which for a stopped attempt is when it started (renewals do not move it).
Rows are in order of updated_at, as the time filters are.

A key rerun pending whose lease ended more than --rerun-pending-after
(default 15m, as status --exit-code) ago needs an operator: no caller with
WithRerun came back, and none may. It is listed as "executing (rerun
pending, needs an operator: attempt N of M stopped, ...)", as inspect,
idempotency list, status and the console say it; a key rerun pending for
less long as "executing (rerun pending: attempt N of M stopped, ...)",
where N is the attempts made, as inspect's attempt: row counts, and the
next caller runs attempt N+1. A key reconciling for longer than
--reconciling-after (default 1h, as status --exit-code) is listed as
"reconciling (needs an operator: for more than D)". With --json,
"needs_operator" is true for such keys, for an uncertain one and for one
whose result was not stored: what status --exit-code pages on. Each such
key, and each key reconciling (whose step, force-complete or reset, is
still to take), is followed, on stderr, by its inspect command, by kind
(an HTTP request's key by its idempotency inspect command, as with
--uncertain and --rerun-pending), carrying the thresholds when they are
not the defaults, which prints its steps. Give it the values status
--exit-code was given (the list command status prints carries them when
they are not the defaults).

Before 0.3 list covered only --namespace (default "default"); scripts that
relied on that pass -n default.`,
		Example: `  sentinel list --uncertain
  sentinel list --uncertain -n payments
  sentinel list --rerun-pending -n payments   # waiting for a caller with WithRerun
  sentinel list --rerun-pending --rerun-pending-after 1h --json | jq '.executions[] | select(.needs_operator)'
  sentinel list charge-42-                  # keys starting with charge-42-
  sentinel list charge-42- --state executing --older-than 10m -n payments
  sentinel list --state reconciling
  sentinel list --result-lost
  sentinel list --state executing --older-than 10m --json
  sentinel list --state completed --updated-after 2026-11-01T00:00:00Z --all`,
		Args: args(0, 1),
		RunE: a.runEChecked(func(cmd *cobra.Command, args []string) error {
			// 0 leaves a filter out: given, it would be dropped in silence.
			for name, d := range map[string]time.Duration{"older-than": updatedBefore, "newer-than": within} {
				if cmd.Flags().Changed(name) && d <= 0 {
					return usageErr("--%s %s: give a duration of more than 0 (such as 10m), or leave --%s out", name, durationArg(d), name)
				}
			}
			if err := checkLimit(limit); err != nil {
				return err
			}
			if err := checkAfter(th); err != nil {
				return err
			}
			if err := a.checkState(cmd, state); err != nil {
				return err
			}
			switch {
			case lost && unc:
				return usageErr("give --result-lost (completed executions) or --uncertain (executing ones), not both")
			case rerun && unc:
				return usageErr("give --rerun-pending (a re-run left) or --uncertain (none left), not both")
			case rerun && lost:
				return usageErr("give --rerun-pending (executing executions) or --result-lost (completed ones), not both")
			case rerun && state != "" && state != string(sentinel.StateExecuting):
				return usageErr("--rerun-pending lists executing executions: not with --state %s", state)
			case lost && state != "" && state != string(sentinel.StateCompleted):
				return usageErr("--result-lost lists completed executions: not with --state %s", state)
			}
			var err error
			if updatedTo, err = parseTimeFlag("--updated-before", before); err != nil {
				return err
			}
			if updatedFrom, err = parseTimeFlag("--updated-after", after); err != nil {
				return err
			}
			if updatedBefore > 0 && !updatedTo.IsZero() {
				return usageErr("give --older-than or --updated-before, not both")
			}
			if within > 0 && !updatedFrom.IsZero() {
				return usageErr("give --newer-than or --updated-after, not both")
			}
			return nil
		}, func(cmd *cobra.Command, args []string) (err error) {
			namespace, err := ns.listing(cmd, a)
			if err != nil {
				return err
			}
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			// --older-than and --newer-than count back from now on the
			// database clock, which stamped every updated_at: a laptop's
			// clock an hour off must not shift the window by an hour.
			if updatedBefore > 0 {
				updatedTo = dbNow().Add(-updatedBefore)
			}
			if within > 0 {
				updatedFrom = dbNow().Add(-within)
			}
			f := sentinel.ExecutionFilter{State: sentinel.State(state), Uncertain: unc, RerunPending: rerun, ResultLost: lost,
				Namespace: namespace, AllNamespaces: ns.all, Limit: limit, After: cursor,
				UpdatedBefore: updatedTo, UpdatedAfter: updatedFrom, KeyPrefix: prefix}
			if unc {
				// Uncertain work of other schemas (an application with a
				// Config.Schema of its own): named on stderr, stdout unchanged.
				defer func() {
					if err != nil {
						return // the listing failed: its error says why
					}
					found, _, _, schemasErr := a.uncertainInSchemasWith(cmd.Context(), prefix)
					a.noteSchemasUnread(schemasErr)
					if len(found) == 0 {
						return
					}
					fprintf(a.stderr, "sentinel: note: uncertain executions in other schemas of this database too: %s; the same listing for every namespace there:\n", quoteAll(found))
					for _, line := range strings.Split(strings.TrimPrefix(a.schemaCommands(cmd, found, "namespace", "all-namespaces", "after"), "\n"), "\n") {
						fprintln(a.stderr, line)
					}
				}()
			}
			var rows []sentinel.Execution
			next := ""
			for {
				page, n, err := a.client.Executions(cmd.Context(), f)
				if err != nil {
					return err
				}
				rows, next = append(rows, page...), n
				if !all || next == "" {
					break
				}
				f.After = next
			}
			if a.jsonOut {
				out := struct {
					Executions []listExecJSON `json:"executions"`
					Next       string         `json:"next"`
				}{Executions: []listExecJSON{}, Next: next}
				for i := range rows {
					e := &rows[i]
					out.Executions = append(out.Executions, listExecJSON{execJSON: toExecJSON(e),
						NeedsOperator: needsOperator(e, th)})
				}
				return a.printJSON(out)
			}
			if len(rows) == 0 {
				which := ""
				if prefix != "" {
					which = " with a key starting with " + argText(prefix)
				}
				fprintf(a.stderr, "no executions match in %s%s\n", nsLabel(namespace), which)
				if f.Namespace != "" && !f.AllNamespaces && f.After == "" {
					// The operator named a namespace (or took the
					// default's from the config) and the key is in
					// another: say so, with the listing that shows it.
					g := f
					g.Namespace, g.AllNamespaces, g.Limit = "", true, 1
					if more, _, err := a.client.Executions(cmd.Context(), g); err == nil && len(more) > 0 {
						fprintf(a.stderr, "other namespaces have some; every namespace:\n  %s\n",
							a.againWith(cmd, []string{"namespace", "all-namespaces", "after"}, "--all-namespaces"))
					}
				}
				return nil
			}
			a.execTable(rows, th)
			switch {
			case unc:
				a.listHTTPKeysNext(rows, httpKeysUncertain, namespace, th.rerunPending)
			case rerun:
				a.listHTTPKeysNext(rows, httpKeysRerun, namespace, th.rerunPending)
			default:
				a.listHTTPKeysNext(rows, httpKeysStale, namespace, th.rerunPending)
			}
			a.listNeedsOperatorNext(rows, th, unc)
			if next != "" {
				fprintf(a.stderr, "more (or add --all):\n  %s\n", a.again(cmd, "after", next))
			}
			return nil
		}),
	}
	ns.add(cmd)
	cmd.Flags().Lookup("all-namespaces").Usage = "every namespace (the default unless --namespace is given)"
	fl := cmd.Flags()
	fl.StringVar(&state, "state", "", "only this state: claimed, executing, reconciling, completed")
	fl.BoolVar(&unc, "uncertain", false, "only uncertain executions (executing, lease expired); other schemas of the database with some (starting with PREFIX, when given) are named on stderr")
	fl.BoolVar(&rerun, "rerun-pending", false, "only executions waiting for a re-run (executing, lease expired, attempts left: the next caller with WithRerun runs them)")
	fl.BoolVar(&lost, "result-lost", false, "only completed executions whose result was not stored (callers get ErrResult until set-result)")
	fl.StringVar(&before, "updated-before", "", "only state changes before this RFC 3339 time")
	fl.StringVar(&after, "updated-after", "", "only state changes after this RFC 3339 time")
	fl.DurationVar(&updatedBefore, "older-than", 0, "only state changes more than this long ago")
	fl.DurationVar(&within, "newer-than", 0, "only state changes less than this long ago")
	fl.IntVar(&limit, "limit", sentinel.DefaultExecutionsLimit, fmt.Sprintf("rows per page (1..%d)", sentinel.MaxExecutionsLimit))
	fl.StringVar(&cursor, "after", "", "the cursor printed with the previous page")
	fl.BoolVar(&all, "all", false, "follow every page")
	addAfterFlags(cmd, &th, "a key rerun pending (its lease ended, on the database clock) longer than this needs an operator: listed as such (status --exit-code's threshold)")
	return cmd
}

// listExecJSON is an execution as list --json prints it.
type listExecJSON struct {
	execJSON
	// NeedsOperator: uncertain, completed with the result not stored,
	// rerun pending whose lease ended more than --rerun-pending-after ago
	// (no caller with WithRerun came back), or reconciling for longer than
	// --reconciling-after: what status --exit-code pages on
	// (needsOperator).
	NeedsOperator bool `json:"needs_operator"`
}

// parseTimeFlag parses an RFC 3339 time flag; "" is the zero time.
func parseTimeFlag(name, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, usageErr("%s %q: want an RFC 3339 time such as 2026-11-22T10:00:00Z", name, v)
	}
	return t, nil
}

func (a *app) followCmd() *cobra.Command {
	var (
		ns    nsFlags
		types []string
		after string
		count int
	)
	cmd := &cobra.Command{
		Use:   "follow [KEY...]",
		Short: "Print execution events live as they are committed",
		Long: `follow prints every event of --namespace (or every namespace with
--all-namespaces) as it is committed: claimed, started, completed,
completion_refused, reconciling, force_completed, reset, ... Give KEYs to
follow only those keys and --type to keep only some event types (a type
this version never records is followed with a warning naming the nearest).

It starts with the events committed from now on. When it ends it prints
(on stderr) the cursor to resume from; --after CURSOR resumes there with
nothing skipped or repeated, even an event with a lower ID whose
transaction committed in between (with --json each event carries its
"cursor"). An event ID is accepted too, but only a cursor is exact. It runs
until interrupted (exit 0), or until --count events were printed. With
--json it prints one JSON object per line.`,
		Example: `  sentinel follow -n payments
  sentinel follow --all-namespaces --type completion_refused --type reconciling
  sentinel follow order-1 order-2 -n payments --json
  sentinel follow -n payments --after 41872     # resume from the cursor follow printed`,
		RunE: a.runEChecked(func(*cobra.Command, []string) error {
			if err := checkCursor(after); err != nil {
				return err
			}
			if err := checkEventTypes(types); err != nil {
				return err
			}
			return checkCount(count)
		}, func(cmd *cobra.Command, keys []string) error {
			namespace, err := ns.resolve(cmd, a)
			if err != nil {
				return err
			}
			f := sentinel.FollowFilter{Namespace: namespace, AllNamespaces: ns.all, Keys: keys, Types: types, Cursor: after}
			for _, t := range types {
				if note := unknownTypeNote(t); note != "" {
					fprintln(a.stderr, note)
				}
			}
			if !ns.all {
				for _, k := range keys {
					a.warnElsewhere(cmd, executionWatchLookup, k)
				}
				if len(keys) == 0 && !a.jsonOut {
					a.warnEmptyNamespace(cmd)
				}
			}
			ctx := cmd.Context()
			if !a.jsonOut {
				fprintf(a.stderr, "following %s; interrupt to stop\n", nsLabel(namespace))
			}
			lines := lineCounter{max: count}
			resume := after
			defer func() {
				// Not the cursor given, when Follow refused it.
				if resume != "" && !(resume == after && errors.Is(err, sentinel.ErrInvalid)) {
					// The whole line: --after alone, typed as `sentinel follow
					// --after C`, follows "default" of schema "sentinel".
					fmt.Fprintf(a.stderr, "resume with --after %s:\n  %s\n", resume, a.again(cmd, "after", resume))
				}
			}()
			err = a.client.Follow(ctx, f, func(ev sentinel.Event) error {
				resume = ev.Cursor
				if a.jsonOut {
					j := toEventJSON(ev)
					j.Cursor = ev.Cursor
					if err := a.printJSONLine(j); err != nil {
						return err
					}
				} else {
					line := fmt.Sprintf("%s  #%d  %s/%s  %s (now %s)  token %d  by %s", ts(ev.At), ev.ID, ev.Namespace, ev.Key,
						ev.Type, ev.State, ev.Token, ev.Owner)
					if m := metadataText(ev.Metadata); m != "" {
						line += "  " + m
					}
					fprintln(a.stdout, line)
				}
				return lines.printed()
			})
			return streamEnd(cmd, err)
		}),
	}
	ns.add(cmd)
	cmd.Flags().StringArrayVar(&types, "type", nil, "only events of this type (repeatable)")
	cmd.Flags().StringVar(&after, "after", "", "resume from this cursor (printed when follow ends; an event ID is accepted too)")
	cmd.Flags().IntVar(&count, "count", 0, "exit after printing this many events (0: until interrupted; less than 0 exits 2)")
	return cmd
}
