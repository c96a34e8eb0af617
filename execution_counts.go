package sentinel

// This file: Client.ExecutionCounts and UncertainCounts: executions counted by state, for status lines and alerts.

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// StateCount is the number of executions of one namespace in one state.
// Uncertain executions (executing with an expired lease and no re-run
// left: see Execution.Rerunnable) and those waiting for a re-run by the
// next caller with WithRerun (RerunPending) are counted apart from the
// executing ones in progress, and keys handed back (claimed with an
// expired lease) apart from the claimed ones still in progress.
type StateCount struct {
	Namespace string
	State     State
	Uncertain bool // State is executing, the lease expired on the database clock, and no re-run is left
	// HandedBack: State is claimed and the lease expired on the database
	// clock. Nothing runs: fn returned a Retryable error, the middleware's
	// NoEffect gave the key back, a caller gave up before fn ran, or an
	// operator reset it. The next caller runs it; safe to retry. Prune
	// removes such keys like completed ones.
	HandedBack bool
	// RerunPending: State is executing, the lease expired on the database
	// clock, and attempts are left (WithRerun, Execution.Rerunnable):
	// nothing runs it now; the next caller with WithRerun runs it again.
	// Counted apart from the executions in progress.
	RerunPending bool
	// ResultLost: State is completed, but fn's result was not stored (it
	// could not be encoded: Execution.ResultError; not a Final outcome):
	// every caller gets ErrResult until an operator stores the value
	// (Client.SetResult). Counted apart from the other completed keys.
	ResultLost bool
	Count      int64 // executions in this state
	// Oldest is the earliest UpdatedAt among them: the longest in this
	// state, except for keys whose lease ended (uncertain, rerun pending,
	// handed back), whose UpdatedAt is when their attempt started (lease
	// renewals do not move it), before they entered the state shown.
	Oldest time.Time
	// OldestSince is the earliest Execution.Since among them, on the
	// database clock: how long the longest has been in this state as the
	// operator's tools show it (sentinel status and list's SINCE, the
	// console). For keys whose lease ended it is the earliest lease end
	// (or UpdatedAt, when that is later); for the other rows it equals
	// Oldest.
	OldestSince time.Time
}

// ExecutionCounts counts executions per namespace and state in one
// statement (a scan of the executions of the namespace, or of every
// namespace when allNamespaces; prune completed ones to keep it cheap).
// Rows come uncertain first, then by namespace and state. ns "" means the
// client's namespace; it must be "" when allNamespaces.
// A nil ctx is refused (ErrInvalid).
func (c *Client) ExecutionCounts(ctx context.Context, ns string, allNamespaces bool) ([]StateCount, error) {
	if err := checkCtx("Client.ExecutionCounts", ctx); err != nil {
		return nil, err
	}
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
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
	q := `SELECT namespace, state, uncertain, handed_back, rerun_pending, result_lost, pg_catalog.count(*), pg_catalog.min(updated_at),
    pg_catalog.min(since)
FROM (SELECT namespace, state, updated_at, ` + sinceSQL + ` AS since, ` + resultLostSQL + ` AS result_lost,
        state = 'executing' AND coalesce(lease_expires_at <= pg_catalog.clock_timestamp(), true)
            AND attempt >= max_attempts AS uncertain,
        state = 'claimed' AND coalesce(lease_expires_at <= pg_catalog.clock_timestamp(), true) AS handed_back,
        state = 'executing' AND coalesce(lease_expires_at <= pg_catalog.clock_timestamp(), true)
            AND attempt < max_attempts AS rerun_pending
      FROM ` + c.sql.schema + `.executions t WHERE $1 = '' OR namespace = $1) t
GROUP BY namespace, state, uncertain, handed_back, rerun_pending, result_lost
ORDER BY uncertain DESC, namespace, state, handed_back, rerun_pending, result_lost`
	rows, err := c.pool.Query(ctx, q, ns)
	if err != nil {
		return nil, c.wrapErr("count executions", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (StateCount, error) {
		var s StateCount
		err := r.Scan(&s.Namespace, &s.State, &s.Uncertain, &s.HandedBack, &s.RerunPending, &s.ResultLost, &s.Count, &s.Oldest, &s.OldestSince)
		return s, err
	})
	if err != nil {
		return nil, c.wrapErr("count executions", err)
	}
	return out, nil
}

// UncertainCounts counts the uncertain executions (executing with a lease
// expired on the database clock and no re-run left) of every namespace that has any, most
// first, in one statement over the index of open executions (completed
// ones are not read, however many there are): cheap enough for a page
// header that tells an operator where attention is needed. Each row has
// State StateExecuting and Uncertain true. AttentionCounts also counts the
// reconciling ones. A nil ctx is refused (ErrInvalid).
func (c *Client) UncertainCounts(ctx context.Context) ([]StateCount, error) {
	if err := checkCtx("Client.UncertainCounts", ctx); err != nil {
		return nil, err
	}
	all, err := c.AttentionCounts(ctx)
	out := all[:0]
	for _, s := range all {
		if s.Uncertain {
			out = append(out, s)
		}
	}
	return out, err
}

// AttentionCounts counts, per namespace, the executions that need an
// operator: the uncertain ones (as UncertainCounts: State StateExecuting,
// Uncertain true), the reconciling ones (State StateReconciling: an
// operator began and has not finished; callers get ErrReconciling
// meanwhile) and the completed ones whose result was not stored (State
// StateCompleted, ResultLost true: callers get ErrResult until an operator
// stores it), in one statement over two small partial indexes (open
// executions, and those with a result error): completed keys are not
// read. Rows come uncertain first, then reconciling, then result lost,
// each kind most first, then by namespace. A nil ctx is refused (ErrInvalid).
func (c *Client) AttentionCounts(ctx context.Context) ([]StateCount, error) {
	if err := checkCtx("Client.AttentionCounts", ctx); err != nil {
		return nil, err
	}
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	// state <> 'completed' lets the planner use the partial index
	// executions_open_idx; result_error IS NOT NULL (in resultLostSQL)
	// executions_result_lost_idx.
	q := `SELECT a.namespace, a.state, a.n, a.oldest, a.oldest_since FROM (
    SELECT t.namespace, t.state, pg_catalog.count(*) AS n, pg_catalog.min(t.updated_at) AS oldest,
        pg_catalog.min(` + sinceSQL + `) AS oldest_since
    FROM ` + c.sql.schema + `.executions t
    WHERE t.state <> 'completed' AND (t.state = 'reconciling'
        OR (t.state = 'executing' AND t.lease_expires_at <= pg_catalog.clock_timestamp() AND t.attempt >= t.max_attempts))
    GROUP BY t.namespace, t.state
  UNION ALL
    SELECT t.namespace, t.state, pg_catalog.count(*), pg_catalog.min(t.updated_at), pg_catalog.min(t.updated_at)
    FROM ` + c.sql.schema + `.executions t
    WHERE ` + resultLostSQL + `
    GROUP BY t.namespace, t.state) a
ORDER BY a.state = 'executing' DESC, a.state = 'reconciling' DESC, a.n DESC, a.namespace`
	rows, err := c.pool.Query(ctx, q)
	if err != nil {
		return nil, c.wrapErr("count executions needing an operator", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (StateCount, error) {
		var s StateCount
		err := r.Scan(&s.Namespace, &s.State, &s.Count, &s.Oldest, &s.OldestSince)
		s.Uncertain = s.State == StateExecuting
		s.ResultLost = s.State == StateCompleted
		return s, err
	})
	if err != nil {
		return nil, c.wrapErr("count executions needing an operator", err)
	}
	return out, nil
}

// resultLostSQL is true for an execution over alias t that completed
// without its result (StateCount.ResultLost, ExecutionFilter.ResultLost):
// its test of result_error lets the planner use executions_result_lost_idx.
const resultLostSQL = `(t.state = 'completed' AND t.result_error IS NOT NULL AND t.final_error IS NULL)`

// sinceSQL is Execution.Since of an execution over alias t, on the
// database clock: for a key claimed or executing whose lease has ended,
// the later of its lease's end and updated_at; else updated_at.
const sinceSQL = `(CASE WHEN t.state IN ('executing', 'claimed') AND t.lease_expires_at <= pg_catalog.clock_timestamp()
        THEN GREATEST(t.lease_expires_at, t.updated_at) ELSE t.updated_at END)`
