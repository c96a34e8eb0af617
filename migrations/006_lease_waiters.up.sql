-- Sentinel schema, version 6: waiters on lease keys.
-- {{schema}} is replaced by the quoted schema name.

-- Callers waiting for a lease key (Lease with WithWait) count themselves
-- here, as Once waiters do on executions.waiters; a release notifies only
-- when someone waits. A transaction that calls NOTIFY serializes its commit
-- on a database-wide lock, so commits that notify cannot share WAL flushes:
-- a release nobody waits for must not pay that. The count only ever errs
-- high (a waiter that died without leaving), which costs a NOTIFY, never a
-- missed wake-up. Adding a column with a constant default rewrites nothing.
ALTER TABLE {{schema}}.leases ADD COLUMN IF NOT EXISTS waiters integer NOT NULL DEFAULT 0;
