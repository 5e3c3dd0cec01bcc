-- rara 0015: the executors each worker reaches, on its row (issue 32; docs/ui.md, "Fleet").
--
-- A worker with remote executors (--executor-endpoint) knew alone which endpoints it reaches
-- and what each serves; rara_workers held only the union of capabilities. Now the worker
-- writes, when it registers and whenever that set changes, one JSON object per endpoint:
-- {"endpoint", "capabilities", "version", "live"} (rara_worker_register, db/functions/
-- workers.sql). The Fleet page lists them. Never a token: the worker writes only what the
-- Capabilities RPC answered and the address it dials.
--
-- Needs no owner privilege beyond the table's: no role, no database setting.

ALTER TABLE rara_workers ADD COLUMN executors jsonb NOT NULL DEFAULT '[]'
    CONSTRAINT rara_workers_executors_is_array CHECK (jsonb_typeof(executors) = 'array');

-- rara_worker_register gained p_executors; the two-argument one goes (db/functions/ makes the
-- new one after the migrations; a fresh database has neither yet).
DROP FUNCTION IF EXISTS rara_worker_register(text, text[]);
