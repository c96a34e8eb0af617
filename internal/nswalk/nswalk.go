// Package nswalk finds the namespaces of a schema's table that hold a
// name (a Once key, an election group), along the table's primary key:
// one index probe per namespace, never a scan of its rows. The operator
// command and the console use it to say where a name is when it is not in
// the namespace asked for.
package nswalk

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Walk is a recursive CTE named cte(namespace, n) that lists the
// distinct namespaces of table {{schema}}.table, in order, along an index
// that starts with its namespace (every table's primary key does): one
// probe per namespace, the next namespace above the last one (a loose
// index scan), so its cost grows with the namespaces, never with the
// rows. n numbers them; with limit (an SQL expression) set, the walk stops
// after limit namespaces. Its last row's namespace is NULL unless it
// stopped there.
func Walk(cte, table, limit string) string {
	stop := ""
	if limit != "" {
		stop = " AND " + cte + ".n < " + limit
	}
	return cte + `(namespace, n) AS (
    (SELECT x.namespace, 1 FROM {{schema}}.` + table + ` x ORDER BY x.namespace LIMIT 1)
    UNION ALL
    SELECT (SELECT x.namespace FROM {{schema}}.` + table + ` x WHERE x.namespace > ` + cte + `.namespace ORDER BY x.namespace LIMIT 1),
        ` + cte + `.n + 1
    FROM ` + cte + ` WHERE ` + cte + `.namespace IS NOT NULL` + stop + `
)`
}

// sqlElsewhere lists the namespaces other than $2 in which {{table}} has a
// row for $1 ({{column}}): it walks the table's namespaces (Walk, at most
// $3 of them) and probes (namespace, $1) in each; a sequential scan for
// the name would read every row. It returns the namespaces found, in
// order, whether the walk stopped at $3 before the last namespace, and
// whether $2 has a row for $1.
var sqlElsewhere = `
WITH RECURSIVE ` + Walk("ns", "{{table}}", "$3::int") + `
SELECT coalesce(pg_catalog.array_agg(ns.namespace ORDER BY ns.namespace) FILTER (WHERE ns.namespace <> $2::text
        AND EXISTS (SELECT 1 FROM {{schema}}.{{table}} e WHERE e.namespace = ns.namespace AND e.{{column}} = $1::text)),
        '{}'::text[]),
    coalesce(pg_catalog.bool_or(ns.n = $3::int AND ns.namespace IS NOT NULL), false),
    EXISTS (SELECT 1 FROM {{schema}}.{{table}} h WHERE h.namespace = $2::text AND h.{{column}} = $1::text)
FROM ns`

// Querier runs the lookup: a pool, a connection or a transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Elsewhere returns the namespaces other than ns in which table (of
// schema; its primary key starts (namespace, column)) has a row whose
// column is name, in order, looking in at most max namespaces; capped
// says the walk stopped there with namespaces left, here whether ns has
// such a row. table and column are the caller's constants, never input.
func Elsewhere(ctx context.Context, q Querier, schema, table, column, name, ns string, max int) (found []string, capped, here bool, err error) {
	sql := strings.NewReplacer("{{schema}}", pgx.Identifier{schema}.Sanitize(), "{{table}}", table,
		"{{column}}", column).Replace(sqlElsewhere)
	err = q.QueryRow(ctx, sql, name, ns, max).Scan(&found, &capped, &here)
	return found, capped, here, err
}
