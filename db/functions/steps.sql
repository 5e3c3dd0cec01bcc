-- The ground floor of the step graph: what every end of a step does to the rest of its run,
-- called by each file that ends steps (lease.sql: ends and the reaper; maps.sql: a map's end;
-- waits.sql: a wait's end; runs.sql: starts, resumes and cancels) and calling none of them.
-- Repeatable (rara.pg.migrate): edit in place.

-- The one rule of a run's end (migration 0006): NULL while a step of it is not terminal, then
-- failed if one failed, else cancelled if the run was cancelled or a step was, else succeeded.
-- LANGUAGE sql, IMMUTABLE: inlined into rara_run_count's UPDATE (migration 0010;
-- tests/db/test_run_counts.py checks the plan), so it comes first.
CREATE OR REPLACE FUNCTION rara_run_end_status(cancel_requested boolean, total integer,
                                               succeeded integer, failed integer,
                                               cancelled integer)
    RETURNS rara_run_status LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN succeeded + failed + cancelled < total THEN NULL::rara_run_status
                WHEN failed > 0 THEN 'failed'::rara_run_status
                WHEN cancel_requested OR cancelled > 0 THEN 'cancelled'::rara_run_status
                ELSE 'succeeded'::rara_run_status END
$$;
SELECT rara_grant('rara_run_end_status');  -- only through rara_run_count

CREATE OR REPLACE FUNCTION rara_run_count(p_deltas jsonb, p_succeeded_runs bigint[] DEFAULT '{}')
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    -- The parent aggregation, by counters (migration 0006): the runs' step counts move by
    -- p_deltas, a JSON array of {run_id, succeeded, failed, cancelled} — the steps the calling
    -- transaction made terminal — and by one success per entry of p_succeeded_runs (a run once
    -- per step of it that succeeded: rara_step_end_many's batch), and a run whose steps are
    -- then all terminal ends by the one rule (rara_run_end_status). O(1) per run, whatever
    -- its size. Only the functions that end steps call it (no role may: the deltas would be
    -- the caller's word), as their last statement: run rows are the last locks a transaction
    -- takes, in id order, so no two transactions (nor a run cancel, which takes the run's
    -- steps first) wait on each other in a cycle; and a row is held only until the commit.
    -- Under READ COMMITTED the UPDATE applies the deltas to the newest version of the row (a
    -- concurrent end's commit that it waited for included): two siblings ending in concurrent
    -- transactions are both counted, and the second ends the run.
    WITH d AS MATERIALIZED (
        -- (a missing count is 0; `total`: steps added to the run, a map step's children)
        SELECT d.run_id, coalesce(sum(d.succeeded), 0)::integer AS succeeded,
               coalesce(sum(d.failed), 0)::integer AS failed,
               coalesce(sum(d.cancelled), 0)::integer AS cancelled,
               coalesce(sum(d.total), 0)::integer AS total
        FROM (SELECT * FROM jsonb_to_recordset(p_deltas)
                  AS d(run_id bigint, succeeded integer, failed integer, cancelled integer,
                       total integer)
              UNION ALL
              -- one success each: the batch of successes' runs, without a JSON object apiece
              SELECT r.run_id, 1, NULL, NULL, NULL FROM unnest(p_succeeded_runs) AS r(run_id))
            AS d
        GROUP BY d.run_id
    ), locked AS (
        SELECT r.id FROM rara_runs r WHERE r.id = ANY (ARRAY(SELECT d.run_id FROM d))
        ORDER BY r.id
        FOR NO KEY UPDATE
    )
    UPDATE rara_runs r SET
        steps_total = r.steps_total + d.total,
        steps_succeeded = r.steps_succeeded + d.succeeded,
        steps_failed = r.steps_failed + d.failed,
        steps_cancelled = r.steps_cancelled + d.cancelled,
        status = CASE WHEN r.status IN ('pending', 'running') THEN coalesce(rara_run_end_status(
            r.cancel_requested, r.steps_total + d.total, r.steps_succeeded + d.succeeded,
            r.steps_failed + d.failed, r.steps_cancelled + d.cancelled), r.status)
            ELSE r.status END,
        finished_at = CASE WHEN r.status IN ('pending', 'running') AND rara_run_end_status(
            r.cancel_requested, r.steps_total + d.total, r.steps_succeeded + d.succeeded,
            r.steps_failed + d.failed, r.steps_cancelled + d.cancelled) IS NOT NULL
            THEN now() ELSE r.finished_at END
    FROM d
    WHERE r.id = d.run_id AND r.id = ANY (ARRAY(SELECT l.id FROM locked l));
END $$;
SELECT rara_grant('rara_run_count');  -- only through the functions that end steps

CREATE OR REPLACE FUNCTION rara_step_cancel_dependants(p_run_id bigint, p_key text)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    waiting bigint[];
    cancelled integer;
BEGIN
    -- A step failed for good: every step downstream of it in the run can never run; cancel
    -- them. Walked by the dependants of each step (probes of (run_id, key), migration 0006):
    -- the cost is the downstream's size, not the run's. Returns how many were cancelled.
    -- Their rows are locked in id order before the update (whatever order the walk found
    -- them in), as every end locks step rows (rara_step_end_lock).
    WITH RECURSIVE downstream(key) AS (
        SELECT p_key
        UNION
        SELECT dependant.key FROM downstream d
        JOIN rara_steps s ON s.run_id = p_run_id AND s.key = d.key
        CROSS JOIN LATERAL unnest(s.dependants) AS dependant(key)
    )
    SELECT array_agg(s.id) INTO waiting
    FROM downstream d JOIN rara_steps s ON s.run_id = p_run_id AND s.key = d.key
    WHERE s.status IN ('blocked', 'ready');
    PERFORM 1 FROM rara_steps s WHERE s.id = ANY (waiting) ORDER BY s.id FOR UPDATE;
    WITH cancelled AS (
        UPDATE rara_steps s SET status = 'cancelled', finished_at = now(),
            error = jsonb_build_object('code', 'UPSTREAM_FAILED',
                                       'message', 'dependency ' || p_key || ' failed')
        WHERE s.id = ANY (waiting) AND s.status IN ('blocked', 'ready')
        RETURNING s.id
    )
    SELECT count(*) INTO cancelled FROM cancelled;
    RETURN cancelled;
END $$;
SELECT rara_grant('rara_step_cancel_dependants');
