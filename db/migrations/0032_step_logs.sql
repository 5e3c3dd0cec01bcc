-- rara 0032: what a step's handler writes (stdout, stderr, Python logging), kept per attempt
-- (docs/guide.md, "Step logs").
--
-- The worker captures an in-process handler's output, masks secrets in it, and ships it in
-- chunks while the step runs, the last before the attempt's end is written. The rows are
-- written only by rara_step_log_many (db/functions/step_logs.sql), fenced like every other
-- write of an attempt: the worker login that holds the lease, its token, the step running. An
-- attempt keeps at most 1 MiB (the worker keeps the head and the tail and says how much it
-- dropped between them: `dropped`); the function refuses more. Read under the namespace
-- policy of the step's run, like rara_events. Needs no owner.
CREATE TABLE rara_step_logs (
    step_id bigint NOT NULL REFERENCES rara_steps (id) ON DELETE CASCADE,
    attempt integer NOT NULL CHECK (attempt >= 1),
    -- Per attempt, 1, 2, 3… in the order written: a reader follows an attempt by its last seq.
    seq integer NOT NULL CHECK (seq >= 1),
    body text NOT NULL CHECK (octet_length(body) <= 65536),
    -- Bytes of output left out just before this chunk (the bound); 0 for nearly every chunk.
    dropped bigint NOT NULL DEFAULT 0 CHECK (dropped >= 0),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (step_id, attempt, seq)
);

CREATE POLICY rara_step_logs_read ON rara_step_logs FOR SELECT
    USING ((SELECT rara_caller_namespaces()) @> '{*}'
           OR (SELECT r.namespace FROM rara_steps s JOIN rara_runs r ON r.id = s.run_id
               WHERE s.id = rara_step_logs.step_id)
              = ANY ((SELECT rara_caller_namespaces())::text[]));

-- Isolation on already (an upgrade): the new table too, as rara_namespace_isolation would.
DO $$
BEGIN
    IF (SELECT c.relrowsecurity FROM pg_class c WHERE c.oid = 'rara_runs'::regclass) THEN
        ALTER TABLE rara_step_logs ENABLE ROW LEVEL SECURITY;
    END IF;
END $$;
