-- Sentinel schema, version 20: a draw that marks its ticket with the
-- attempt's mark, so that a draw whose reply was lost is not drawn twice,
-- and that counts the tickets ahead under the queue's lock. {{schema}} is
-- replaced by the quoted schema name.

-- A Turn's draw is one statement that commits on its own. When the
-- connection drops after the server ran it, the client cannot tell whether
-- it committed, and draws again: the first ticket, unknown to the client,
-- was renewed by nobody and given up by nobody, and held the queue (the
-- retried ticket of its own Turn included) until it expired, a TTL later.
-- Now every draw of one Turn (its first attempt and its retries) carries
-- the same draw_nonce, random per draw, and a retry first looks for a live
-- ticket of its owner carrying it: found, it is that draw's ticket, adopted
-- (its expiry renewed, its wake-up channel the retry's), not a second one.
-- Old rows and old clients' draws have none (NULL).
ALTER TABLE {{schema}}.tickets ADD COLUMN IF NOT EXISTS draw_nonce bigint;

-- queue_draw is the body of the draw (sqlDraw in queue_sql.go), called after
-- the statement locked the queue's row (FOR UPDATE), so that draws of one
-- resource run it one at a time, in the order they asked. It is VOLATILE
-- plpgsql, so each of its statements takes a snapshot of its own, taken
-- under the lock: every draw and leave that committed before it holds the
-- lock is seen (the statement's own snapshot was taken before it waited).
--
--   0. A retry (p_retry: an earlier attempt of this draw may have
--      committed without the client hearing back) adopts the live ticket
--      of p_owner carrying p_nonce when there is one: under the lock, the
--      earlier attempt either committed (its ticket is there) or never
--      will mint one before this (its statement holds or waits for the
--      same lock: an attempt whose statement reached the server before the
--      retry's took the lock first). A renewal-like update: it extends a
--      live ticket's expiry and never revives an expired one (an expired
--      ticket is dead; a new one is drawn). An adopted ticket already
--      served (the leave ahead granted it meanwhile) is returned as
--      served; its grant was a durable commit.
--   1. Otherwise the ticket is minted (p_seq) and inserted, and `assigned`
--      recorded.
--   2. p_count: the live tickets ahead of it, counted here, under the lock
--      (QueueGrant.Ahead; -1 when not asked).
--   3. As queue_ahead (migration 12) decides for a new ticket: the live
--      ticket directly below it (a later leave grants or wakes it), or,
--      with none, lower tickets whose expiry passed are deleted (skipping
--      rows locked elsewhere) and, when no lower ticket is left, the ticket
--      is served here (served_at, `granted`).
--
-- queue_ahead (migration 12) stays for clients older than this version.
CREATE OR REPLACE FUNCTION {{schema}}.queue_draw(p_ns text, p_res text, p_label text, p_owner text, p_host text,
    p_pid integer, p_ttl bigint, p_channel text, p_nonce bigint, p_retry boolean, p_count boolean, p_seq regclass,
    OUT ticket bigint, OUT drawn_at timestamptz, OUT expires_at timestamptz, OUT counted bigint,
    OUT ahead bigint, OUT ahead_owner text, OUT ahead_left interval, OUT served boolean)
LANGUAGE plpgsql VOLATILE AS $queue_draw$
DECLARE
    v_served_at timestamptz;
BEGIN
    served := false;
    counted := -1;
    IF p_retry THEN
        UPDATE {{schema}}.tickets t
        SET expires_at = greatest(t.expires_at, pg_catalog.clock_timestamp() + p_ttl * interval '1 microsecond'),
            channel = coalesce(p_channel, t.channel)
        WHERE t.namespace = p_ns AND t.resource = p_res AND t.draw_nonce = p_nonce AND t.owner = p_owner
          AND t.expires_at > pg_catalog.clock_timestamp()
        RETURNING t.ticket, t.drawn_at, t.expires_at, t.served_at
        INTO ticket, drawn_at, expires_at, v_served_at;
    END IF;
    IF ticket IS NULL THEN
        INSERT INTO {{schema}}.tickets AS t (namespace, resource, ticket, label, owner, host, pid, drawn_at, expires_at, channel, draw_nonce)
        VALUES (p_ns, p_res, pg_catalog.nextval(p_seq), p_label, p_owner, p_host, p_pid,
            pg_catalog.clock_timestamp(), pg_catalog.clock_timestamp() + p_ttl * interval '1 microsecond', p_channel, p_nonce)
        RETURNING t.ticket, t.drawn_at, t.expires_at INTO ticket, drawn_at, expires_at;
        INSERT INTO {{schema}}.queue_events (namespace, resource, ticket, event, label, owner)
        VALUES (p_ns, p_res, ticket, 'assigned', p_label, p_owner);
    END IF;
    IF p_count THEN
        SELECT pg_catalog.count(*) INTO counted FROM {{schema}}.tickets x
        WHERE x.namespace = p_ns AND x.resource = p_res AND x.ticket < queue_draw.ticket
          AND x.expires_at > pg_catalog.clock_timestamp();
    END IF;
    IF v_served_at IS NOT NULL THEN
        served := true;
        RETURN;
    END IF;
    SELECT t.ticket, t.owner, t.expires_at - pg_catalog.clock_timestamp()
    INTO ahead, ahead_owner, ahead_left
    FROM {{schema}}.tickets t
    WHERE t.namespace = p_ns AND t.resource = p_res AND t.ticket < queue_draw.ticket
      AND t.expires_at > pg_catalog.clock_timestamp()
    ORDER BY t.ticket DESC
    LIMIT 1;
    IF FOUND THEN
        RETURN;
    END IF;
    WITH dc AS (
        SELECT t.ticket FROM {{schema}}.tickets t
        WHERE t.namespace = p_ns AND t.resource = p_res AND t.ticket < queue_draw.ticket
          AND t.expires_at <= pg_catalog.clock_timestamp()
        FOR UPDATE SKIP LOCKED
    ),
    dead AS (
        DELETE FROM {{schema}}.tickets t USING dc
        WHERE t.namespace = p_ns AND t.resource = p_res AND t.ticket = dc.ticket
        RETURNING t.ticket, t.label, t.owner, t.served_at IS NOT NULL AS served
    )
    INSERT INTO {{schema}}.queue_events (namespace, resource, ticket, event, label, owner, by_ticket)
    SELECT p_ns, p_res, d.ticket, CASE WHEN d.served THEN 'crashed' ELSE 'bumped' END, d.label, d.owner, queue_draw.ticket
    FROM dead d ORDER BY d.ticket;
    IF EXISTS (SELECT 1 FROM {{schema}}.tickets t
               WHERE t.namespace = p_ns AND t.resource = p_res AND t.ticket < queue_draw.ticket) THEN
        RETURN;
    END IF;
    UPDATE {{schema}}.tickets t SET served_at = pg_catalog.clock_timestamp()
    WHERE t.namespace = p_ns AND t.resource = p_res AND t.ticket = queue_draw.ticket AND t.owner = p_owner
      AND t.served_at IS NULL AND t.expires_at > pg_catalog.clock_timestamp();
    IF FOUND THEN
        INSERT INTO {{schema}}.queue_events (namespace, resource, ticket, event, label, owner)
        VALUES (p_ns, p_res, queue_draw.ticket, 'granted', p_label, p_owner);
        served := true;
    END IF;
END
$queue_draw$;
