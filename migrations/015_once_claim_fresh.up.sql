-- Sentinel schema, version 15: a fresh key's claim without the nested
-- call. {{schema}} is replaced by the quoted schema name.

-- once_claim_packed (migration 13) claimed a fresh key by calling
-- once_claim (migration 9), whose p_fresh path is one statement with the
-- insert and its history in CTEs, returned through a set-returning
-- function scan and a tuplestore: setting all that up cost more than
-- the writes. The fresh path now runs here, as two plain statements with
-- cached plans: the insert (a row inserted concurrently is left to its
-- claimant: nothing claimed, as before) and its history (claimed, and
-- started when p_state is executing, in that order). Same arguments,
-- same result, same writes; a claim that takes an existing row over
-- still calls once_claim. Server CPU of the claim statement for a fresh
-- key, 3,000 in a loop on one backend (no commits): 88-109 µs before,
-- 65-82 µs after (docs/benchmarks.md, issue 27). Every client that calls
-- this function (those written for migration 13 on) calls it the same
-- way: no client change goes with it.
CREATE OR REPLACE FUNCTION {{schema}}.once_claim_packed(p_ns text, p_key text, p_state text, p_owner text, p_host text,
    p_pid integer, p_ttl bigint, p_hard bigint, p_meta text, p_rerun integer, p_only bigint, p_seq regclass,
    p_fresh boolean)
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE AS $once_claim_packed$
DECLARE
    r {{schema}}.executions;
    v_now timestamptz;
BEGIN
    IF p_fresh THEN
        v_now := pg_catalog.clock_timestamp();
        INSERT INTO {{schema}}.executions AS t
            (namespace, key, state, owner, token, host, pid, created_at, updated_at, lease_expires_at, hard_expires_at,
             attempt, max_attempts)
        VALUES (p_ns, p_key, p_state, p_owner, pg_catalog.nextval(p_seq), p_host, p_pid, v_now, v_now,
            v_now + p_ttl * interval '1 microsecond', v_now + p_hard * interval '1 microsecond', 1, p_rerun)
        ON CONFLICT (namespace, key) DO NOTHING
        RETURNING t.* INTO r;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
        IF p_state = 'executing' THEN
            INSERT INTO {{schema}}.events (namespace, key, event, state, token, owner, metadata)
            VALUES (p_ns, p_key, 'claimed', 'claimed', r.token, p_owner, p_meta::jsonb),
                   (p_ns, p_key, 'started', 'executing', r.token, p_owner, p_meta::jsonb);
        ELSE
            INSERT INTO {{schema}}.events (namespace, key, event, state, token, owner, metadata)
            VALUES (p_ns, p_key, 'claimed', 'claimed', r.token, p_owner, p_meta::jsonb);
        END IF;
    ELSE
        SELECT * INTO r FROM {{schema}}.once_claim(p_ns, p_key, p_state, p_owner, p_host, p_pid, p_ttl, p_hard, p_meta,
            p_rerun, p_only, p_seq, p_fresh);
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
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
