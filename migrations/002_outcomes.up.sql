-- Sentinel schema, version 2: final outcomes and waiters on Once keys.
-- {{schema}} is replaced by the quoted schema name.

-- A Once whose fn returned sentinel.Final(err) completes with that error as
-- its outcome; it is replayed to later callers as ErrFinal.
ALTER TABLE {{schema}}.executions ADD COLUMN IF NOT EXISTS final_error text;

-- Callers waiting for a key's result (Once with WithWait) count themselves
-- here; the statement that ends the execution notifies only when someone
-- waits, so a plain Once never pays for a NOTIFY.
ALTER TABLE {{schema}}.executions ADD COLUMN IF NOT EXISTS waiters integer NOT NULL DEFAULT 0;
