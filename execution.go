package sentinel

// This file: the execution record of a Once key (State, Execution, Event, their columns and scanning, readExecution), Inspect, History and Prune.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// State is the state of a Once key. See the package documentation for the
// state machine.
type State string

// Execution states.
const (
	StateClaimed     State = "claimed"     // claimed, not started: safe to run
	StateExecuting   State = "executing"   // side effects may be in flight
	StateCompleted   State = "completed"   // result stored and replayed
	StateReconciling State = "reconciling" // an operator is establishing the truth
)

// Execution is the stored record of a Once key.
type Execution struct {
	Namespace      string
	Key            string
	State          State
	Owner          string    // the worker (or operator) that last claimed it
	Host           string    // Owner's host (its Config.Host): the operator's after Reconcile, ForceComplete or ResetToClaimed, like Owner
	PID            int       // Owner's process id (Config.PID), likewise; the worker's host and pid stay in that event's Metadata (previous_host, previous_pid)
	Token          int64     // fencing token of the current claim
	CreatedAt      time.Time // database clock
	UpdatedAt      time.Time // when State was entered (an attempt's start for executing: renewals do not move it); see Since
	LeaseExpiresAt time.Time // zero when no lease (completed, reconciling)
	HardExpiresAt  time.Time // zero when none
	CompletedAt    time.Time // zero until completed
	LeaseAlive     bool      // LeaseExpiresAt is in the future on the database clock
	Result         []byte    // the encoded result, when completed
	ResultError    string    // set when fn succeeded but its result could not be stored (see SetResult)
	FinalError     string    // set when fn returned Final(err): the outcome, replayed as ErrFinal
	// ResultByOperator is true when an operator stored Result
	// (ForceComplete, SetResult) rather than fn. Such a value is replayed
	// strictly: one that does not decode into the caller's type without
	// unknown or missing fields is an error matching ErrResult for the
	// caller, never a zero value (see RegisterResultType).
	ResultByOperator bool

	// Attempt is the run of fn under Token: 1 for the first run of the
	// key, and for a run that took over a claimed key (nothing was in
	// flight); each re-run after an attempt stopped without an outcome
	// (Once with WithRerun) adds one. Above 1, an earlier attempt may have
	// had its effect: the key is never handed back as claimed then (see
	// WithRerun). MaxAttempts is the most attempts the key may have: the
	// WithRerun bound of the caller that started the current attempt,
	// lowered by every re-run's caller (1 without WithRerun: no re-run).
	Attempt     int
	MaxAttempts int

	remaining time.Duration // lease time left, per the database
}

// Rerunnable reports whether the executor of e stopped without an outcome
// (executing, its lease expired on the database clock) and a Once caller
// with WithRerun will run fn again, because attempts are left (Attempt <
// MaxAttempts). Such a key needs no operator; a caller without WithRerun
// still gets ErrUncertain for it. An executing key with an expired lease
// that is not rerunnable is uncertain.
func (e *Execution) Rerunnable() bool {
	return e.State == StateExecuting && !e.LeaseAlive && e.Attempt < e.MaxAttempts
}

// Since returns when e entered the state the operator's tools show it in
// (sentinel status, list and inspect, the console, the idempotency
// package), on the database clock. For a key claimed or executing whose
// lease has ended (LeaseAlive false: uncertain, rerun pending, or handed
// back by a caller that gave up before fn ran) that is when the lease
// ended, LeaseExpiresAt: UpdatedAt is when the attempt started, earlier by
// as long as fn ran, since lease renewals do not move it. When UpdatedAt
// is the later of the two (the key was handed back or reset after its
// lease ended) it is UpdatedAt. For every other key (running, completed,
// reconciling) it is UpdatedAt.
func (e *Execution) Since() time.Time {
	if (e.State == StateExecuting || e.State == StateClaimed) && !e.LeaseAlive && e.LeaseExpiresAt.After(e.UpdatedAt) {
		return e.LeaseExpiresAt
	}
	return e.UpdatedAt
}

// LeaseLeft returns how long e's lease had left when e was read, on the
// database clock (negative once expired, zero without a lease). Unlike
// LeaseExpiresAt, it needs no clock of the reader's: a program that waits
// for the expiry (the console's page) counts it down on its own
// monotonic clock, whatever the offset of its wall clock.
func (e *Execution) LeaseLeft() time.Duration { return e.remaining }

// ResultLost reports whether e completed without its result: fn's value
// could not be encoded (ResultError) and it was not a Final outcome, so
// every caller gets ErrResult until an operator stores the value
// (Client.SetResult). ExecutionFilter.ResultLost lists such executions.
func (e *Execution) ResultLost() bool {
	return e.State == StateCompleted && e.ResultError != "" && e.FinalError == ""
}

// EffectKey returns the reference EffectKey gives fn for e's key (every
// attempt of it): what fn passed to a provider that deduplicates by it,
// for an operator who looks the charge up there (sentinel inspect prints
// it). It depends only on e's namespace and key.
func (e *Execution) EffectKey() string { return effectKey(e.Namespace, e.Key) }

// execCols are the columns scanned by scanExecution, over alias t.
const execCols = `t.namespace, t.key, t.state, t.owner, t.host, t.pid, t.token, t.created_at, t.updated_at,
    t.lease_expires_at, t.hard_expires_at, t.completed_at, t.result, t.result_error, t.final_error, t.result_by_operator,
    coalesce(t.lease_expires_at > pg_catalog.clock_timestamp(), false) AS lease_alive,
    coalesce(t.lease_expires_at - pg_catalog.statement_timestamp(), interval '0') AS lease_left,
    t.attempt, t.max_attempts`

// execColsOf are the names of execCols's columns, over alias g (a relation
// of execCols's output).
const execColsOf = `g.namespace, g.key, g.state, g.owner, g.host, g.pid, g.token, g.created_at, g.updated_at,
    g.lease_expires_at, g.hard_expires_at, g.completed_at, g.result, g.result_error, g.final_error, g.result_by_operator,
    g.lease_alive, g.lease_left, g.attempt, g.max_attempts`

func scanExecution(row pgx.Row, prefix ...any) (*Execution, error) {
	var e Execution
	var n execNulls
	if err := row.Scan(append(prefix, execDest(&e, &n)...)...); err != nil {
		return nil, err
	}
	n.set(&e)
	return &e, nil
}

// execNulls holds execCols's nullable columns as scanned, for setNullable.
type execNulls struct {
	lease, hard, done *time.Time
	resErr, finalErr  *string
}

func (n *execNulls) set(e *Execution) { e.setNullable(n.lease, n.hard, n.done, n.resErr, n.finalErr) }

// execDest are the destinations of execCols for e, the nullable ones in n.
func execDest(e *Execution, n *execNulls) []any {
	return []any{&e.Namespace, &e.Key, &e.State, &e.Owner, &e.Host, &e.PID, &e.Token, &e.CreatedAt, &e.UpdatedAt,
		&n.lease, &n.hard, &n.done, &e.Result, &n.resErr, &n.finalErr, &e.ResultByOperator, &e.LeaseAlive, &e.remaining,
		&e.Attempt, &e.MaxAttempts}
}

// setNullable sets e's fields from the nullable columns scanned for them
// (nil: NULL, the zero value).
func (e *Execution) setNullable(lease, hard, done *time.Time, resErr, finalErr *string) {
	if lease != nil {
		e.LeaseExpiresAt = *lease
	}
	if hard != nil {
		e.HardExpiresAt = *hard
	}
	if done != nil {
		e.CompletedAt = *done
	}
	if resErr != nil {
		e.ResultError = *resErr
	}
	if finalErr != nil {
		e.FinalError = *finalErr
	}
}

// Event is one entry of a key's history.
type Event struct {
	ID        int64
	Namespace string
	Key       string
	Type      string // what happened: claimed, started, completed, failed, retryable, rolled_back, reconciling, force_completed, reset, ...
	State     State  // the state after the event
	Token     int64
	Owner     string
	At        time.Time // database clock
	Metadata  map[string]any

	// Event is Type under its name before 0.2, set to the same value in
	// every Event this package returns.
	//
	// Deprecated: use Type. Event will be removed in 1.0.
	Event string

	// Cursor is set on events delivered by Client.Follow: the exact
	// position after this event, to pass as FollowFilter.Cursor to resume
	// with nothing missed and nothing repeated. Empty elsewhere.
	Cursor string
}

// PreviousHolder is the process a transition took a key from, as its
// history event records it in Metadata: previous_owner, previous_host,
// previous_pid and previous_token. Reconcile, ForceComplete and
// ResetToClaimed record it (the stopped worker for a reconciling event,
// the reconciling operator for the step that resolves it), so where a
// stopped attempt ran stays in the history after the row names the
// operator. A rerun event (WithRerun) records the owner and token of the
// attempt it re-runs, without host and pid.
type PreviousHolder struct {
	Owner string // the previous owner (its Config.Owner)
	Host  string // its Config.Host; "" when not recorded
	PID   int    // its Config.PID; 0 when not recorded
	Token int64  // the token it held, when the transition minted a new one (Reconcile); 0 otherwise
}

// PreviousHolder returns the process the event's transition took the key
// from, read from its Metadata (see type PreviousHolder), and true; false
// for an event that records none (most events, and a reconciling event
// written before Reconcile recorded it).
func (e Event) PreviousHolder() (PreviousHolder, bool) {
	owner, ok := e.Metadata["previous_owner"].(string)
	if !ok {
		return PreviousHolder{}, false
	}
	p := PreviousHolder{Owner: owner}
	p.Host, _ = e.Metadata["previous_host"].(string)
	if n, ok := metadataInt(e.Metadata["previous_pid"]); ok {
		p.PID = int(n)
	}
	if n, ok := metadataInt(e.Metadata["previous_token"]); ok {
		p.Token = n
	}
	return p, true
}

// metadataInt returns an integer of an event's metadata as decodeMetadata
// decodes it: a float64, or a json.Number beyond 2^53.
func metadataInt(v any) (int64, bool) {
	switch v := v.(type) {
	case float64:
		return int64(v), v == float64(int64(v))
	case json.Number:
		n, err := v.Int64()
		return n, err == nil
	}
	return 0, false
}

type execSQL struct {
	read, claim, finish, finishTx, operator, insertEvent, history, lastRun, prune, watch, unwatch, setResult string
	claimSet, finishSet, readSet                                                                             string
	pruneQueuesLock, pruneQueues                                                                             string
}

func newExecSQL(schema string) *execSQL {
	r := strings.NewReplacer("{{schema}}", schema, "{{seq}}", seqLiteral(schema), "{{cols}}", execCols, "{{gcols}}", execColsOf,
		"{{ccols}}", strings.ReplaceAll(execColsOf, "g.", "c."))
	return &execSQL{
		read:            r.Replace(sqlReadExecution),
		claim:           r.Replace(sqlClaim),
		finish:          strings.NewReplacer("{{waited}}", finishWaited, "{{waitedcol}}", finishWaitedCol).Replace(r.Replace(sqlFinish)),
		finishTx:        strings.NewReplacer("{{waited}}", finishTxNotify, "{{waitedcol}}", finishTxWaitedCol).Replace(r.Replace(sqlFinish)),
		claimSet:        r.Replace(sqlClaimSet),
		readSet:         r.Replace(sqlReadSet),
		finishSet:       r.Replace(sqlFinishSet),
		operator:        r.Replace(sqlOperator),
		insertEvent:     r.Replace(sqlInsertEvent),
		history:         r.Replace(sqlHistory),
		lastRun:         r.Replace(sqlLastRun),
		prune:           r.Replace(sqlPrune),
		pruneQueuesLock: r.Replace(sqlPruneQueuesLock), pruneQueues: r.Replace(sqlPruneQueues),
		watch:     r.Replace(sqlWatch),
		unwatch:   r.Replace(sqlUnwatch),
		setResult: r.Replace(sqlSetResult),
	}
}

const sqlReadExecution = `SELECT {{cols}} FROM {{schema}}.executions t WHERE t.namespace = $1 AND t.key = $2`

const sqlInsertEvent = `
INSERT INTO {{schema}}.events (namespace, key, event, state, token, owner, metadata)
VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb)`

// sqlHistory reads a key's events newest first, at most $3 of them (NULL:
// all), by events_key_idx (namespace, key, id) read backwards: a limited
// read costs its limit, however long the key's history.
const sqlHistory = `
SELECT id, namespace, key, event, state, token, owner, at, metadata
FROM {{schema}}.events WHERE namespace = $1 AND key = $2 ORDER BY id DESC LIMIT $3`

// sqlLastRun reads the events of a key's latest run, oldest first: from
// its newest claimed event on (every event when none is left), without
// the records of callers turned away or replayed (Config.RecordRejections),
// which a key in progress, uncertain or completed gathers without bound.
// Both reads go by events_key_idx: the claimed event backwards from the
// key's newest event, then forwards from it; neither reads earlier runs.
// Rejection records after the claim are passed over on the server, not
// sent.
const sqlLastRun = `
SELECT e.id, e.namespace, e.key, e.event, e.state, e.token, e.owner, e.at, e.metadata
FROM {{schema}}.events e
WHERE e.namespace = $1 AND e.key = $2 AND e.event <> 'replayed' AND e.event <> 'rejected'
  AND e.id >= coalesce((SELECT c.id FROM {{schema}}.events c
      WHERE c.namespace = $1 AND c.key = $2 AND c.event = 'claimed' ORDER BY c.id DESC LIMIT 1), 0)
ORDER BY e.id`

// sqlPrune deletes completed executions and keys handed back (claimed, no
// live lease) unchanged for $1 (µs), history events older than $1, and
// lease rows expired for longer than $1 and at least an hour, in one
// statement. The history of a key that is neither completed nor handed
// back (uncertain, reconciling, in flight) is kept: an operator needs it.
// $2 limits it to a namespace (” = all).
//
// The same statement prunes the queue and election tables (issue 17.9):
// queue events older than $1, except those of a ticket still in the
// queue; dead tickets expired for longer than $1 and at least an hour
// (recorded as `crashed`/`bumped`, as ResetQueue does: a dead ticket is
// skipped by anyone behind it, so removing it changes no turn); leader
// rows and member rows expired for longer than $1 and at least an hour. A
// live row (a live ticket, the current leader, a running elector's
// member row) has expires_at in the future and is never touched; an
// expired row is never revived (every renewal is guarded by expires_at >
// clock_timestamp() under the row lock, which this DELETE also takes and
// re-checks), and every term and ticket is minted from the non-cycling
// fencing_token sequence, so a later grant never reuses a pruned number.
const sqlPrune = `
WITH x AS (
    DELETE FROM {{schema}}.executions t
    WHERE t.state = 'completed' AND t.completed_at < pg_catalog.statement_timestamp() - $1::bigint * interval '1 microsecond'
      AND ($2 = '' OR t.namespace = $2)
    RETURNING 1
),
hb AS (
    -- Keys handed back (claimed, lease over: Retryable, NoEffect, a
    -- caller that gave up before fn ran), unchanged for $1. The DELETE
    -- locks the row and re-checks the predicate on its newest version, so
    -- a claim taking the key over meanwhile (which moves it to executing,
    -- or renews the lease) is never deleted; a claim that comes after
    -- finds no row and inserts one, as for a new key.
    DELETE FROM {{schema}}.executions t
    WHERE t.state = 'claimed' AND t.state <> 'completed'
      AND t.lease_expires_at <= pg_catalog.clock_timestamp()
      AND t.updated_at < pg_catalog.statement_timestamp() - $1::bigint * interval '1 microsecond'
      AND ($2 = '' OR t.namespace = $2)
    RETURNING 1
),
e AS (
    DELETE FROM {{schema}}.events t
    WHERE t.at < pg_catalog.statement_timestamp() - $1::bigint * interval '1 microsecond'
      AND ($2 = '' OR t.namespace = $2)
      AND NOT EXISTS (SELECT 1 FROM {{schema}}.executions k
          WHERE k.namespace = t.namespace AND k.key = t.key AND k.state <> 'completed'
            AND NOT (k.state = 'claimed' AND k.lease_expires_at <= pg_catalog.clock_timestamp()))
    RETURNING 1
),
l AS (
    DELETE FROM {{schema}}.leases t
    WHERE t.expires_at < pg_catalog.statement_timestamp() - greatest($1::bigint * interval '1 microsecond', interval '1 hour')
      AND ($2 = '' OR t.namespace = $2)
    RETURNING 1
),
qe AS (
    DELETE FROM {{schema}}.queue_events t
    WHERE t.at < pg_catalog.statement_timestamp() - $1::bigint * interval '1 microsecond'
      AND ($2 = '' OR t.namespace = $2)
      AND NOT EXISTS (SELECT 1 FROM {{schema}}.tickets k
          WHERE k.namespace = t.namespace AND k.resource = t.resource AND k.ticket = t.ticket)
    RETURNING 1
),
qt AS (
    DELETE FROM {{schema}}.tickets t
    WHERE t.expires_at < pg_catalog.statement_timestamp() - greatest($1::bigint * interval '1 microsecond', interval '1 hour')
      AND ($2 = '' OR t.namespace = $2)
    RETURNING t.namespace, t.resource, t.ticket, t.label, t.owner, t.served_at IS NOT NULL AS served
),
qtev AS (
    INSERT INTO {{schema}}.queue_events (namespace, resource, ticket, event, label, owner)
    SELECT d.namespace, d.resource, d.ticket, CASE WHEN d.served THEN 'crashed' ELSE 'bumped' END, d.label, d.owner FROM qt d
    RETURNING 1
),
ld AS (
    DELETE FROM {{schema}}.leaders t
    WHERE t.expires_at < pg_catalog.statement_timestamp() - greatest($1::bigint * interval '1 microsecond', interval '1 hour')
      AND ($2 = '' OR t.namespace = $2)
    RETURNING 1
),
mb AS (
    DELETE FROM {{schema}}.members t
    WHERE t.expires_at < pg_catalog.statement_timestamp() - greatest($1::bigint * interval '1 microsecond', interval '1 hour')
      AND ($2 = '' OR t.namespace = $2)
    RETURNING 1
),
lw AS (
    -- Lease waiters' registrations long expired (their waiter died or
    -- stopped without withdrawing; a live waiter renews its own, and an
    -- expired one is never granted, see sqlRelease).
    DELETE FROM {{schema}}.lease_waiters t
    WHERE t.expires_at < pg_catalog.statement_timestamp() - greatest($1::bigint * interval '1 microsecond', interval '1 hour')
      AND ($2 = '' OR t.namespace = $2)
),
qf AS (
    -- Follower registrations long expired (see FollowQueues); a later
    -- event or registration creates the row again.
    DELETE FROM {{schema}}.queue_followers t
    WHERE t.following_until < pg_catalog.statement_timestamp() - greatest($1::bigint * interval '1 microsecond', interval '1 hour')
      AND ($2 = '' OR t.namespace = $2)
)
SELECT (SELECT pg_catalog.count(*) FROM x), (SELECT pg_catalog.count(*) FROM e), (SELECT pg_catalog.count(*) FROM l),
    (SELECT pg_catalog.count(*) FROM qe), (SELECT pg_catalog.count(*) FROM qt), (SELECT pg_catalog.count(*) FROM qtev),
    (SELECT pg_catalog.count(*) FROM ld), (SELECT pg_catalog.count(*) FROM mb), (SELECT pg_catalog.count(*) FROM hb)`

// sqlPruneQueuesLock locks the queue rows of resources drawn before $1
// (µs) ago that have no ticket, and returns their names: the first step
// of pruning the queues table, in a transaction with sqlPruneQueues.
// FOR UPDATE waits for a draw in progress on the row; from then on no
// draw can add a ticket to the resource until the transaction ends (a
// draw locks the row before it inserts its ticket).
// $1 retention µs, $2 namespace (” = all).
const sqlPruneQueuesLock = `
SELECT q.namespace, q.resource FROM {{schema}}.queues q
WHERE q.created_at < pg_catalog.statement_timestamp() - greatest($1::bigint * interval '1 microsecond', interval '1 hour')
  AND ($2 = '' OR q.namespace = $2)
  AND NOT EXISTS (SELECT 1 FROM {{schema}}.tickets k WHERE k.namespace = q.namespace AND k.resource = q.resource)
FOR UPDATE OF q`

// sqlPruneQueues deletes the queue rows locked by sqlPruneQueuesLock that
// still have no ticket. Its snapshot is taken after the locks were
// granted, so it sees every ticket drawn on them: a queue row with a
// ticket is never removed (the next leave locks that row to decide whom to
// wake; see Turn.leave). A draw that waited for the lock finds the row
// gone and makes it again in the same statement
// (TestDrawWhilePruneDeletesTheQueueRow).
// $1 namespaces, $2 resources.
const sqlPruneQueues = `
DELETE FROM {{schema}}.queues q
USING ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[])) AS p(namespace, resource)
WHERE q.namespace = p.namespace AND q.resource = p.resource
  AND NOT EXISTS (SELECT 1 FROM {{schema}}.tickets k WHERE k.namespace = q.namespace AND k.resource = q.resource)`

// metadataJSON encodes event metadata as JSON text that jsonb stores (see
// storableJSON); no metadata is nil (SQL NULL). Text, not []byte: without
// prepared statements (PgBouncer) pgx would send a []byte as bytea, which
// is not valid JSON.
func metadataJSON(base map[string]any, extra ...any) (any, error) {
	if len(base) == 0 && len(extra) == 0 {
		return nil, nil
	}
	m := make(map[string]any, len(base)+len(extra)/2)
	for k, v := range base {
		m[k] = v
	}
	for i := 0; i+1 < len(extra); i += 2 {
		m[fmt.Sprint(extra[i])] = extra[i+1]
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, invalid("metadata", "cannot be encoded as JSON: %v", err)
	}
	return string(storableJSON(b)), nil // see storable.go
}

// Inspect returns the execution record of key, or an error matching
// ErrNotFound. Options: WithNamespace; WithToken and WithMetadata, which
// guard and annotate an operator's writes, are taken and have no effect,
// so that one set of options serves the read and the writes after it.
// A nil ctx is refused (ErrInvalid).
func (c *Client) Inspect(ctx context.Context, key string, opts ...Option) (*Execution, error) {
	if err := checkCtx("Client.Inspect", ctx); err != nil {
		return nil, err
	}
	o, err := c.resolve(key, opts, onlyTakes("Inspect", takesMetadata|takesToken))
	if err != nil {
		return nil, err
	}
	return c.readExecution(ctx, o.namespace, key)
}

func (c *Client) readExecution(ctx context.Context, ns, key string) (*Execution, error) {
	e, err := scanExecution(c.co.queryRow(ctx, ctx, coRead, c.exe.read, ns, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("sentinel: execution %q/%q: %w", ns, key, ErrNotFound)
	}
	if err != nil {
		return nil, c.wrapErr(fmt.Sprintf("read execution %q/%q", ns, key), err)
	}
	return e, nil
}

// committed reads, on a fresh bounded context and retrying transient
// errors, whether key is completed at token.
func (c *Client) committed(ctx context.Context, ns, key string, token int64) (bool, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ReleaseTimeout)
	defer cancel()
	for {
		ex, err := c.readExecution(rctx, ns, key)
		if err == nil {
			return ex.State == StateCompleted && ex.Token == token, nil
		}
		if !transient(err) || rctx.Err() != nil {
			return false, err
		}
		select {
		case <-rctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// History returns key's events, oldest first. Options: WithNamespace, and
// WithLimit to read only the newest events: a key's history has no bound
// (a run per Retryable attempt, an event per caller turned away with
// Config.RecordRejections), and without WithLimit all of it is read. For
// what the history says about the key's current state, LastRun reads less.
// A nil ctx is refused (ErrInvalid).
func (c *Client) History(ctx context.Context, key string, opts ...Option) ([]Event, error) {
	if err := checkCtx("Client.History", ctx); err != nil {
		return nil, err
	}
	o, err := c.resolveCall(key, opts, func(o callOptions) error {
		switch {
		case o.rerunSet:
			return invalid("option", "WithRerun applies only to Once")
		case o.labelSet || o.afterSet:
			return invalid("option", "WithLabel and WithAfterEvent do not apply to History")
		}
		return o.only("History", 0)
	})
	switch {
	case err != nil:
		return nil, err
	case o.limitSet && o.limit < 1:
		return nil, invalid("WithLimit", "must be at least 1, got %d", o.limit)
	}
	var limit *int64
	if o.limitSet {
		n := int64(o.limit)
		limit = &n
	}
	evs, err := c.events(ctx, c.exe.history, o.namespace, key, limit)
	if err != nil {
		return nil, c.wrapErr(fmt.Sprintf("history %q/%q", o.namespace, key), err)
	}
	slices.Reverse(evs)
	return evs, nil
}

// WithLimit makes History return only key's newest n events (still oldest
// first); n must be at least 1. Other calls refuse it.
func WithLimit(n int) Option { return func(o *callOptions) { o.limit, o.limitSet = n, true } }

// LastRun returns the events of key's latest run, oldest first: its newest
// claimed event (with the metadata the claiming call recorded, such as
// the request of an Idempotency-Key) and every event after it: started,
// the outcome or a completion_refused event with fn's result, the
// reconciliation steps since. It leaves out the records of callers turned
// away or replayed (replayed, rejected: Config.RecordRejections), which
// gather without bound on a key many callers retry. A key whose claimed
// events were all pruned returns its remaining events. The read costs the
// latest run's events (its rejection records are passed over on the
// server, not sent), not the key's earlier runs (see History).
// Options: WithNamespace; WithToken and WithMetadata are taken and have no
// effect, as for Inspect. A nil ctx is refused (ErrInvalid).
func (c *Client) LastRun(ctx context.Context, key string, opts ...Option) ([]Event, error) {
	if err := checkCtx("Client.LastRun", ctx); err != nil {
		return nil, err
	}
	o, err := c.resolve(key, opts, onlyTakes("LastRun", takesMetadata|takesToken))
	if err != nil {
		return nil, err
	}
	evs, err := c.events(ctx, c.exe.lastRun, o.namespace, key)
	if err != nil {
		return nil, c.wrapErr(fmt.Sprintf("last run of %q/%q", o.namespace, key), err)
	}
	return evs, nil
}

// events runs a statement returning events (sqlHistory's columns).
func (c *Client) events(ctx context.Context, sql string, args ...any) ([]Event, error) {
	rows, err := c.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) {
		var e Event
		var meta []byte
		if err := r.Scan(&e.ID, &e.Namespace, &e.Key, &e.Type, &e.State, &e.Token, &e.Owner, &e.At, &meta); err != nil {
			return e, err
		}
		e.Event = e.Type
		var err error
		e.Metadata, err = decodeMetadata(meta)
		return e, err
	})
}

// PruneResult counts what Prune deleted.
type PruneResult struct {
	Executions int64 // completed executions
	HandedBack int64 // keys handed back: claimed with no live lease (Retryable, NoEffect, a caller that gave up before fn ran)
	Events     int64 // history events
	Leases     int64 // expired lease rows

	QueueEvents int64 // queue progression events (those written by this Prune for the dead tickets it removed not included)
	Tickets     int64 // dead tickets (expired, not skipped by anyone)
	Queues      int64 // queue rows of resources without any ticket
	Leaders     int64 // expired leader rows (elections nobody has led since)
	Members     int64 // expired member rows (electors that stopped or died)
}

// MinRetention is the shortest olderThan Prune accepts. Pruning a
// completed key forgets that its work was done: a redelivered event for it
// runs fn again. Keep completed keys for at least as long as an event can be
// redelivered.
const MinRetention = time.Hour

// Prune deletes, in one statement: completed executions whose completion is
// older than olderThan; keys handed back (state claimed with no live lease:
// fn returned a Retryable error, the middleware's NoEffect, a caller that
// gave up before fn ran, an operator's ResetToClaimed) whose last change is
// older than olderThan, as safe to forget as a key never run; history
// events older than olderThan, except those of keys uncertain, reconciling
// or in flight; and lease rows expired for longer than olderThan
// and at least an hour (a key's row is what makes each grant mint its token
// under a row lock; the hour keeps any statement still in flight from seeing
// the key as new). Executions in any other state are never pruned: an
// uncertain key stays until an operator resolves it, and a key claimed
// with a live lease is running.
//
// The same statement prunes the queues and elections: queue events older
// than olderThan, except those of a ticket still in its queue; dead
// tickets (expired, never skipped because nobody queued behind them)
// expired for longer than olderThan and at least an hour, each recorded as
// `crashed` or `bumped` like ResetQueue; leader rows and member rows
// expired for longer than olderThan and at least an hour. Live rows (a
// live ticket, the current leader, a running elector) are never pruned.
// Lease waiters' registrations are deleted once expired for longer than
// olderThan and at least an hour (a live waiter renews its own).
// Then, in a short transaction of its own, it removes the queue rows of
// resources first drawn before olderThan (and at least an hour ago) that
// have no ticket left; the next Turn on such a resource creates its row
// again.
//
// A pruned key can run again: the next Once for it finds no record and runs
// fn. Choose olderThan longer than any redelivery window (for example 7
// days); it must be at least MinRetention, otherwise Prune returns ErrInvalid
// and deletes nothing. Sentinel prunes nothing by itself; call Prune
// periodically.
//
// Prune acts on the client's namespace, or the one given by WithNamespace;
// every namespace only with WithAllNamespaces.
// A nil ctx is refused (ErrInvalid).
func (c *Client) Prune(ctx context.Context, olderThan time.Duration, opts ...Option) (PruneResult, error) {
	if err := checkCtx("Client.Prune", ctx); err != nil {
		return PruneResult{}, err
	}
	var res PruneResult
	if err := c.checkOpen(); err != nil {
		return res, err
	}
	if olderThan < MinRetention {
		return res, invalid("olderThan", "must be at least MinRetention (%s), got %s: pruning a completed key lets a redelivered event run again", MinRetention, olderThan)
	}
	o := callOptions{namespace: c.cfg.Namespace}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.ttlSet || o.hardSet || o.wait || o.force || o.codec != nil || o.metadata != nil || o.token != 0 || o.rerunSet || o.limitSet || o.labelSet || o.afterSet {
		return res, invalid("option", "only WithNamespace or WithAllNamespaces apply to Prune")
	}
	ns := o.namespace
	if o.allNamespaces {
		if o.namespaceSet {
			return res, invalid("option", "WithNamespace and WithAllNamespaces exclude each other")
		}
		ns = ""
	} else if err := checkNamespace(ns); err != nil {
		return res, err
	}
	var recorded int64
	err := c.pool.QueryRow(ctx, c.exe.prune, us(olderThan), ns).Scan(&res.Executions, &res.Events, &res.Leases,
		&res.QueueEvents, &res.Tickets, &recorded, &res.Leaders, &res.Members, &res.HandedBack)
	if err != nil {
		return res, c.wrapErr("prune", err)
	}
	if res.Queues, err = c.pruneQueues(ctx, olderThan, ns); err != nil {
		return res, c.wrapErr("prune queues", err)
	}
	return res, nil
}

// pruneQueues removes the queue rows without tickets, in a transaction of
// two statements (lock, then delete with a snapshot taken after the locks;
// see sqlPruneQueuesLock).
func (c *Client) pruneQueues(ctx context.Context, olderThan time.Duration, ns string) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, c.exe.pruneQueuesLock, us(olderThan), ns)
		if err != nil {
			return err
		}
		var nss, res []string
		for rows.Next() {
			var a, b string
			if err := rows.Scan(&a, &b); err != nil {
				rows.Close()
				return err
			}
			nss, res = append(nss, a), append(res, b)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(res) == 0 {
			return nil
		}
		tag, err := tx.Exec(ctx, c.exe.pruneQueues, nss, res)
		n = tag.RowsAffected()
		return err
	})
	return n, err
}
