-- Sentinel schema, version 13: a claim statement whose replay is one
-- primary-key read. {{schema}} is replaced by the quoted schema name.

-- once_claim_packed calls once_claim (migration 9) with the same arguments
-- and returns what the caller does not already know of the row it
-- claimed, as one bigint[]; NULL when it claimed nothing (the key is
-- taken, held, or was inserted concurrently):
--
--   [1] token, [2] attempt, [3] max_attempts,
--   [4] created_at, [5] updated_at, [6] lease_expires_at,
--   [7] hard_expires_at (µs since the Unix epoch),
--   [8] 1 when the lease is live on the database clock, else 0,
--   [9] the lease's time left at the statement's start, in µs.
--
-- The claim statement (sqlClaim in once.go) calls it in its select list,
-- under a CASE that only the key's absence or a claimable row satisfies,
-- over a LEFT JOIN of the key's row: a replay (or a key in progress,
-- uncertain or being reconciled) is that join's one primary-key probe,
-- and its plan holds no function scan, common table expression or union
-- to set up (the version 9 statement's did: a replay cost 1.15-1.3x a
-- primary-key SELECT of the row, this one about 1.04x). A scalar result
-- keeps the call in the select list, where the executor sets up nothing
-- for it unless it runs; a composite would need its type registered with
-- every client's connections.
--
-- once_claim decides and writes as before (its comment, migration 9);
-- this function adds one statement of its own around it, only on the
-- path that claims.
CREATE OR REPLACE FUNCTION {{schema}}.once_claim_packed(p_ns text, p_key text, p_state text, p_owner text, p_host text,
    p_pid integer, p_ttl bigint, p_hard bigint, p_meta text, p_rerun integer, p_only bigint, p_seq regclass,
    p_fresh boolean)
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE AS $once_claim_packed$
DECLARE
    r {{schema}}.executions;
BEGIN
    SELECT * INTO r FROM {{schema}}.once_claim(p_ns, p_key, p_state, p_owner, p_host, p_pid, p_ttl, p_hard, p_meta,
        p_rerun, p_only, p_seq, p_fresh);
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    RETURN ARRAY[
        r.token, r.attempt::bigint, r.max_attempts::bigint,
        (EXTRACT(EPOCH FROM r.created_at) * 1000000)::bigint,
        (EXTRACT(EPOCH FROM r.updated_at) * 1000000)::bigint,
        (EXTRACT(EPOCH FROM r.lease_expires_at) * 1000000)::bigint,
        (EXTRACT(EPOCH FROM r.hard_expires_at) * 1000000)::bigint,
        CASE WHEN r.lease_expires_at > pg_catalog.clock_timestamp() THEN 1 ELSE 0 END,
        (EXTRACT(EPOCH FROM r.lease_expires_at - pg_catalog.statement_timestamp()) * 1000000)::bigint];
END
$once_claim_packed$;
