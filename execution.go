package sentinel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	Owner          string // the worker (or operator) that last claimed it
	Host           string
	PID            int
	Token          int64     // fencing token of the current claim
	CreatedAt      time.Time // database clock
	UpdatedAt      time.Time // when State was entered
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
	var lease, hard, done *time.Time
	var resErr, finalErr *string
	dest := append(prefix, &e.Namespace, &e.Key, &e.State, &e.Owner, &e.Host, &e.PID, &e.Token, &e.CreatedAt, &e.UpdatedAt,
		&lease, &hard, &done, &e.Result, &resErr, &finalErr, &e.ResultByOperator, &e.LeaseAlive, &e.remaining, &e.Attempt, &e.MaxAttempts)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
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
	return &e, nil
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

type execSQL struct {
	read, claim, finish, operator, insertEvent, history, prune, watch, setResult string
	claimSet, finishSet, readSet                                                 string
	pruneQueuesLock, pruneQueues                                                 string
}

func newExecSQL(schema string) *execSQL {
	r := strings.NewReplacer("{{schema}}", schema, "{{seq}}", seqLiteral(schema), "{{cols}}", execCols, "{{gcols}}", execColsOf,
		"{{ccols}}", strings.ReplaceAll(execColsOf, "g.", "c."))
	return &execSQL{
		read:            r.Replace(sqlReadExecution),
		claim:           r.Replace(sqlClaim),
		finish:          r.Replace(sqlFinish),
		claimSet:        r.Replace(sqlClaimSet),
		readSet:         r.Replace(sqlReadSet),
		finishSet:       r.Replace(sqlFinishSet),
		operator:        r.Replace(sqlOperator),
		insertEvent:     r.Replace(sqlInsertEvent),
		history:         r.Replace(sqlHistory),
		prune:           r.Replace(sqlPrune),
		pruneQueuesLock: r.Replace(sqlPruneQueuesLock), pruneQueues: r.Replace(sqlPruneQueues),
		watch:     r.Replace(sqlWatch),
		setResult: r.Replace(sqlSetResult),
	}
}

const sqlReadExecution = `SELECT {{cols}} FROM {{schema}}.executions t WHERE t.namespace = $1 AND t.key = $2`

// sqlReadSet is sqlReadExecution for many keys in one statement, for the
// coalescer (coalesce.go): per call, its ordinal in the batch then
// sqlReadExecution's columns; no row for a key without one.
// $1 namespaces, $2 keys.
const sqlReadSet = `
SELECT i.n, {{cols}}
FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[])) WITH ORDINALITY AS i(ns, key, n)
JOIN {{schema}}.executions t ON t.namespace = i.ns AND t.key = i.key`

// sqlClaim is the first statement of every Once (and OnceTx): it claims
// key in state $3 (executing for Once, claimed for OnceTx) when this
// caller may run it, and otherwise returns the key's row as it is, writing
// nothing. A fresh key costs it and the completion: two round trips, two
// commits; a completed key (a replay) costs it alone.
//
// cur reads the key's row (one primary-key probe, the statement's
// snapshot). Only when it found none, or a row this caller may take over
// (a claimed row whose lease expired; with WithRerun, $10 > 1, an
// executing one whose lease expired), does cl call once_claim (migration
// 8), which takes the key in one guarded statement of its own and returns
// the row it claimed: the condition names no column of the function's
// rows, so it is a one-time filter and the function is not called at all
// otherwise. A replay, or a key in progress, uncertain or being
// reconciled, is therefore cur's probe and nothing else: no row lock, no
// transaction id, no WAL, and about the CPU of a primary-key SELECT
// (TestClaimReplayWritesNothing). Written as one statement with the
// writes in CTEs, every replay paid for setting those writes up: 5-7x a
// SELECT's CPU, 1.4-1.6x its round trip.
//
// once_claim decides again, under the row lock and by the database clock,
// with a snapshot of its own: a key inserted meanwhile is left to its
// claimant, a row locked by a concurrent claim (or by the executor's
// VerifyExecutionToken guard) is left alone, and a re-run must still find
// attempts left (and, when $11 is not 0, the stopped attempt at token
// $11; -1: no re-run, but $10 is still the bound a new row records). The
// token is minted in the write that stores it, from the sequence named by
// {{seq}}; the history (claimed, started, and rerun before a re-run) is
// written in the same statement.
//
// Result: true and the claimed row; or false and cur's row (the key as it
// was: completed, held, uncertain, reconciling, or claimable but locked);
// or no row at all (inserted concurrently: the caller claims again).
// $1 ns, $2 key, $3 state, $4 owner, $5 host, $6 pid, $7 ttl µs,
// $8 hard TTL µs, $9 metadata, $10 the caller's WithRerun bound (1: none),
// $11 the token a re-run must find (0: any; -1: no re-run).
const sqlClaim = `
WITH cur AS (
    SELECT {{cols}} FROM {{schema}}.executions t WHERE t.namespace = $1 AND t.key = $2
),
cl AS (
    SELECT * FROM {{schema}}.once_claim($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, {{seq}}, NOT EXISTS (SELECT 1 FROM cur))
    WHERE NOT EXISTS (SELECT 1 FROM cur c
        WHERE c.lease_alive OR NOT (c.state = 'claimed' OR (c.state = 'executing' AND $10::int > 1 AND $11::bigint >= 0)))
)
SELECT true, {{cols}} FROM cl t
UNION ALL
SELECT false, c.* FROM cur c WHERE NOT EXISTS (SELECT 1 FROM cl)`

// sqlFinish moves a claim held by ($3 owner, $4 token) from one of the
// states $8 to state $5, guarded by owner, token and state, and by a live
// lease when $9. Completion stores the result ($6, $7, $12 final error) and
// drops the lease; any other target ends the lease now. $10 event,
// $11 metadata. When callers wait for the key (waiters > 0) it notifies
// them on channel $13 in the same statement; otherwise no NOTIFY is sent.
const sqlFinish = `
WITH u AS (
    UPDATE {{schema}}.executions t SET
        state = $5,
        result = CASE WHEN $5 = 'completed' THEN $6::bytea ELSE t.result END,
        result_error = CASE WHEN $5 = 'completed' THEN $7::text ELSE t.result_error END,
        final_error = CASE WHEN $5 = 'completed' THEN $12::text ELSE t.final_error END,
        result_by_operator = CASE WHEN $5 = 'completed' THEN false ELSE t.result_by_operator END,
        completed_at = CASE WHEN $5 = 'completed' THEN pg_catalog.statement_timestamp() ELSE t.completed_at END,
        lease_expires_at = CASE WHEN $5 = 'completed' THEN NULL ELSE least(t.lease_expires_at, pg_catalog.statement_timestamp()) END,
        updated_at = pg_catalog.statement_timestamp()
    WHERE t.namespace = $1 AND t.key = $2 AND t.owner = $3 AND t.token = $4
      AND t.state = ANY($8::text[]) AND (NOT $9::bool OR t.lease_expires_at > pg_catalog.clock_timestamp())
    RETURNING t.token, t.state, CASE WHEN t.waiters > 0 THEN
        pg_catalog.pg_notify($13, 'e' || pg_catalog.octet_length(t.namespace)::text || ':' || t.namespace || t.key)::text END
),
ev AS (
    INSERT INTO {{schema}}.events (namespace, key, event, state, token, owner, metadata)
    SELECT $1, $2, $10, u.state, u.token, $3, $11::jsonb FROM u
)
SELECT pg_catalog.count(*) FROM u`

// sqlClaimSet is sqlClaim for many calls in one statement, for the
// coalescer (coalesce.go): parameter $k is the array of sqlClaim's $k over
// the batch's calls. Each call is decided exactly as sqlClaim and
// once_claim (migration 8) decide it, in the same steps written over the
// batch's rows (a batch pays for setting up its writes once, for up to 32
// calls), and gets its own row: true and the row it claimed, or false and the
// key's row as it is (a replay, a key in progress...). Calls may share a
// key (replays of one key share the batch's probe); of the calls on one
// key only the first (by ordinal) may take it over or insert it, and the
// others get the row as it was, or no row (a key inserted by this very
// statement), as sqlClaim's caller would after a concurrent claim. Rows
// are locked and inserted in key order. It returns, per call, its ordinal
// in the batch then sqlClaim's columns. $6 pid, $10 and $11 are bigint[];
// $9 metadata a text[] of JSON.
const sqlClaimSet = `
WITH i AS (
    SELECT * FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[]), pg_catalog.unnest($3::text[]),
        pg_catalog.unnest($4::text[]), pg_catalog.unnest($5::text[]), pg_catalog.unnest($6::bigint[]),
        pg_catalog.unnest($7::bigint[]), pg_catalog.unnest($8::bigint[]), pg_catalog.unnest($9::text[]),
        pg_catalog.unnest($10::bigint[]), pg_catalog.unnest($11::bigint[]))
        WITH ORDINALITY AS i(ns, key, state, owner, host, pid, ttl, hard, meta, rerun, rtoken, n)
),
cur AS (
    SELECT i.n AS ord, {{cols}} FROM i JOIN {{schema}}.executions t ON t.namespace = i.ns AND t.key = i.key
),
lk AS (
    SELECT o.n AS ord, l.* FROM (
        SELECT DISTINCT ON (i.ns, i.key) i.n, i.ns, i.key, i.rerun, i.rtoken
        FROM cur c JOIN i ON i.n = c.ord
        WHERE NOT c.lease_alive AND (c.state = 'claimed' OR (c.state = 'executing' AND i.rerun > 1 AND i.rtoken >= 0))
        ORDER BY i.ns, i.key, i.n
    ) o
    CROSS JOIN LATERAL (
        SELECT t.namespace, t.key, t.state, t.token, t.owner, t.attempt, t.max_attempts FROM {{schema}}.executions t
        WHERE t.namespace = o.ns AND t.key = o.key AND t.lease_expires_at <= pg_catalog.clock_timestamp()
            AND (t.state = 'claimed' OR (t.state = 'executing' AND t.attempt < least(t.max_attempts, o.rerun)
                AND (o.rtoken = 0 OR t.token = o.rtoken)))
        FOR UPDATE OF t SKIP LOCKED
    ) l
),
up AS (
    UPDATE {{schema}}.executions t SET
        state = i.state, owner = i.owner, token = pg_catalog.nextval({{seq}}), host = i.host, pid = i.pid::int,
        updated_at = pg_catalog.clock_timestamp(),
        lease_expires_at = pg_catalog.clock_timestamp() + i.ttl * interval '1 microsecond',
        hard_expires_at = pg_catalog.clock_timestamp() + i.hard * interval '1 microsecond',
        completed_at = NULL, result = NULL, result_error = NULL, final_error = NULL, result_by_operator = false,
        attempt = CASE WHEN lk.state = 'executing' THEN lk.attempt + 1 ELSE 1 END,
        max_attempts = CASE WHEN lk.state = 'executing' THEN least(lk.max_attempts, i.rerun)::int ELSE i.rerun::int END
    FROM lk JOIN i ON i.n = lk.ord
    WHERE t.namespace = lk.namespace AND t.key = lk.key
    RETURNING i.n AS ord, {{cols}}, lk.state AS prev_state, lk.token AS prev_token, lk.owner AS prev_owner
),
ins AS (
    INSERT INTO {{schema}}.executions AS t
        (namespace, key, state, owner, token, host, pid, created_at, updated_at, lease_expires_at, hard_expires_at,
         attempt, max_attempts)
    SELECT DISTINCT ON (i.ns, i.key) i.ns, i.key, i.state, i.owner, pg_catalog.nextval({{seq}}), i.host, i.pid::int,
        pg_catalog.clock_timestamp(), pg_catalog.clock_timestamp(),
        pg_catalog.clock_timestamp() + i.ttl * interval '1 microsecond',
        pg_catalog.clock_timestamp() + i.hard * interval '1 microsecond',
        1, i.rerun::int
    FROM i
    WHERE NOT EXISTS (SELECT 1 FROM cur c WHERE c.ord = i.n)
    ORDER BY i.ns, i.key, i.n
    ON CONFLICT (namespace, key) DO NOTHING
    RETURNING {{cols}}
),
g AS (
    SELECT * FROM up
    UNION ALL
    SELECT (SELECT pg_catalog.min(i.n) FROM i WHERE i.ns = ins.namespace AND i.key = ins.key), ins.*,
        NULL::text, NULL::bigint, NULL::text
    FROM ins
),
ev AS (
    INSERT INTO {{schema}}.events (namespace, key, event, state, token, owner, metadata)
    SELECT g.namespace, g.key, e.event, e.state, g.token, g.owner,
        CASE WHEN e.n = 0 THEN coalesce(i.meta::jsonb, '{}'::jsonb) || pg_catalog.jsonb_build_object('attempt', g.attempt,
            'max_attempts', g.max_attempts, 'previous_token', g.prev_token, 'previous_owner', g.prev_owner)
        ELSE i.meta::jsonb END
    FROM g JOIN i ON i.n = g.ord,
        (VALUES (0, 'rerun', 'executing'), (1, 'claimed', 'claimed'), (2, 'started', 'executing')) AS e(n, event, state)
    WHERE (e.n = 0 AND g.prev_state = 'executing') OR e.n = 1 OR (e.n = 2 AND i.state = 'executing')
    ORDER BY g.ord, e.n
)
SELECT g.ord, true, {{gcols}} FROM g
UNION ALL
SELECT c.ord, false, {{ccols}} FROM cur c WHERE NOT EXISTS (SELECT 1 FROM g WHERE g.ord = c.ord)`

// sqlFinishSet is sqlFinish for many claims in one statement, for the
// coalescer (coalesce.go): parameter $k is the array of sqlFinish's $k
// over the batch's calls, all on distinct keys, except $8, where each
// call's states are joined by commas. Each row is guarded exactly as
// sqlFinish guards it. It returns, per call, its ordinal in the batch and
// the count of rows changed (0 or 1). Waiters of a key are notified as by
// sqlFinish; keys nobody waits for send no NOTIFY.
const sqlFinishSet = `
WITH i AS (
    SELECT * FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[]), pg_catalog.unnest($3::text[]),
        pg_catalog.unnest($4::bigint[]), pg_catalog.unnest($5::text[]), pg_catalog.unnest($6::bytea[]),
        pg_catalog.unnest($7::text[]), pg_catalog.unnest($8::text[]), pg_catalog.unnest($9::bool[]),
        pg_catalog.unnest($10::text[]), pg_catalog.unnest($11::text[]), pg_catalog.unnest($12::text[]),
        pg_catalog.unnest($13::text[]))
        WITH ORDINALITY AS i(ns, key, owner, token, to_state, result, result_error, from_states, need_live, event, meta, final_error, channel, n)
),
u AS (
    UPDATE {{schema}}.executions t SET
        state = i.to_state,
        result = CASE WHEN i.to_state = 'completed' THEN i.result ELSE t.result END,
        result_error = CASE WHEN i.to_state = 'completed' THEN i.result_error ELSE t.result_error END,
        final_error = CASE WHEN i.to_state = 'completed' THEN i.final_error ELSE t.final_error END,
        result_by_operator = CASE WHEN i.to_state = 'completed' THEN false ELSE t.result_by_operator END,
        completed_at = CASE WHEN i.to_state = 'completed' THEN pg_catalog.statement_timestamp() ELSE t.completed_at END,
        lease_expires_at = CASE WHEN i.to_state = 'completed' THEN NULL ELSE least(t.lease_expires_at, pg_catalog.statement_timestamp()) END,
        updated_at = pg_catalog.statement_timestamp()
    FROM i
    WHERE t.namespace = i.ns AND t.key = i.key AND t.owner = i.owner AND t.token = i.token
      AND t.state = ANY(pg_catalog.string_to_array(i.from_states, ','))
      AND (NOT i.need_live OR t.lease_expires_at > pg_catalog.clock_timestamp())
    RETURNING i.n AS ord, t.token, t.state, CASE WHEN t.waiters > 0 THEN
        pg_catalog.pg_notify(i.channel, 'e' || pg_catalog.octet_length(t.namespace)::text || ':' || t.namespace || t.key)::text END
),
ev AS (
    INSERT INTO {{schema}}.events (namespace, key, event, state, token, owner, metadata)
    SELECT i.ns, i.key, i.event, u.state, u.token, i.owner, i.meta::jsonb FROM u JOIN i ON i.n = u.ord
    ORDER BY u.ord
)
SELECT i.n, (SELECT pg_catalog.count(*) FROM u WHERE u.ord = i.n) FROM i`

// sqlWatch counts a caller in as waiting for an in-progress key's outcome
// (see sqlFinish) and returns the row; no row when the key is not in
// progress any more.
const sqlWatch = `
UPDATE {{schema}}.executions t SET waiters = t.waiters + 1
WHERE t.namespace = $1 AND t.key = $2 AND t.state IN ('claimed', 'executing')
RETURNING {{cols}}`

// sqlSetResult stores an operator's result for a key that completed
// without one (its result could not be encoded) or with one an operator
// stored, guarded by state, by the result's origin and by token $4 when
// not 0. $3 result, $5 operator,
// $6 metadata. When the guard fails the current row is returned and
// nothing is written.
const sqlSetResult = `
WITH u AS (
    UPDATE {{schema}}.executions t SET
        result = $3::bytea, result_error = NULL, result_by_operator = true, updated_at = pg_catalog.statement_timestamp()
    WHERE t.namespace = $1 AND t.key = $2 AND t.state = 'completed' AND (t.result_error IS NOT NULL OR t.result_by_operator)
      AND ($4::bigint = 0 OR t.token = $4)
    RETURNING {{cols}}
),
ev AS (
    INSERT INTO {{schema}}.events (namespace, key, event, state, token, owner, metadata)
    SELECT $1, $2, 'result_set', u.state, u.token, $5, $6::jsonb FROM u
)
SELECT true, u.* FROM u
UNION ALL
SELECT false, {{cols}} FROM {{schema}}.executions t
WHERE t.namespace = $1 AND t.key = $2 AND NOT EXISTS (SELECT 1 FROM u)`

// sqlOperator is an operator's transition ($3 from state -> $4 to state),
// guarded by state (and, from executing, by an expired lease; by token $10
// when not 0). $5 mints a new token; $6 owner; $7 result; $8 event;
// $9 metadata. When the guard
// fails, the current row is returned and nothing is written. The row is
// locked FOR UPDATE first (lk): that waits for a VerifyExecutionToken
// guard's FOR KEY SHARE, so no operator transition commits while a guarded
// transaction of the current claim is open (see sqlVerify).
const sqlOperator = `
WITH lk AS (
    SELECT t.namespace, t.key FROM {{schema}}.executions t
    WHERE t.namespace = $1 AND t.key = $2
    FOR UPDATE
),
u AS (
    UPDATE {{schema}}.executions t SET
        state = $4,
        token = CASE WHEN $5::bool THEN pg_catalog.nextval({{seq}}) ELSE t.token END,
        owner = $6,
        result = CASE WHEN $4 = 'completed' THEN $7::bytea ELSE t.result END,
        result_error = CASE WHEN $4 = 'completed' THEN NULL ELSE t.result_error END,
        final_error = CASE WHEN $4 = 'completed' THEN NULL ELSE t.final_error END,
        result_by_operator = ($4 = 'completed'),
        completed_at = CASE WHEN $4 = 'completed' THEN pg_catalog.statement_timestamp() ELSE NULL END,
        lease_expires_at = CASE WHEN $4 = 'claimed' THEN pg_catalog.statement_timestamp() ELSE NULL END,
        updated_at = pg_catalog.statement_timestamp()
    FROM lk
    WHERE t.namespace = lk.namespace AND t.key = lk.key AND t.state = $3
      AND ($3 <> 'executing' OR t.lease_expires_at <= pg_catalog.clock_timestamp())
      AND ($10::bigint = 0 OR t.token = $10)
    RETURNING {{cols}}
),
ev AS (
    INSERT INTO {{schema}}.events (namespace, key, event, state, token, owner, metadata)
    SELECT $1, $2, $8, u.state, u.token, $6, $9::jsonb FROM u
)
SELECT true, u.* FROM u
UNION ALL
SELECT false, {{cols}} FROM {{schema}}.executions t
WHERE t.namespace = $1 AND t.key = $2 AND NOT EXISTS (SELECT 1 FROM u)`

const sqlInsertEvent = `
INSERT INTO {{schema}}.events (namespace, key, event, state, token, owner, metadata)
VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb)`

const sqlHistory = `
SELECT id, namespace, key, event, state, token, owner, at, metadata
FROM {{schema}}.events WHERE namespace = $1 AND key = $2 ORDER BY id`

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
// gone and draws again on a new one.
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
// ErrNotFound. Options: WithNamespace.
func (c *Client) Inspect(ctx context.Context, key string, opts ...Option) (*Execution, error) {
	o, err := c.resolve(key, opts)
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

// History returns key's events, oldest first. Options: WithNamespace.
func (c *Client) History(ctx context.Context, key string, opts ...Option) ([]Event, error) {
	o, err := c.resolve(key, opts)
	if err != nil {
		return nil, err
	}
	rows, err := c.pool.Query(ctx, c.exe.history, o.namespace, key)
	if err != nil {
		return nil, c.wrapErr(fmt.Sprintf("history %q/%q", o.namespace, key), err)
	}
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) {
		var e Event
		err := r.Scan(&e.ID, &e.Namespace, &e.Key, &e.Type, &e.State, &e.Token, &e.Owner, &e.At, &e.Metadata)
		e.Event = e.Type
		return e, err
	})
	if err != nil {
		return nil, c.wrapErr(fmt.Sprintf("history %q/%q", o.namespace, key), err)
	}
	return evs, nil
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
func (c *Client) Prune(ctx context.Context, olderThan time.Duration, opts ...Option) (PruneResult, error) {
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
	if o.ttlSet || o.hardSet || o.wait || o.force || o.codec != nil || o.metadata != nil || o.token != 0 || o.rerunSet {
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
