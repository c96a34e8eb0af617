package sentinel

// This file: Client.Executions: the operator's paged list of executions (ExecutionFilter, its query and its cursor).

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// Limits of Client.Executions.
const (
	DefaultExecutionsLimit = 100  // rows per page when ExecutionFilter.Limit is 0
	MaxExecutionsLimit     = 1000 // the largest ExecutionFilter.Limit accepted
)

// ExecutionFilter selects the executions Client.Executions lists. The zero
// value lists every execution of the client's namespace, a page of
// DefaultExecutionsLimit at a time.
type ExecutionFilter struct {
	// State keeps only executions in this state. Empty: every state.
	State State

	// Uncertain keeps only uncertain executions: executing with a lease
	// that expired on the database clock (their worker crashed, froze or
	// failed), and no re-run left (Execution.Rerunnable is false: the key
	// was not run WithRerun, or used up its attempts). They need an
	// operator (Client.Reconcile). State may be empty or StateExecuting.
	Uncertain bool

	// RerunPending keeps only rerun-pending executions: executing with a
	// lease that expired on the database clock (their worker crashed,
	// froze or failed), and a re-run left (Execution.Rerunnable: the key
	// was run WithRerun and Attempt < MaxAttempts). Nothing runs them
	// until the next Once caller with WithRerun; a caller without it gets
	// ErrUncertain. Among the executing executions whose lease expired,
	// they are exactly those Uncertain leaves out. State may be empty or
	// StateExecuting; not with Uncertain or ResultLost.
	RerunPending bool

	// ResultLost keeps only the completed executions whose result was not
	// stored (fn's value could not be encoded: Execution.ResultError; not
	// a Final outcome): every caller gets ErrResult until an operator
	// stores the value (Client.SetResult). They need an operator too.
	// State may be empty or StateCompleted; not with Uncertain.
	ResultLost bool

	// Namespace lists this namespace. Default: the client's namespace.
	Namespace string

	// AllNamespaces lists every namespace. It cannot be combined with
	// Namespace.
	AllNamespaces bool

	// KeyPrefix keeps only keys starting with it (as LeaseFilter.Prefix):
	// at most MaxKeyLen bytes of UTF-8 without NUL. Empty: every key.
	// Within a namespace the primary key (namespace, key) is read from
	// the prefix on (and only up to its end when the database's collation
	// is C).
	KeyPrefix string

	// UpdatedBefore and UpdatedAfter keep executions whose state was
	// entered (Execution.UpdatedAt) strictly before / strictly after the
	// given time. Zero: no bound.
	UpdatedBefore time.Time
	UpdatedAfter  time.Time

	// Limit is the page size: 1..MaxExecutionsLimit; 0 means
	// DefaultExecutionsLimit.
	Limit int

	// After is the cursor returned with the previous page; empty for the
	// first page. Use it with the same filter.
	After string
}

// Executions lists executions matching f, oldest state change first
// (ordered by Execution.UpdatedAt, then namespace, then key), one page at a
// time. next is the cursor of the following page, empty on the last page.
//
// Paging is by keyset, never by offset: a page costs the same however deep
// it is, and rows inserted or changed while paging do not shift the others.
// An execution that changes state while an operator pages usually moves to
// the end of the order (its UpdatedAt changes), so it may show up once more
// on a later page. Paging is not a snapshot, though: UpdatedAt is the time
// the changing statement started, not when it committed, so a change that
// commits after the pages have moved past that time (its statement waited
// for a row lock, or its commit for a synchronous standby) lands behind the
// cursor, and an execution that matched the filter only after it is
// skipped. So is, with Uncertain or RerunPending, a key whose lease
// expires behind the cursor: becoming uncertain or rerun pending changes
// no row. To see every change, page
// again from the start, or follow the events (Client.Follow), which
// delivers late commits.
//
// Executions not completed (claimed, executing, reconciling: the ones an
// operator looks at) are served by an index of their own, however many
// completed executions the table holds, and so are those of ResultLost.
// Listing completed executions, or
// every state at once, reads the whole namespace's rows in order; prune them
// (Client.Prune).
//
// A bad filter (unknown state, Uncertain or RerunPending with a state
// other than executing, RerunPending with Uncertain or ResultLost,
// ResultLost with Uncertain or a state other than completed, Namespace with AllNamespaces, a KeyPrefix that is not storable text, an empty time range, a limit out
// of range, a cursor that is not one) returns an error matching ErrInvalid.
// A nil ctx is refused (ErrInvalid).
func (c *Client) Executions(ctx context.Context, f ExecutionFilter) ([]Execution, string, error) {
	if err := checkCtx("Client.Executions", ctx); err != nil {
		return nil, "", err
	}
	if err := c.checkOpen(); err != nil {
		return nil, "", err
	}
	q, args, limit, err := c.executionsQuery(f)
	if err != nil {
		return nil, "", err
	}
	rows, err := c.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, "", c.wrapErr("list executions", err)
	}
	defer rows.Close()
	var out []Execution
	for rows.Next() {
		e, err := scanExecution(rows)
		if err != nil {
			return nil, "", c.wrapErr("list executions", err)
		}
		out = append(out, *e)
	}
	if err := rows.Err(); err != nil {
		return nil, "", c.wrapErr("list executions", err)
	}
	if len(out) <= limit {
		return out, "", nil
	}
	out = out[:limit]
	last := out[limit-1]
	return out, encodeCursor(execCursor{At: last.UpdatedAt.UnixMicro(), Namespace: last.Namespace, Key: last.Key}), nil
}

// executionsQuery validates f and builds the listing statement. Only the
// predicates f needs are written into the SQL, so that each shape gets a
// plan of its own; every value is a parameter.
func (c *Client) executionsQuery(f ExecutionFilter) (string, []any, int, error) {
	switch f.State {
	case "", StateClaimed, StateExecuting, StateCompleted, StateReconciling:
	default:
		return "", nil, 0, invalid("State", "must be empty, %q, %q, %q or %q, got %q",
			StateClaimed, StateExecuting, StateCompleted, StateReconciling, f.State)
	}
	if f.Uncertain && f.State != "" && f.State != StateExecuting {
		return "", nil, 0, invalid("Uncertain", "selects executing executions; it cannot be combined with State %q", f.State)
	}
	if f.RerunPending && f.State != "" && f.State != StateExecuting {
		return "", nil, 0, invalid("RerunPending", "selects executing executions; it cannot be combined with State %q", f.State)
	}
	if f.RerunPending && f.Uncertain {
		return "", nil, 0, invalid("RerunPending", "selects executions with a re-run left, Uncertain those with none: give one of them")
	}
	if f.RerunPending && f.ResultLost {
		return "", nil, 0, invalid("RerunPending", "selects executing executions, ResultLost completed ones: give one of them")
	}
	if f.ResultLost && f.Uncertain {
		return "", nil, 0, invalid("ResultLost", "selects completed executions, Uncertain executing ones: give one of them")
	}
	if f.ResultLost && f.State != "" && f.State != StateCompleted {
		return "", nil, 0, invalid("ResultLost", "selects completed executions; it cannot be combined with State %q", f.State)
	}
	if f.AllNamespaces && f.Namespace != "" {
		return "", nil, 0, invalid("Namespace", "must be empty with AllNamespaces, got %q", f.Namespace)
	}
	ns := f.Namespace
	if ns == "" {
		ns = c.cfg.Namespace
	}
	if !f.AllNamespaces {
		if err := checkNamespace(ns); err != nil {
			return "", nil, 0, err
		}
	}
	if len(f.KeyPrefix) > MaxKeyLen || f.KeyPrefix != storableText(f.KeyPrefix) {
		return "", nil, 0, invalid("KeyPrefix", "must be at most %d bytes of UTF-8 without NUL", MaxKeyLen)
	}
	if !f.UpdatedBefore.IsZero() && !f.UpdatedAfter.IsZero() && !f.UpdatedAfter.Before(f.UpdatedBefore) {
		return "", nil, 0, invalid("UpdatedAfter", "must be before UpdatedBefore (%s), got %s",
			f.UpdatedBefore.Format(time.RFC3339Nano), f.UpdatedAfter.Format(time.RFC3339Nano))
	}
	limit := f.Limit
	if limit == 0 {
		limit = DefaultExecutionsLimit
	}
	if limit < 0 || limit > MaxExecutionsLimit {
		return "", nil, 0, invalid("Limit", "must be 1..%d (0 for %d), got %d", MaxExecutionsLimit, DefaultExecutionsLimit, f.Limit)
	}

	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if !f.AllNamespaces {
		where = append(where, "t.namespace = "+arg(ns))
	}
	state := f.State
	if f.Uncertain || f.RerunPending {
		state = StateExecuting
	}
	if f.ResultLost {
		where = append(where, resultLostSQL) // states completed
		state = ""
	}
	if state != "" {
		where = append(where, "t.state = "+arg(string(state)))
		if state != StateCompleted {
			// A constant the planner can match against the partial index
			// executions_open_idx (a parameter could not prove it).
			where = append(where, "t.state <> 'completed'")
		}
	}
	if f.KeyPrefix != "" {
		// The bound gives the primary key (namespace, key) where to start
		// (an extension of a string never sorts before it, in any
		// collation); starts_with ends the range as well under a C
		// collation, and is the test itself under the others.
		p := arg(f.KeyPrefix)
		where = append(where, "t.key >= "+p, "pg_catalog.starts_with(t.key, "+p+")")
	}
	if f.Uncertain {
		where = append(where, "t.lease_expires_at <= pg_catalog.clock_timestamp()", "t.attempt >= t.max_attempts")
	}
	if f.RerunPending {
		where = append(where, "t.lease_expires_at <= pg_catalog.clock_timestamp()", "t.attempt < t.max_attempts")
	}
	if !f.UpdatedBefore.IsZero() {
		where = append(where, "t.updated_at < "+arg(f.UpdatedBefore))
	}
	if !f.UpdatedAfter.IsZero() {
		where = append(where, "t.updated_at > "+arg(f.UpdatedAfter))
	}
	if f.After != "" {
		cur, err := decodeCursor(f.After)
		if err != nil {
			return "", nil, 0, err
		}
		at := time.UnixMicro(cur.At)
		if !f.AllNamespaces && cur.Namespace != ns {
			return "", nil, 0, invalid("After", "is a cursor of namespace %q, not %q; use it with the filter it came from", cur.Namespace, ns)
		}
		// The row comparison matches the index columns in order, so the
		// scan starts at the cursor.
		where = append(where, "(t.updated_at, t.namespace, t.key) > ("+arg(at)+", "+arg(cur.Namespace)+", "+arg(cur.Key)+")")
	}
	q := "SELECT " + execCols + " FROM " + c.sql.schema + ".executions t"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY t.updated_at, t.namespace, t.key"
	q += " LIMIT " + arg(limit+1)
	return q, args, limit, nil
}

// execCursor is the position after the last row of a page. It is handed to
// callers as opaque base64url-encoded JSON.
type execCursor struct {
	At        int64  `json:"u"` // UpdatedAt, µs since the Unix epoch (the database's precision)
	Namespace string `json:"n"`
	Key       string `json:"k"`
}

func encodeCursor(c execCursor) string {
	b, _ := json.Marshal(c) // strings and an int: cannot fail
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (execCursor, error) {
	var c execCursor
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err == nil {
		if e := checkKey(c.Key); e != nil {
			err = e
		} else if e := checkNamespace(c.Namespace); e != nil {
			err = e
		}
	}
	if err != nil {
		return c, invalid("After", "is not a cursor returned by Executions; start again with an empty After")
	}
	return c, nil
}
