-- Sentinel schema: the fair queue lock (Client.Turn).
-- {{schema}} is replaced by the quoted schema name.

-- One row per resource that ever had a ticket drawn. Drawing a ticket
-- locks this row (FOR UPDATE; it is never updated) and mints the ticket
-- from fencing_token while holding the lock, so on each resource tickets
-- commit in the order of their numbers: a ticket, once visible, never sees
-- a lower one appear later.
CREATE TABLE IF NOT EXISTS {{schema}}.queues (
    namespace  text        NOT NULL,
    resource   text        NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (namespace, resource)
);

-- One row per live (or dead, not yet skipped) ticket. The holder of a
-- resource is its lowest live ticket; it is derived, never stored.
-- served_at records when the ticket's client confirmed its turn (the
-- statement that checked no live lower ticket remains); a ticket that is
-- released, cancelled or skipped is deleted.
CREATE TABLE IF NOT EXISTS {{schema}}.tickets (
    namespace  text        NOT NULL,
    resource   text        NOT NULL,
    ticket     bigint      NOT NULL,
    label      text        NOT NULL DEFAULT '',
    owner      text        NOT NULL,
    host       text        NOT NULL DEFAULT '',
    pid        integer     NOT NULL DEFAULT 0,
    drawn_at   timestamptz NOT NULL,
    served_at  timestamptz,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (namespace, resource, ticket)
);

CREATE INDEX IF NOT EXISTS tickets_expires_at_idx ON {{schema}}.tickets (namespace, expires_at);

-- Progression of every queue: assigned, granted, completed, cancelled,
-- crashed (a served ticket died), bumped (a waiting ticket died and was
-- skipped). Written by the statement that makes the change.
CREATE TABLE IF NOT EXISTS {{schema}}.queue_events (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    namespace text        NOT NULL,
    resource  text        NOT NULL,
    ticket    bigint      NOT NULL,
    event     text        NOT NULL,
    label     text        NOT NULL DEFAULT '',
    owner     text        NOT NULL DEFAULT '',
    by_ticket bigint,
    at        timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp()
);

CREATE INDEX IF NOT EXISTS queue_events_resource_idx ON {{schema}}.queue_events (namespace, resource, id);
CREATE INDEX IF NOT EXISTS queue_events_at_idx ON {{schema}}.queue_events (at);
