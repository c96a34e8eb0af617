package sentinel

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// StateCount is the number of executions of one namespace in one state.
// Uncertain executions (executing with an expired lease and no re-run
// left: see Execution.Rerunnable) are counted apart from the other
// executing ones (in progress, or waiting for a re-run by the next caller
// with WithRerun).
type StateCount struct {
	Namespace string
	State     State
	Uncertain bool      // State is executing, the lease expired on the database clock, and no re-run is left
	Count     int64     // executions in this state
	Oldest    time.Time // the earliest UpdatedAt among them: the longest in this state
}

// ExecutionCounts counts executions per namespace and state in one
// statement (a scan of the executions of the namespace, or of every
// namespace when allNamespaces; prune completed ones to keep it cheap).
// Rows come uncertain first, then by namespace and state. ns "" means the
// client's namespace; it must be "" when allNamespaces.
func (c *Client) ExecutionCounts(ctx context.Context, ns string, allNamespaces bool) ([]StateCount, error) {
	switch {
	case allNamespaces && ns != "":
		return nil, invalid("namespace", "give a namespace or all namespaces, not both")
	case allNamespaces:
	case ns == "":
		ns = c.cfg.Namespace
	}
	if ns != "" {
		if err := checkNamespace(ns); err != nil {
			return nil, err
		}
	}
	q := `SELECT namespace, state, uncertain, pg_catalog.count(*), pg_catalog.min(updated_at)
FROM (SELECT namespace, state, updated_at,
        state = 'executing' AND coalesce(lease_expires_at <= pg_catalog.clock_timestamp(), true)
            AND attempt >= max_attempts AS uncertain
      FROM ` + c.sql.schema + `.executions WHERE $1 = '' OR namespace = $1) t
GROUP BY namespace, state, uncertain
ORDER BY uncertain DESC, namespace, state`
	rows, err := c.pool.Query(ctx, q, ns)
	if err != nil {
		return nil, c.wrapErr("count executions", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (StateCount, error) {
		var s StateCount
		err := r.Scan(&s.Namespace, &s.State, &s.Uncertain, &s.Count, &s.Oldest)
		return s, err
	})
	if err != nil {
		return nil, c.wrapErr("count executions", err)
	}
	return out, nil
}
