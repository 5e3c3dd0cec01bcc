-- rara 0015: the executors each worker reaches, on its row, and the artifacts each step read
-- (issue 32; docs/ui.md, "Fleet"; docs/artifacts.md, "Lineage").
--
-- A worker with remote executors (--executor-endpoint) knew alone which endpoints it reaches
-- and what each serves; rara_workers held only the union of capabilities. Now the worker
-- writes, when it registers and whenever that set changes, one JSON object per endpoint:
-- {"endpoint", "capabilities", "version", "live"} (rara_worker_register, db/functions/
-- workers.sql). The Fleet page lists them. Never a token: the worker writes only what the
-- Capabilities RPC answered and the address it dials.
--
-- rara_step_reads: the blobs a step's successful attempt read, written with its end in the
-- same transaction (rara_step_end_many). An in-process handler's reads are the digests it
-- fetched through its context's artifact store; a gRPC step's are the inputs the worker
-- handed to the executor (what it was given, not what it opened). Lineage names these readers;
-- steps ended before this migration have no rows and keep the dependency rule, labelled so.
--
-- Needs no owner privilege beyond the tables': no role, no database setting.

ALTER TABLE rara_workers ADD COLUMN executors jsonb NOT NULL DEFAULT '[]'
    CONSTRAINT rara_workers_executors_is_array CHECK (jsonb_typeof(executors) = 'array');

-- rara_worker_register gained p_executors; the two-argument one goes (db/functions/ makes the
-- new one after the migrations; a fresh database has neither yet).
DROP FUNCTION IF EXISTS rara_worker_register(text, text[]);

CREATE TABLE rara_step_reads (
    step_id bigint NOT NULL REFERENCES rara_steps (id) ON DELETE CASCADE,
    digest  text NOT NULL,
    PRIMARY KEY (step_id, digest)
);
-- Lineage asks by digest: who read this blob.
CREATE INDEX rara_step_reads_digest ON rara_step_reads (digest);
