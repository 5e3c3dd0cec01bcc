-- rara 0006: costs flat in the size of a run (issue 17, item 2; bench/run_size.py measures it).
--
-- Until now every completion batch re-aggregated its runs by scanning all their steps
-- (run_refresh_many: bool_and/bool_or over rara_steps of the run), and found the dependants
-- of each finished step by walking all the steps of its run (`key = ANY (depends_on)`): in a
-- run of n steps both are O(n) per completion, O(n²) per run, and the scan ran while the
-- run's row was locked, so every completion of a big run queued behind it (measured: one run
-- of 10,000 parallel no-op steps drained at 0.46x the rate of 10,000 one-step runs, with a
-- backend waiting on that lock in a quarter of the samples, up to 236 ms).
--
-- Now a run carries the counts of its steps that ended, by outcome, moved by the statements
-- that end steps in the same transaction (the deltas of the steps they made terminal), and a
-- run ends when its counts reach its number of steps: O(1) per completion batch and run, in
-- one UPDATE of the run row that is the last statement before the commit. That row is still
-- one every completion batch of the run updates, but it is locked only from that UPDATE to
-- the commit (no scan, no round trip in between: the batch is one pipelined round trip), so
-- the wait is bounded by one commit; bench/run_size.py samples it.

-- A run's steps: how many there are, and how many ended each way. The run ends (the rule:
-- rara_run_end_status) when succeeded + failed + cancelled = total. Steps are terminal for
-- good (no transition leaves succeeded, failed or cancelled), so each is counted once.
ALTER TABLE rara_runs
    ADD COLUMN steps_total integer NOT NULL DEFAULT 0,
    ADD COLUMN steps_succeeded integer NOT NULL DEFAULT 0,
    ADD COLUMN steps_failed integer NOT NULL DEFAULT 0,
    ADD COLUMN steps_cancelled integer NOT NULL DEFAULT 0,
    ADD CONSTRAINT rara_runs_step_counts CHECK (
        steps_succeeded >= 0 AND steps_failed >= 0 AND steps_cancelled >= 0
        AND steps_succeeded + steps_failed + steps_cancelled <= steps_total);

-- The runs that exist: counted once, here.
UPDATE rara_runs r SET steps_total = c.total, steps_succeeded = c.succeeded,
    steps_failed = c.failed, steps_cancelled = c.cancelled
FROM (SELECT run_id, count(*) AS total,
             count(*) FILTER (WHERE status = 'succeeded') AS succeeded,
             count(*) FILTER (WHERE status = 'failed') AS failed,
             count(*) FILTER (WHERE status = 'cancelled') AS cancelled
      FROM rara_steps GROUP BY run_id) AS c
WHERE r.id = c.run_id;

-- The parent aggregation, the one rule, on a run's counts: NULL while a step is not terminal;
-- then failed if a step failed, else cancelled if cancel was asked or a step was cancelled,
-- else succeeded. (A SQL function the planner inlines: no call per row.)
CREATE FUNCTION rara_run_end_status(cancel_requested boolean, total integer, succeeded integer,
                                    failed integer, cancelled integer)
    RETURNS rara_run_status LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN succeeded + failed + cancelled < total THEN NULL
                WHEN failed > 0 THEN 'failed'
                WHEN cancel_requested OR cancelled > 0 THEN 'cancelled'
                ELSE 'succeeded' END::rara_run_status
$$;

-- The inverse of depends_on: the keys of the steps of the run that depend on this one, written
-- when the run starts. A finished step unblocks its dependants by primary-key-like probes of
-- (run_id, key) instead of a walk over every step of its run; a failed one cancels its
-- downstream the same way.
ALTER TABLE rara_steps ADD COLUMN dependants text[] NOT NULL DEFAULT '{}';

UPDATE rara_steps s SET dependants = d.keys
FROM (SELECT u.id, array_agg(b.key ORDER BY b.key) AS keys
      FROM rara_steps b
      CROSS JOIN LATERAL unnest(b.depends_on) AS dep(key)
      JOIN rara_steps u ON u.run_id = b.run_id AND u.key = dep.key
      GROUP BY u.id) AS d
WHERE s.id = d.id;
