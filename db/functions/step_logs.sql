-- Step logs: what an attempt's handler wrote (stdout, stderr, Python logging), shipped by the
-- worker that holds the attempt's lease (rara.worker.step_logs), read under the namespace
-- policy of the step's run (migration 0032; docs/guide.md, "Step logs"). No role writes
-- rara_step_logs directly. Called by the worker's store (rara.worker.store) through
-- db/queries/step_logs.sql. Repeatable (rara.pg.migrate): edit in place.

-- What one attempt may keep: 1 MiB of output plus the line that says how much was dropped
-- (the worker keeps 512 KiB of head and 512 KiB of tail: rara.worker.step_logs.HEAD_BYTES).
CREATE OR REPLACE FUNCTION rara_step_log_bound() RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$ SELECT 1048576 + 1024::bigint $$;
SELECT rara_grant('rara_step_log_bound');  -- only through rara_step_log_many

CREATE OR REPLACE FUNCTION rara_step_log_many(
    p_worker text, p_step_ids bigint[], p_tokens uuid[], p_seqs integer[], p_bodies text[],
    p_dropped bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT SET enable_seqscan = off AS $$
DECLARE
    over record;
BEGIN
    -- Log chunks of many attempts in one statement, each fenced like progress
    -- (rara_step_progress_many): the worker's login, its lease token, the step running, FOR
    -- SHARE so that no chunk lands after a concurrent reap or cancel. Returns the steps still
    -- owned; a chunk of any other step is not written. A replayed seq (its first write failed
    -- in flight) is the same chunk again: kept once. An attempt's chunks beyond the bound are
    -- refused, naming the step: the worker never sends them.
    PERFORM rara_worker_check_login(p_worker);
    WITH p AS (
        SELECT * FROM unnest(p_step_ids, p_tokens, p_seqs, p_bodies, p_dropped)
            AS p(step_id, token, seq, body, dropped)
    ), owned AS (
        SELECT p.*, s.attempt FROM p JOIN rara_steps s
            ON s.id = ANY (p_step_ids) AND s.id = p.step_id AND s.lease_token = p.token
           AND s.leased_by = p_worker AND s.status = 'running'
        FOR SHARE OF s
    ), fresh AS (  -- a replayed seq is stored already: it adds nothing
        SELECT o.* FROM owned o
        WHERE NOT EXISTS (SELECT FROM rara_step_logs l
                          WHERE l.step_id = o.step_id AND l.attempt = o.attempt
                            AND l.seq = o.seq)
    ), totals AS (
        SELECT f.step_id, f.attempt,
               sum(octet_length(f.body)) + coalesce((
                   SELECT sum(octet_length(l.body)) FROM rara_step_logs l
                   WHERE l.step_id = f.step_id AND l.attempt = f.attempt), 0) AS total
        FROM fresh f GROUP BY f.step_id, f.attempt
    )
    SELECT t.* INTO over FROM totals t WHERE t.total > rara_step_log_bound() LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'step % attempt %: % bytes of log, over the % bytes an attempt keeps',
            over.step_id, over.attempt, over.total, rara_step_log_bound()
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    RETURN QUERY
    WITH p AS (
        SELECT * FROM unnest(p_step_ids, p_tokens, p_seqs, p_bodies, p_dropped)
            AS p(step_id, token, seq, body, dropped)
    ), owned AS (  -- (locked already, by the check above)
        SELECT p.*, s.attempt FROM p JOIN rara_steps s
            ON s.id = ANY (p_step_ids) AND s.id = p.step_id AND s.lease_token = p.token
           AND s.leased_by = p_worker AND s.status = 'running'
    ), written AS (
        INSERT INTO rara_step_logs (step_id, attempt, seq, body, dropped)
        SELECT o.step_id, o.attempt, o.seq, o.body, coalesce(o.dropped, 0) FROM owned o
        ON CONFLICT (step_id, attempt, seq) DO NOTHING
    )
    SELECT DISTINCT o.step_id FROM owned o;
END $$;
SELECT rara_grant('rara_step_log_many', 'rara_worker');
