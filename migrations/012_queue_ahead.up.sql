-- Sentinel schema, version 12: a draw that reads the ticket ahead after it
-- holds the queue's lock, and serves the new ticket itself when there is
-- none. {{schema}} is replaced by the quoted schema name.

-- queue_ahead is called only by the draw (sqlDraw in queue_sql.go), after
-- the draw locked the queue's row (FOR UPDATE) and inserted ticket
-- p_ticket, owned by p_owner with label p_label. It records `assigned`
-- (first, so that a `granted` it records follows it), then decides what
-- the waiter does. It is VOLATILE plpgsql, so each of its statements
-- takes a snapshot of its own: the draw's
-- statement took its snapshot before it waited for the lock, and a leave
-- or a draw that committed while it waited is not in that snapshot.
--
--   1. The live ticket directly below p_ticket (ahead, its owner and time
--      left on the database clock). Every leave that committed before the
--      draw held the lock is seen, and every leave that commits after it
--      waits for the draw's commit (the leave locks the queue's row too)
--      and so sees the new ticket: a ticket with a live ticket ahead is
--      granted, or woken, by a later leave, or re-checks once the ticket
--      ahead expires (Client.waitTurn), with no serving check of its own.
--   2. With none live below, the new ticket is served here, as its own
--      serving check (sqlServe) would serve it, under the queue's lock so
--      that nothing can be drawn below it meanwhile: lower tickets whose
--      expiry passed on the database clock are locked, skipping rows
--      locked elsewhere (a renewal, a VerifyTurn transaction: the draw
--      holds the queue's lock and must not wait for those), and deleted;
--      FOR UPDATE re-checks the expiry on the newest row version, and a
--      renewal never revives an expired ticket, so a row deleted here is
--      dead for good (`crashed`/`bumped` recorded, by_ticket p_ticket).
--      Only when no lower ticket is left at all (a new snapshot: a ticket
--      skipped as locked is still there) is p_ticket served (served_at,
--      `granted`), and served is returned true. Otherwise nothing more is
--      done and the waiter makes its serving check, which waits for such
--      a row and decides, as before.
--
-- The draw commits without waiting for its flush only when it served
-- nothing (sqlDraw reads served): a grant is durable before its holder is
-- told.
CREATE OR REPLACE FUNCTION {{schema}}.queue_ahead(p_ns text, p_res text, p_ticket bigint, p_owner text, p_label text,
    OUT ahead bigint, OUT ahead_owner text, OUT ahead_left interval, OUT served boolean)
LANGUAGE plpgsql VOLATILE AS $queue_ahead$
BEGIN
    served := false;
    INSERT INTO {{schema}}.queue_events (namespace, resource, ticket, event, label, owner)
    VALUES (p_ns, p_res, p_ticket, 'assigned', p_label, p_owner);
    SELECT t.ticket, t.owner, t.expires_at - pg_catalog.clock_timestamp()
    INTO ahead, ahead_owner, ahead_left
    FROM {{schema}}.tickets t
    WHERE t.namespace = p_ns AND t.resource = p_res AND t.ticket < p_ticket
      AND t.expires_at > pg_catalog.clock_timestamp()
    ORDER BY t.ticket DESC
    LIMIT 1;
    IF FOUND THEN
        RETURN;
    END IF;
    WITH dc AS (
        SELECT t.ticket FROM {{schema}}.tickets t
        WHERE t.namespace = p_ns AND t.resource = p_res AND t.ticket < p_ticket
          AND t.expires_at <= pg_catalog.clock_timestamp()
        FOR UPDATE SKIP LOCKED
    ),
    dead AS (
        DELETE FROM {{schema}}.tickets t USING dc
        WHERE t.namespace = p_ns AND t.resource = p_res AND t.ticket = dc.ticket
        RETURNING t.ticket, t.label, t.owner, t.served_at IS NOT NULL AS served
    )
    INSERT INTO {{schema}}.queue_events (namespace, resource, ticket, event, label, owner, by_ticket)
    SELECT p_ns, p_res, d.ticket, CASE WHEN d.served THEN 'crashed' ELSE 'bumped' END, d.label, d.owner, p_ticket
    FROM dead d ORDER BY d.ticket;
    IF EXISTS (SELECT 1 FROM {{schema}}.tickets t
               WHERE t.namespace = p_ns AND t.resource = p_res AND t.ticket < p_ticket) THEN
        RETURN;
    END IF;
    UPDATE {{schema}}.tickets t SET served_at = pg_catalog.clock_timestamp()
    WHERE t.namespace = p_ns AND t.resource = p_res AND t.ticket = p_ticket AND t.owner = p_owner
      AND t.served_at IS NULL AND t.expires_at > pg_catalog.clock_timestamp();
    IF FOUND THEN
        INSERT INTO {{schema}}.queue_events (namespace, resource, ticket, event, label, owner)
        VALUES (p_ns, p_res, p_ticket, 'granted', p_label, p_owner);
        served := true;
    END IF;
END
$queue_ahead$;
