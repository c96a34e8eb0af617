-- Sentinel schema, version 19: a claim that takes a Once key over starts
-- its count of waiters again. {{schema}} is replaced by the quoted schema
-- name.

-- executions.waiters (migration 2) counts the callers waiting (Once with
-- WithWait) for the outcome of the key's current claim: the statement that
-- finishes the claim wakes them only when it is above 0. Waiters counted
-- themselves in and never out, so once a key had been waited for, every
-- later finish of it (a re-run's outcome, a new claim's after a hand-back)
-- woke every listener of the database for nobody. Now:
--
--   - a claim that takes the key over (once_claim's up, below: a claim
--     whose lease expired or was handed back, a re-run) sets waiters to 0
--     in the SET list it already has, as the new claim's own count: the
--     outcome the earlier waiters waited for is written (or will never be:
--     its lease ended), and a waiter that goes on waiting counts itself in
--     again on the new claim (its token), before it sleeps (Client.begin,
--     once.go), so no outcome it waits for can miss it;
--   - a waiter that gives up (its ctx ended) counts itself out, in a
--     statement of its own guarded by the token it counted in on
--     (sqlUnwatch, once.go).
--
-- A fresh key's claim (its insert writes the column's default, 0) and every
-- finish are the statements they were: nothing is added to the path of a
-- Once that nobody waits for. Same arguments and result as migration 9's
-- once_claim, which this replaces; once_claim_packed (migration 15) calls
-- it unchanged. A waiter of a client older than this version counts itself
-- in once per call: when someone else claims the key after a hand-back, it
-- is woken no longer by that claim's outcome but by its re-check at the
-- holder's lease expiry.
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
            max_attempts = CASE WHEN lk.state = 'executing' THEN least(lk.max_attempts, p_rerun) ELSE p_rerun END,
            waiters = 0
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
