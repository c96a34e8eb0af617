-- Sentinel schema, version 9: re-runs after a crash (Once with WithRerun).
-- {{schema}} is replaced by the quoted schema name.

-- attempt counts the runs of fn under one key since the key was last safe
-- to run: 1 for the first run, and for a run that takes over a claimed key
-- (nothing in flight: a claim never started, a Retryable first attempt, an
-- operator's ResetToClaimed); each re-run of a key that stopped without an
-- outcome adds one. So attempt > 1 means an earlier attempt may have had
-- its effect, and such a key is never handed back as claimed (a Retryable
-- re-run, or a re-run claim given back before fn ran, leaves it executing
-- with its lease ended, for the next re-run). max_attempts is the bound recorded by the claim that started
-- the current attempt: the WithRerun of its caller, lowered (never raised)
-- by every re-run's caller; 1 means no re-run (the default, at-most-once).
-- A key executing with an expired lease is re-run only by a caller that
-- gives WithRerun too, and only while attempt < least(max_attempts, the
-- caller's own bound); otherwise it is uncertain, as before.
--
-- Constant defaults: PostgreSQL 11+ adds these columns without rewriting
-- the table.
ALTER TABLE {{schema}}.executions ADD COLUMN IF NOT EXISTS attempt integer NOT NULL DEFAULT 1;
ALTER TABLE {{schema}}.executions ADD COLUMN IF NOT EXISTS max_attempts integer NOT NULL DEFAULT 1;

-- once_claim takes a Once key for its caller, in one statement, and returns
-- the row it claimed; no row when it could not (the key is taken, held,
-- or was inserted concurrently). It is called only by the claim statement
-- (sqlClaim in execution.go), and only when that statement's own read of
-- the key found it absent or claimable: a replay, or a key in progress,
-- uncertain or being reconciled, is that read alone, so it costs about one
-- primary-key SELECT (the writes below, planned into the same statement,
-- made every replay pay for setting them up: 5-7x the read's CPU).
--
--   - lk locks a row that may be taken over, FOR UPDATE SKIP LOCKED, as
--     sqlAcquire does for leases: a claimed row whose lease expired (its
--     claimer never started fn, or gave the key back), or, for a caller
--     with WithRerun (p_rerun > 1), an executing row whose lease expired
--     with attempts left (attempt < least(max_attempts, p_rerun)) and, when
--     p_only is not 0, at token p_only (-1: none, so no re-run). Expiry is
--     decided by the database clock under the row lock. A row locked by
--     another transaction (a concurrent claim, or the executor's
--     VerifyExecutionToken guard, FOR KEY SHARE) is left alone. FOR UPDATE,
--     not FOR NO KEY UPDATE, because it is the lock that conflicts with the
--     guard's FOR KEY SHARE.
--   - up takes the locked row over with a new token; a re-run (the row was
--     executing) counts one more attempt and lowers max_attempts to the
--     caller's bound; a takeover of a claim starts again at attempt 1 and
--     records the caller's bound.
--   - ins inserts the row when the key has none; a row inserted
--     concurrently is left to its claimant (DO NOTHING: nothing returned).
--   - ev writes the history in the same statement: claimed, and started
--     when p_state is executing (Once); a re-run first writes rerun with
--     the attempt, the bound and the previous token and owner.
--
-- When the caller's read found no row (p_fresh), only the insert and its
-- history run: the cheaper statement on the path of every fresh Once.
-- The token is minted only in up or ins, the writes that store it, from
-- p_seq (the schema's fencing_token sequence, passed by the caller).
-- VOLATILE plpgsql: each statement takes its own snapshot, and its plan is
-- cached per session.
CREATE OR REPLACE FUNCTION {{schema}}.once_claim(p_ns text, p_key text, p_state text, p_owner text, p_host text,
    p_pid integer, p_ttl bigint, p_hard bigint, p_meta text, p_rerun integer, p_only bigint, p_seq regclass,
    p_fresh boolean)
RETURNS SETOF {{schema}}.executions
LANGUAGE plpgsql VOLATILE AS $once_claim$
BEGIN
    IF p_fresh THEN
        -- The caller's read found no row: the insert and its history alone
        -- (a row inserted meanwhile is left to its claimant).
        RETURN QUERY
        WITH ins AS (
            INSERT INTO {{schema}}.executions AS t
                (namespace, key, state, owner, token, host, pid, created_at, updated_at, lease_expires_at, hard_expires_at,
                 attempt, max_attempts)
            VALUES (p_ns, p_key, p_state, p_owner, pg_catalog.nextval(p_seq), p_host, p_pid,
                pg_catalog.clock_timestamp(), pg_catalog.clock_timestamp(),
                pg_catalog.clock_timestamp() + p_ttl * interval '1 microsecond',
                pg_catalog.clock_timestamp() + p_hard * interval '1 microsecond',
                1, p_rerun)
            ON CONFLICT (namespace, key) DO NOTHING
            RETURNING t.*
        ),
        ev AS (
            INSERT INTO {{schema}}.events (namespace, key, event, state, token, owner, metadata)
            SELECT p_ns, p_key, e.event, e.state, ins.token, p_owner, p_meta::jsonb
            FROM ins, (VALUES (1, 'claimed', 'claimed'), (2, 'started', 'executing')) AS e(n, event, state)
            WHERE e.n = 1 OR p_state = 'executing'
            ORDER BY e.n
        )
        SELECT * FROM ins;
        RETURN;
    END IF;
    RETURN QUERY
    WITH lk AS (
        SELECT t.namespace, t.key, t.state, t.token, t.owner, t.attempt, t.max_attempts FROM {{schema}}.executions t
        WHERE t.namespace = p_ns AND t.key = p_key AND t.lease_expires_at <= pg_catalog.clock_timestamp()
          AND (t.state = 'claimed' OR (t.state = 'executing' AND t.attempt < least(t.max_attempts, p_rerun)
              AND (p_only = 0 OR t.token = p_only)))
        FOR UPDATE OF t SKIP LOCKED
    ),
    up AS (
        UPDATE {{schema}}.executions t SET
            state = p_state, owner = p_owner, token = pg_catalog.nextval(p_seq), host = p_host, pid = p_pid,
            updated_at = pg_catalog.clock_timestamp(),
            lease_expires_at = pg_catalog.clock_timestamp() + p_ttl * interval '1 microsecond',
            hard_expires_at = pg_catalog.clock_timestamp() + p_hard * interval '1 microsecond',
            completed_at = NULL, result = NULL, result_error = NULL, final_error = NULL, result_by_operator = false,
            attempt = CASE WHEN lk.state = 'executing' THEN lk.attempt + 1 ELSE 1 END,
            max_attempts = CASE WHEN lk.state = 'executing' THEN least(lk.max_attempts, p_rerun) ELSE p_rerun END
        FROM lk WHERE t.namespace = lk.namespace AND t.key = lk.key
        RETURNING t AS r, lk.state AS prev_state, lk.token AS prev_token, lk.owner AS prev_owner
    ),
    ins AS (
        INSERT INTO {{schema}}.executions AS t
            (namespace, key, state, owner, token, host, pid, created_at, updated_at, lease_expires_at, hard_expires_at,
             attempt, max_attempts)
        SELECT p_ns, p_key, p_state, p_owner, pg_catalog.nextval(p_seq), p_host, p_pid,
            pg_catalog.clock_timestamp(), pg_catalog.clock_timestamp(),
            pg_catalog.clock_timestamp() + p_ttl * interval '1 microsecond',
            pg_catalog.clock_timestamp() + p_hard * interval '1 microsecond',
            1, p_rerun
        WHERE NOT EXISTS (SELECT 1 FROM {{schema}}.executions x WHERE x.namespace = p_ns AND x.key = p_key)
        ON CONFLICT (namespace, key) DO NOTHING
        RETURNING t AS r, NULL::text AS prev_state, NULL::bigint AS prev_token, NULL::text AS prev_owner
    ),
    g AS (SELECT * FROM up UNION ALL SELECT * FROM ins),
    ev AS (
        INSERT INTO {{schema}}.events (namespace, key, event, state, token, owner, metadata)
        SELECT p_ns, p_key, e.event, e.state, (g.r).token, p_owner,
            CASE WHEN e.n = 0 THEN coalesce(p_meta::jsonb, '{}'::jsonb) || pg_catalog.jsonb_build_object(
                'attempt', (g.r).attempt, 'max_attempts', (g.r).max_attempts,
                'previous_token', g.prev_token, 'previous_owner', g.prev_owner)
            ELSE p_meta::jsonb END
        FROM g, (VALUES (0, 'rerun', 'executing'), (1, 'claimed', 'claimed'), (2, 'started', 'executing')) AS e(n, event, state)
        WHERE (e.n = 0 AND g.prev_state = 'executing') OR e.n = 1 OR (e.n = 2 AND p_state = 'executing')
        ORDER BY e.n
    )
    SELECT (g.r).* FROM g;
END
$once_claim$;
