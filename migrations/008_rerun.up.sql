-- Sentinel schema, version 8: re-runs after a crash (Once with WithRerun).
-- {{schema}} is replaced by the quoted schema name.

-- attempt counts the runs of fn under one key that began after an earlier
-- run stopped without an outcome (1 for the first run; a re-run adds one;
-- a Retryable hand-back or a takeover of a claim that never started fn
-- keeps it). max_attempts is the bound recorded by the claim that started
-- the current attempt: the WithRerun of its caller, lowered (never raised)
-- by every re-run's caller; 1 means no re-run (the default, at-most-once).
-- A key executing with an expired lease is re-run only by a caller that
-- gives WithRerun too, and only while attempt < least(max_attempts, the
-- caller's own bound); otherwise it is uncertain, as before.
--
-- Constant defaults: PostgreSQL 11+ adds these columns without rewriting
-- the table.
ALTER TABLE {{schema}}.executions ADD COLUMN IF NOT EXISTS attempt integer NOT NULL DEFAULT 1;
ALTER TABLE {{schema}}.executions ADD COLUMN IF NOT EXISTS max_attempts integer NOT NULL DEFAULT 1;
