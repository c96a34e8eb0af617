-- Sentinel schema, version 12: the ticket a draw waits behind, read after
-- the draw holds the queue's lock. {{schema}} is replaced by the quoted
-- schema name.

-- queue_ahead returns the live ticket directly below p_ticket in queue
-- (p_ns, p_res): its number, owner and time left on the database clock, or
-- NULLs when there is none. It is called only by the draw (sqlDraw in
-- queue_sql.go), after the draw locked the queue's row, and it is VOLATILE
-- plpgsql so that its query takes a snapshot of its own: the draw's
-- statement took its snapshot before it waited for the lock, and a leave
-- that committed while it waited is not in that snapshot, so a ticket read
-- from it could already be gone. Read here, every leave that committed
-- before the draw held the lock is seen, and every leave that commits
-- after it waits for the draw's commit (the leave locks the queue's row
-- too) and so sees the new ticket: a ticket that finds a live ticket ahead
-- is handed the turn, or woken, by a later leave, or re-checks once the
-- ticket ahead expires (Client.waitTurn), with no serving check of its own
-- first.
CREATE OR REPLACE FUNCTION {{schema}}.queue_ahead(p_ns text, p_res text, p_ticket bigint,
    OUT ahead bigint, OUT ahead_owner text, OUT ahead_left interval)
LANGUAGE plpgsql VOLATILE AS $queue_ahead$
BEGIN
    SELECT t.ticket, t.owner, t.expires_at - pg_catalog.clock_timestamp()
    INTO ahead, ahead_owner, ahead_left
    FROM {{schema}}.tickets t
    WHERE t.namespace = p_ns AND t.resource = p_res AND t.ticket < p_ticket
      AND t.expires_at > pg_catalog.clock_timestamp()
    ORDER BY t.ticket DESC
    LIMIT 1;
END
$queue_ahead$;
