package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/internal/nswalk"
)

// nsLookup is where a command's first argument lives: a table whose
// primary key starts (namespace, column), and the words for it.
type nsLookup struct {
	table, column string
	// What is said, given the name (%[1]q), the namespace or the count of
	// namespaces (%[2]), and what the walk left out (%[3]s).
	inOne, inMany, nowhere string
	// notHere warns, before a command that takes something (lock, elect,
	// queue lock) or watches (observe, follow, queue status and follow),
	// that name is new in this namespace (%[2]q) but known in others
	// (%[3]s, quoted and joined; %[4]s is "there" or "in each"): what it
	// takes does not exclude those, and it sees nothing of them.
	notHere string
}

var (
	executionLookup = nsLookup{table: "executions", column: "key",
		inOne:   "%[1]q has an execution in namespace %[2]q; the same command there:",
		inMany:  "%[1]q has executions in %[2]d other namespaces%[3]s; the same command in each:",
		nowhere: "no other namespace has an execution of %[1]q either%[3]s"}
	electionLookup = nsLookup{table: "leaders", column: "election",
		inOne:   "%[1]q is an election group of namespace %[2]q; the same command there:",
		inMany:  "%[1]q is an election group of %[2]d other namespaces%[3]s; the same command in each:",
		nowhere: "no other namespace has an election group %[1]q either%[3]s",
		notHere: "sentinel: note: %[1]q is not an election group of namespace %[2]q yet, but is one of %[3]s: leading here does not exclude a leader there; to campaign there instead:"}
	leaseLookup = nsLookup{table: "leases", column: "key",
		notHere: "sentinel: note: %[1]q has no lease in namespace %[2]q yet, but has one in %[3]s: the lease taken here does not exclude holders there; to take that one instead:"}
	queueLookup = nsLookup{table: "queues", column: "resource",
		notHere: "sentinel: note: %[1]q has no queue in namespace %[2]q yet, but has one in %[3]s: a turn taken here does not wait for turns there; to take a turn there instead:"}

	// For the commands that watch (observe, follow KEY, queue status and
	// queue follow RESOURCE): nothing would show up here.
	electionWatchLookup = nsLookup{table: "leaders", column: "election",
		notHere: "sentinel: note: %[1]q is not an election group of namespace %[2]q yet, but is one of %[3]s; the same command %[4]s:"}
	executionWatchLookup = nsLookup{table: "executions", column: "key",
		notHere: "sentinel: note: %[1]q has no execution in namespace %[2]q yet, but has one in %[3]s; the same command %[4]s:"}
	queueWatchLookup = nsLookup{table: "queues", column: "resource",
		notHere: "sentinel: note: %[1]q has no queue in namespace %[2]q yet, but has one in %[3]s; the same command %[4]s:"}
)

// keyCommands are the commands whose first argument names something in
// the namespace --namespace names (the default one when it is not given):
// a Once key, an election group. When it is not there, their error says
// where it is (elsewhere); members, which lists nothing then, says it on
// stderr.
var keyCommands = map[string]nsLookup{
	"sentinel inspect": executionLookup, "sentinel history": executionLookup, "sentinel reconcile": executionLookup,
	"sentinel force-complete": executionLookup, "sentinel reset": executionLookup, "sentinel set-result": executionLookup,
	"sentinel leader": electionLookup, "sentinel members": electionLookup,
}

// maxNamespacesVisited bounds the namespaces elsewhere looks in: one
// index probe each, so a name that is nowhere costs at most this many
// probes, however many rows the table holds.
const maxNamespacesVisited = 1000

// maxElsewhereShown bounds the commands elsewhere prints.
const maxElsewhereShown = 5

// elsewhere adds to notFound (name is not in the namespace cmd acted on)
// where it is: each namespace with cmd's command line there, runnable as
// printed, or that no other namespace has it either. The operator who
// named no namespace (or the wrong one) is told where to look instead of
// "not found" or "no leader" alone. The exit code stays 3.
func (a *app) elsewhere(cmd *cobra.Command, lk nsLookup, name string, notFound error) error {
	return a.elsewhereAs(cmd, lk, name, name, notFound)
}

// elsewhereAs is elsewhere for a name shown as shown (an Idempotency-Key,
// whose execution key is name).
func (a *app) elsewhereAs(cmd *cobra.Command, lk nsLookup, name, shown string, notFound error) error {
	hint := a.elsewhereHint(cmd, lk, name, shown)
	if hint == "" {
		return notFound
	}
	return &codeError{code: exitNotFound, err: errors.New(notFound.Error() + "\n" + hint)}
}

// lookElsewhere looks for name in lk's table beyond the command's
// namespace (nswalk.Elsewhere), in at most maxNamespacesVisited of them.
func (a *app) lookElsewhere(ctx context.Context, lk nsLookup, name string) (found []string, capped, here bool, err error) {
	return nswalk.Elsewhere(ctx, a.pool, a.schema, lk.table, lk.column, name, a.namespace, maxNamespacesVisited)
}

// elsewhereHint is elsewhere's text; empty when the lookup failed (it is a
// courtesy: what the command met stands).
func (a *app) elsewhereHint(cmd *cobra.Command, lk nsLookup, name, shown string) string {
	found, capped, here, err := a.lookElsewhere(cmd.Context(), lk, name)
	if err != nil {
		return ""
	}
	return a.elsewhereText(cmd, lk, shown, found, capped, here)
}

// elsewhereText is elsewhereHint's text for what lookElsewhere found.
// When name is here too (a group with no leader or no live elector now),
// it names only the other namespaces that have it, if any: "no other
// namespace has it either" would read as "it is not here".
func (a *app) elsewhereText(cmd *cobra.Command, lk nsLookup, shown string, found []string, capped, here bool) string {
	if here && len(found) == 0 {
		return ""
	}
	looked := ""
	if capped {
		looked = fmt.Sprintf(" (of the first %d namespaces; there are more)", maxNamespacesVisited)
	}
	var b strings.Builder
	switch {
	case len(found) == 0:
		fmt.Fprintf(&b, lk.nowhere, shown, "", looked)
	case len(found) == 1:
		fmt.Fprintf(&b, lk.inOne, shown, found[0], looked)
	default:
		fmt.Fprintf(&b, lk.inMany, shown, len(found), looked)
	}
	a.commandsFor(&b, cmd, found)
	return b.String()
}

// warnElsewhere prints lk.notHere on stderr when name has no row in the
// namespace cmd acts on but has one in others, with cmd's command line for
// each: a lock, a campaign or a turn in a namespace the application does
// not use excludes nothing, and a watch there shows nothing. It changes
// nothing else (the command goes on); a failed lookup prints nothing.
func (a *app) warnElsewhere(cmd *cobra.Command, lk nsLookup, name string) {
	found, _, here, err := a.lookElsewhere(cmd.Context(), lk, name)
	if err != nil || here || len(found) == 0 {
		return
	}
	quoted := make([]string, 0, len(found))
	for i, ns := range found {
		if i == maxElsewhereShown {
			quoted = append(quoted, "...")
			break
		}
		quoted = append(quoted, strconv.Quote(ns))
	}
	where := "namespace " + quoted[0]
	if len(found) > 1 {
		where = "namespaces " + strings.Join(quoted, ", ")
	}
	each := "there"
	if len(found) > 1 {
		each = "in each"
	}
	var b strings.Builder
	fmt.Fprintf(&b, lk.notHere, name, a.namespace, where, each)
	a.commandsFor(&b, cmd, found)
	for _, line := range strings.Split(b.String(), "\n") {
		fprintln(a.stderr, line)
	}
}

// commandsFor writes cmd's command line in each namespace of found (the
// first maxElsewhereShown; the others named).
func (a *app) commandsFor(b *strings.Builder, cmd *cobra.Command, found []string) {
	for i, ns := range found {
		if i == maxElsewhereShown {
			var rest []string
			for j, ns := range found[i:] {
				if j == 20 {
					rest = append(rest, "...")
					break
				}
				rest = append(rest, strconv.Quote(ns))
			}
			fmt.Fprintf(b, "\nand %d more namespaces, the same way: %s", len(found)-i, strings.Join(rest, ", "))
			break
		}
		b.WriteString("\n  " + a.again(cmd, "namespace", ns))
	}
}

// maxSchemasShown bounds the schemas schemasElsewhere names.
const maxSchemasShown = 5

// sqlSentinelSchemas lists the schemas of the database, other than $1, that
// hold Sentinel's tables (its migrations table, executions and leases), in
// name order, at most $2: read from the catalog, whatever the schemas hold.
const sqlSentinelSchemas = `
SELECT n.nspname FROM pg_catalog.pg_namespace n
WHERE n.nspname <> $1
  AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.relnamespace = n.oid AND c.relname = 'schema_migrations')
  AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.relnamespace = n.oid AND c.relname = 'executions')
  AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.relnamespace = n.oid AND c.relname = 'leases')
ORDER BY n.nspname
LIMIT $2`

// sentinelSchemas reads sqlSentinelSchemas: the first maxSchemasShown
// other schemas holding Sentinel's tables, and whether there are more.
func (a *app) sentinelSchemas(ctx context.Context) (schemas []string, more bool, err error) {
	return a.sentinelSchemasUpTo(ctx, maxSchemasShown)
}

// sentinelSchemasUpTo reads sqlSentinelSchemas: the first n other schemas
// holding Sentinel's tables, and whether there are more.
func (a *app) sentinelSchemasUpTo(ctx context.Context, n int) (schemas []string, more bool, err error) {
	rows, err := a.pool.Query(ctx, sqlSentinelSchemas, a.schema, n+1)
	if err != nil {
		return nil, false, err
	}
	schemas, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, false, err
	}
	if len(schemas) > n {
		schemas, more = schemas[:n], true
	}
	return schemas, more, nil
}

// schemasElsewhere is what to tell an operator whose schema is not
// migrated when other schemas of the same database hold Sentinel's tables
// (an application that sets Config.Schema, run against without --schema):
// those schemas, each with the same command there, ready to copy, as
// lines joined by newlines (no newline at the end; print each line
// escaped, as schema names come from the database). Empty when there are
// none or they cannot be read.
func (a *app) schemasElsewhere(ctx context.Context, cmd *cobra.Command) string {
	if a.pool == nil || cmd == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	found, more, err := a.sentinelSchemas(ctx)
	if err != nil || len(found) == 0 {
		return ""
	}
	var b strings.Builder
	switch {
	case len(found) == 1:
		fmt.Fprintf(&b, "Sentinel's tables are in schema %s of this database; the same command there:", quoteAll(found))
	case more:
		fmt.Fprintf(&b, "Sentinel's tables are in more than %d other schemas of this database, among them %s; the same command in each:", maxSchemasShown, quoteAll(found))
	default:
		fmt.Fprintf(&b, "Sentinel's tables are in schemas %s of this database; the same command in each:", quoteAll(found))
	}
	b.WriteString(a.schemaCommands(cmd, found))
	return b.String()
}

// uncertainInSchemas looks, in the other schemas of the database that hold
// Sentinel's tables (at most maxSchemasShown of them, in name order), for
// uncertain executions of any namespace: one read along each schema's
// index of open executions, through a client of that schema on the same
// pool. It returns the schemas that have some, those it could not read
// (an older schema version, no privilege), and whether there were more
// schemas than it looked at; or, when the catalog cannot be read, an
// error saying so (errSchemasUnread): no schema was looked in, which the
// caller says, lest "none found" read as "none there".
func (a *app) uncertainInSchemas(ctx context.Context) (found, unread []string, more bool, err error) {
	return a.uncertainInSchemasWith(ctx, "")
}

// uncertainInSchemasWith is uncertainInSchemas for the keys starting with
// prefix (list PREFIX --uncertain): a schema whose uncertain keys all
// start otherwise is not one where the same listing finds anything.
func (a *app) uncertainInSchemasWith(ctx context.Context, prefix string) (found, unread []string, more bool, err error) {
	if a.pool == nil {
		return nil, nil, false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	schemas, more, err := a.sentinelSchemas(ctx)
	if err != nil {
		return nil, nil, false, fmt.Errorf("%w: %v", errSchemasUnread, err)
	}
	for _, s := range schemas {
		c, err := sentinel.New(a.pool, &sentinel.Config{Schema: s, Owner: a.operator + "/sentinel-status"})
		if err != nil {
			unread = append(unread, s)
			continue
		}
		ex, _, err := c.Executions(ctx, sentinel.ExecutionFilter{Uncertain: true, AllNamespaces: true, KeyPrefix: prefix, Limit: 1})
		c.Close()
		switch {
		case err != nil:
			unread = append(unread, s)
		case len(ex) > 0:
			found = append(found, s)
		}
	}
	return found, unread, more, nil
}

// errSchemasUnread is uncertainInSchemas's error: the catalog could not
// be read, so the other schemas were not looked in.
var errSchemasUnread = errors.New("the other schemas of this database could not be looked in for uncertain executions (reading the catalog failed)")

// noteSchemasUnread says on stderr that the other schemas were not looked
// in, when err says so, its cause's lines as lines (fprintLines). The
// callers leave it out when the command itself failed: the cause is then
// most often the command's own error (the database unreachable), which is
// printed anyway.
func (a *app) noteSchemasUnread(err error) {
	if err != nil {
		fprintLines(a.stderr, "sentinel: note:", err.Error())
	}
}

// schemaCommands is a line per schema: cmd as given (less the flags
// named in drop), with --schema set to it, runnable as printed.
func (a *app) schemaCommands(cmd *cobra.Command, schemas []string, drop ...string) string {
	var b strings.Builder
	own := a.schema
	for _, s := range schemas {
		a.schema = s
		b.WriteString("\n  " + a.againWith(cmd, drop))
	}
	a.schema = own
	return b.String()
}

// quoteAll quotes each name (strconv.Quote), joined by ", ".
func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// sqlExecutionNamespaces lists the namespaces that have executions, in
// order, at most $2 (nswalk.Walk: one index probe per namespace), and
// whether $1 is one of them.
var sqlExecutionNamespaces = `
WITH RECURSIVE ` + nswalk.Walk("ns", "executions", "$2::int") + `
SELECT coalesce(pg_catalog.array_agg(ns.namespace ORDER BY ns.namespace) FILTER (WHERE ns.namespace IS NOT NULL), '{}'::text[]),
    EXISTS (SELECT 1 FROM {{schema}}.executions h WHERE h.namespace = $1::text)
FROM ns`

// sqlQueueNamespacesHere lists the namespaces that have a queue (a
// ticket, a queue row or a queue's history: sqlQueueNamespaces), in order,
// at most $2 from each table walked (nswalk.Walk), and whether $1 is one
// of them.
var sqlQueueNamespacesHere = `
WITH RECURSIVE ` + nswalk.Walk("tk", "tickets", "$2::int") + `,
` + nswalk.Walk("qu", "queues", "$2::int") + `,
` + nswalk.Walk("ev", "queue_events", "$2::int") + `,
found AS (SELECT namespace FROM tk UNION SELECT namespace FROM qu UNION SELECT namespace FROM ev)
SELECT coalesce(pg_catalog.array_agg(f.namespace ORDER BY f.namespace) FILTER (WHERE f.namespace IS NOT NULL), '{}'::text[]),
    EXISTS (SELECT 1 FROM {{schema}}.tickets h WHERE h.namespace = $1::text)
    OR EXISTS (SELECT 1 FROM {{schema}}.queues h WHERE h.namespace = $1::text)
    OR EXISTS (SELECT 1 FROM {{schema}}.queue_events h WHERE h.namespace = $1::text)
FROM found f`

// warnEmptyNamespace notes, before follow follows the namespace given (or
// the default one) and no key, that the namespace has no executions while
// others have, each with cmd's command line there: a follow of "default"
// when the work is in "payments" prints nothing for as long as it runs.
// Nothing when the lookup fails: it is a courtesy.
func (a *app) warnEmptyNamespace(cmd *cobra.Command) {
	a.warnEmptyOf(cmd, sqlExecutionNamespaces, "executions")
}

// warnEmptyQueueNamespace is warnEmptyNamespace for queue follow with no
// RESOURCE: the namespace has no queue (no ticket, queue row or queue
// history) while others have.
func (a *app) warnEmptyQueueNamespace(cmd *cobra.Command) {
	a.warnEmptyOf(cmd, sqlQueueNamespacesHere, "queues")
}

// warnEmptyOf is the note of warnEmptyNamespace: query (given the
// namespace and maxNamespacesVisited) returns the namespaces that have
// what (a plural) and whether the command's namespace is one of them.
func (a *app) warnEmptyOf(cmd *cobra.Command, query, what string) {
	sql := strings.ReplaceAll(query, "{{schema}}", pgx.Identifier{a.schema}.Sanitize())
	var found []string
	var here bool
	if err := a.pool.QueryRow(cmd.Context(), sql, a.namespace, maxNamespacesVisited).Scan(&found, &here); err != nil || here || len(found) == 0 {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "sentinel: note: namespace %q has no %s yet; the same command where there are:", a.namespace, what)
	a.commandsFor(&b, cmd, found)
	fmt.Fprintf(&b, "\nor every namespace:\n  %s", a.againEvery(cmd))
	for _, line := range strings.Split(b.String(), "\n") {
		fprintln(a.stderr, line)
	}
}
