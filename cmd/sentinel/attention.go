package main

// This file: status --exit-code: what needs an operator, read in one
// statement per schema, and the exit code and message that page on it.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/internal/pgcode"
)

// defaultRerunPendingAfter is status --rerun-pending-after's default: a
// key left for a re-run this long with no caller coming back pages.
const defaultRerunPendingAfter = 15 * time.Minute

// defaultReconcilingAfter is status --reconciling-after's default: a key
// an operator put in reconciling this long ago and never resolved
// (force-complete, reset) pages. Reconciling is a person's step, and
// every caller of the key gets ErrReconciling until it ends: an hour
// leaves time to look the effect up at a provider, and past it the step
// was most likely abandoned (a closed terminal, a console tab, an
// operator called away).
const defaultReconcilingAfter = time.Hour

// maxAttentionSchemas bounds the other schemas status --exit-code reads
// for what needs an operator when no --schema is given: every one in a
// real database (an application or two with a Config.Schema of its own),
// one statement each over two partial indexes, not the listing's
// maxSchemasShown, past which a check would exit 0 without having looked.
const maxAttentionSchemas = 100

// Kinds of attentionJSON.Kind.
const (
	attentionUncertain    = "uncertain"
	attentionResultLost   = "result_lost"
	attentionRerunPending = "rerun_pending"
	attentionReconciling  = "reconciling"
)

// attentionJSON is one line of what needs an operator (status --exit-code;
// --json: "attention"."found"): kind, where, how many, since when.
type attentionJSON struct {
	Schema    string `json:"schema"`
	Namespace string `json:"namespace"`
	// Kind is uncertain (executing, lease expired, no re-run left),
	// result_lost (completed, result not stored: callers get ErrResult)
	// rerun_pending (executing, lease expired, re-runs left, and nothing
	// came back to re-run it for longer than rerun_pending_after) or
	// reconciling (an operator began reconciling it more than
	// reconciling_after ago and has not resolved it: callers get
	// ErrReconciling).
	Kind  string `json:"kind"`
	Count int64  `json:"count"`
	// HTTPRequests is how many of Count are HTTP requests' keys (the
	// idempotency middleware's, idempotency.KeyPrefix): resolved with the
	// response the client's retries get (sentinel idempotency resolve),
	// not reconciled or force-completed with a value, and re-run, when
	// rerun pending, by the client's repeat of the request, not by a
	// caller with WithRerun.
	HTTPRequests int64 `json:"http_requests"`
	// Since is the earliest among them of when the lease ended (uncertain,
	// rerun_pending: when its executor stopped, or was last known alive),
	// of the completion (result_lost) or of the start of reconciling
	// (reconciling), on the database clock.
	Since *string `json:"since"`

	since time.Time
}

// statusAttentionJSON is status --json's "attention", with --exit-code.
type statusAttentionJSON struct {
	// NeedsOperator is true when status exits 5 (exitAttention).
	NeedsOperator bool `json:"needs_operator"`
	// RerunPendingAfter is --rerun-pending-after (a Go duration).
	RerunPendingAfter string `json:"rerun_pending_after"`
	// ReconcilingAfter is --reconciling-after (a Go duration).
	ReconcilingAfter string          `json:"reconciling_after"`
	Found            []attentionJSON `json:"found"`
	// SchemasUnread are the other schemas that could not be read for
	// what needs an operator (an older version, no privilege).
	SchemasUnread []string `json:"schemas_unread,omitempty"`
	// MoreSchemas is true when more than maxAttentionSchemas (100) other
	// schemas hold Sentinel's tables: only the first, in name order,
	// were read; the others need a check each (--schema).
	MoreSchemas bool `json:"more_schemas,omitempty"`
}

// sqlAttention counts, per namespace (of $1, or every namespace when $1 is
// ""), the executions of {{schema}} that need an operator, in one
// statement over the two partial indexes of AttentionCounts (open
// executions, and those with a result error): completed keys are not
// read. Uncertain and rerun pending are StateCount's (ExecutionCounts),
// the rerun pending ones only when their lease ended more than $2
// microseconds ago on the database clock: the age is that of "nothing
// runs it", not of the attempt's start (updated_at), which a long fn or a
// crash late in it would make old at once. Reconciling ones count when
// they entered reconciling more than $3 microseconds ago: updated_at,
// which the operator's Reconcile set (statement_timestamp) and nothing
// changes while the key is reconciling (a worker's finish is fenced off
// by the new token and owner; only force-complete and reset move it on,
// and they leave reconciling). Each line counts apart, in the same
// statement, its keys that start with $4 (idempotency.KeyPrefix): HTTP
// requests', which an operator resolves with a response, not reconciles.
const sqlAttention = `
SELECT a.namespace, a.kind, a.n, a.since, a.http FROM (
    SELECT t.namespace,
        CASE WHEN t.attempt >= t.max_attempts THEN 'uncertain' ELSE 'rerun_pending' END AS kind,
        pg_catalog.count(*) AS n, pg_catalog.min(coalesce(t.lease_expires_at, t.updated_at)) AS since,
        pg_catalog.count(*) FILTER (WHERE pg_catalog.starts_with(t.key, $4::text)) AS http
    FROM {{schema}}.executions t
    WHERE t.state <> 'completed' AND t.state = 'executing' AND ($1::text = '' OR t.namespace = $1::text)
      AND coalesce(t.lease_expires_at <= pg_catalog.clock_timestamp(), true)
      AND (t.attempt >= t.max_attempts OR coalesce(t.lease_expires_at, t.updated_at)
          <= pg_catalog.clock_timestamp() - $2::bigint * interval '1 microsecond')
    GROUP BY 1, 2
  UNION ALL
    SELECT t.namespace, 'reconciling', pg_catalog.count(*), pg_catalog.min(t.updated_at),
        pg_catalog.count(*) FILTER (WHERE pg_catalog.starts_with(t.key, $4::text))
    FROM {{schema}}.executions t
    WHERE t.state <> 'completed' AND t.state = 'reconciling' AND ($1::text = '' OR t.namespace = $1::text)
      AND t.updated_at <= pg_catalog.clock_timestamp() - $3::bigint * interval '1 microsecond'
    GROUP BY 1
  UNION ALL
    SELECT t.namespace, 'result_lost', pg_catalog.count(*), pg_catalog.min(t.updated_at),
        pg_catalog.count(*) FILTER (WHERE pg_catalog.starts_with(t.key, $4::text))
    FROM {{schema}}.executions t
    WHERE t.state = 'completed' AND t.result_error IS NOT NULL AND t.final_error IS NULL
      AND ($1::text = '' OR t.namespace = $1::text)
    GROUP BY 1) a
ORDER BY a.kind = 'uncertain' DESC, a.kind = 'reconciling' DESC, a.kind = 'result_lost' DESC, a.namespace`

// attentionAfter are status --exit-code's thresholds: how long a key may
// be rerun pending, and reconciling, before it needs an operator.
type attentionAfter struct {
	rerunPending, reconciling time.Duration
}

// attentionIn reads sqlAttention in schema for namespace ns ("" every
// namespace), with rerun pending and reconciling keys counted once so for
// longer than after says.
func (a *app) attentionIn(ctx context.Context, schema, ns string, after attentionAfter) ([]attentionJSON, error) {
	q := strings.ReplaceAll(sqlAttention, "{{schema}}", pgx.Identifier{schema}.Sanitize())
	rows, err := a.pool.Query(ctx, q, ns, after.rerunPending.Microseconds(), after.reconciling.Microseconds(), idempotency.KeyPrefix)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (attentionJSON, error) {
		j := attentionJSON{Schema: schema}
		err := r.Scan(&j.Namespace, &j.Kind, &j.Count, &j.since, &j.HTTPRequests)
		j.Since = tsJSON(j.since)
		return j, err
	})
}

// attention reads what needs an operator for status --exit-code: in the
// schema and namespace status shows, and, when the command line named
// neither (--namespace, --schema), in every other schema of the database
// that holds Sentinel's tables (up to maxAttentionSchemas, in name order;
// moreSchemas says there were more): an operator who names nothing is
// paged for anything anywhere; one who names a namespace or a schema sets
// the alert's scope (status still names, in its output, the other
// schemas holding anything this pages on: attentionInSchemas). A failure to read the schema shown is an error;
// another schema that cannot be read is returned in unread.
func (a *app) attention(cmd *cobra.Command, namespace string, after attentionAfter) (found []attentionJSON, unread []string, moreSchemas bool, err error) {
	ctx := cmd.Context()
	found, err = a.attentionIn(ctx, a.schema, namespace, after)
	if err != nil {
		return nil, nil, false, fmt.Errorf("read what needs an operator: %w", notMigrated(a.schema, err))
	}
	if cmd.Flags().Changed("namespace") || cmd.Flags().Changed("schema") {
		return found, nil, false, nil
	}
	more, unread, moreSchemas, err := a.attentionInSchemas(ctx, after, maxAttentionSchemas)
	if err != nil {
		// status notes it (other_schemas_unread): no schema was looked in.
		return found, nil, false, nil
	}
	return append(found, more...), unread, moreSchemas, nil
}

// attentionInSchemas reads sqlAttention, for every namespace, in the
// first n other schemas of the database that hold Sentinel's tables (in
// name order; more says there were more): what status --exit-code pages
// on there, by after's thresholds. It returns the schemas it could not
// read (an older version, no privilege) in unread; when the catalog
// cannot be read, an error matching errAttentionSchemasUnread: no schema
// was looked in.
func (a *app) attentionInSchemas(ctx context.Context, after attentionAfter, n int) (found []attentionJSON, unread []string, more bool, err error) {
	schemas, more, err := a.sentinelSchemasUpTo(ctx, n)
	if err != nil {
		return nil, nil, false, fmt.Errorf("%w: %v", errAttentionSchemasUnread, err)
	}
	for _, s := range schemas {
		there, err := a.attentionIn(ctx, s, "", after)
		if err != nil {
			unread = append(unread, s)
			continue
		}
		found = append(found, there...)
	}
	return found, unread, more, nil
}

// errAttentionSchemasUnread is attentionInSchemas's error: the catalog
// could not be read, so the other schemas were not looked in.
var errAttentionSchemasUnread = errors.New("the other schemas of this database could not be looked in for what needs an operator (reading the catalog failed)")

// otherSchemasText is status's paragraph on the other schemas among found
// (attentionInSchemas) holding something status --exit-code pages on
// other than uncertain executions (those status names in a paragraph of
// their own, with the schemas in uncertain): each schema, in the order
// of found, with what it holds, counted over its namespaces. Empty when
// there is none.
func otherSchemasText(found []attentionJSON, uncertain []string, after attentionAfter) (schemas []string, text string) {
	named := map[string]bool{}
	for _, s := range uncertain {
		named[s] = true
	}
	counts := map[string]map[string]int64{}
	for _, f := range found {
		if f.Kind == attentionUncertain || named[f.Schema] {
			continue
		}
		if counts[f.Schema] == nil {
			counts[f.Schema] = map[string]int64{}
			schemas = append(schemas, f.Schema)
		}
		counts[f.Schema][f.Kind] += f.Count
	}
	if len(schemas) == 0 {
		return nil, ""
	}
	var parts []string
	for _, s := range schemas {
		parts = append(parts, fmt.Sprintf("%s (%s)", quoteAll([]string{s}), attentionWhat(counts[s], after)))
	}
	return schemas, "other schemas of this database hold keys that need an operator too (what status --exit-code pages on): " +
		strings.Join(parts, ", ") + "; every namespace there:"
}

// otherNamespacesText says, for status --namespace, what found (lines of
// other namespaces, uncertain ones left out: they are named apart) holds:
// each namespace, quoted, with its counts by kind.
func otherNamespacesText(found []attentionJSON, after attentionAfter) string {
	var names []string
	counts := map[string]map[string]int64{}
	for _, f := range found {
		if counts[f.Namespace] == nil {
			counts[f.Namespace] = map[string]int64{}
			names = append(names, f.Namespace)
		}
		counts[f.Namespace][f.Kind] += f.Count
	}
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s (%s)", quoteAll([]string{n}), attentionWhat(counts[n], after)))
	}
	return strings.Join(parts, ", ")
}

// attentionWhat says counts (by kind: result lost, reconciling, rerun
// pending) in words, judged by after.
func attentionWhat(counts map[string]int64, after attentionAfter) string {
	var what []string
	for _, k := range []struct{ kind, words string }{
		{attentionResultLost, "completed with the result not stored"},
		{attentionReconciling, "reconciling for more than " + durationArg(after.reconciling)},
		{attentionRerunPending, rerunNeedsOperator + ", for more than " + durationArg(after.rerunPending)},
	} {
		if n := counts[k.kind]; n > 0 {
			what = append(what, fmt.Sprintf("%d %s", n, k.words))
		}
	}
	return strings.Join(what, "; ")
}

// notMigrated is err, matching sentinel.ErrNotMigrated as the library's
// errors do when it says the schema has no Sentinel tables, or not those
// of this version (a missing schema, table, column or function: the
// statement is sqlAttention), so that run names the schemas that have
// them, each with the same command, as for status without --exit-code.
func notMigrated(schema string, err error) error {
	if pgcode.NotMigrated(err) {
		return &notMigratedError{schema: schema, err: err}
	}
	return err
}

// notMigratedError is notMigrated's error.
type notMigratedError struct {
	schema string
	err    error
}

func (e *notMigratedError) Error() string {
	return fmt.Sprintf("schema %q is not migrated (%v)", e.schema, e.err)
}

func (e *notMigratedError) Unwrap() []error { return []error{sentinel.ErrNotMigrated, e.err} }

// attentionErr is status --exit-code's result: nil when found is empty,
// else exit 5 (exitAttention) with what needs an operator, a line each,
// and the command that lists it, runnable as printed.
func (a *app) attentionErr(found []attentionJSON, after attentionAfter) error {
	if len(found) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "needs an operator (exit %d):", exitAttention)
	own := a.schema
	defer func() { a.schema = own }()
	for _, f := range found {
		a.schema = f.Schema
		where := fmt.Sprintf("namespace %q", f.Namespace)
		if f.Schema != own {
			where += fmt.Sprintf(" of schema %q", f.Schema)
		}
		since := ts(f.since) + " (" + relative(f.since) + ")"
		switch f.Kind {
		case attentionUncertain:
			fmt.Fprintf(&b, "\n%d uncertain in %s, lease ended %s; %s:\n  %s",
				f.Count, where, since, attentionTodo(f, "reconcile"), a.command("list", "--uncertain", "-n", f.Namespace))
		case attentionResultLost:
			fmt.Fprintf(&b, "\n%d completed with the result not stored in %s, since %s; %s:\n  %s",
				f.Count, where, since, attentionTodo(f, "set-result"), a.command("list", "--result-lost", "-n", f.Namespace))
		case attentionRerunPending:
			// The list marks the keys counted here by the same threshold.
			list := append([]string{"list", "--rerun-pending", "-n", f.Namespace}, rerunAfterFlag(after.rerunPending)...)
			who := "no caller with WithRerun"
			switch {
			case f.HTTPRequests >= f.Count && f.Count == 1:
				who = "no repeat of the request"
			case f.HTTPRequests >= f.Count:
				who = "no repeat of the requests"
			case f.HTTPRequests > 0:
				who = "no caller with WithRerun, nor repeat of an HTTP request,"
			}
			// One parenthesis: what to do with the HTTP requests' keys,
			// then how the list marks the keys counted.
			todo, listed := attentionTodo(f, "reconcile"), " (listed as"
			if strings.HasSuffix(todo, ")") {
				todo, listed = strings.TrimSuffix(todo, ")"), "; listed as"
			}
			fmt.Fprintf(&b, "\n%d %s (%s came back for more than %s) in %s, lease ended %s; %s%s \"executing (%s: attempt N of M stopped, ...)\"; the list shows every rerun pending key, the ones counted here being those whose lease ended more than %s ago):\n  %s",
				f.Count, rerunNeedsOperator, who, durationArg(after.rerunPending), where, since, todo, listed, rerunNeedsOperator, durationArg(after.rerunPending), a.command(list...))
		case attentionReconciling:
			fmt.Fprintf(&b, "\n%d reconciling for more than %s in %s (every caller gets ErrReconciling until an operator resolves them), since %s; %s:\n  %s",
				f.Count, durationArg(after.reconciling), where, since, attentionTodo(f, "force-complete (the work happened) or reset (it did not)"), a.command(append([]string{"list", "--state", "reconciling", "--older-than", durationArg(after.reconciling), "-n", f.Namespace}, reconcilingAfterFlag(after.reconciling)...)...))
		}
	}
	return &codeError{code: exitAttention, err: fmt.Errorf("%s", b.String())}
}

// attentionTodo is what an attention line asks of an operator for f's
// keys: "inspect, then " todo, what a Once key needs; of the HTTP
// requests' keys among them (f.HTTPRequests), resolve each with the
// response the client's retries get (the list the line prints leads to
// idempotency inspect, then idempotency resolve), which is all the line
// asks when every key is one.
func attentionTodo(f attentionJSON, todo string) string {
	switch {
	case f.HTTPRequests <= 0:
		return "inspect, then " + todo
	case f.HTTPRequests >= f.Count && f.Count == 1:
		return "inspect, then resolve it with the response its retries get (an HTTP request's key)"
	case f.HTTPRequests >= f.Count:
		return "inspect, then resolve each with the response its retries get (HTTP requests' keys)"
	case f.HTTPRequests == 1:
		return "inspect, then " + todo + " (1 of them is an HTTP request's key: resolve it with the response its retries get)"
	default:
		return fmt.Sprintf("inspect, then %s (%d of them are HTTP requests' keys: resolve each with the response its retries get)", todo, f.HTTPRequests)
	}
}
