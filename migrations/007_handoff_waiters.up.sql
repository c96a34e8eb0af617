-- Sentinel schema, version 7: who waits for queue events and election
-- hand-offs.
-- {{schema}} is replaced by the quoted schema name.

-- Queue events (draw, serve, leave, reset) notify FollowQueues only while
-- a follower of the namespace is registered: a transaction that calls
-- NOTIFY serializes its commit on a database-wide lock, so commits that
-- notify cannot share WAL flushes. A follower registers by moving
-- following_until forward (and keeps doing so while it follows); the
-- statements that record events lock this row FOR SHARE before deciding
-- whether to notify, so a registration and an event are ordered by the
-- row lock (see FollowQueues). A registration expires by itself: a
-- follower that died costs NOTIFYs until then, never a missed wake-up.
CREATE TABLE IF NOT EXISTS {{schema}}.queue_followers (
    namespace       text        NOT NULL PRIMARY KEY,
    following_until timestamptz NOT NULL DEFAULT '-infinity'
);

-- Electors that follow a live leader register on the group's row before
-- they sleep; a resignation notifies only while one is registered (see
-- Elector.Run). The registration expires by itself one TTL after the term
-- it was made under. A constant default rewrites nothing.
ALTER TABLE {{schema}}.leaders ADD COLUMN IF NOT EXISTS waiting_until timestamptz NOT NULL DEFAULT '-infinity';
