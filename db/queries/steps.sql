-- Steps (rara_steps) outside an attempt: reads for clients, the operator and the worker's idle
-- loop (every write of a step is a function: db/functions/). Typed: rara.pg.steps.
-- Loaded by rara.pg.queries with every other file of this folder: one name space, each name
-- object first, then verb (`step_lease`, `run_cancel`); `_many` takes arrays.
-- aiosql suffixes: ^ one row, $ one value, ! no result; none: all rows. No literal percent
-- signs: statements go to psycopg's %-style placeholders.

-- name: step_list
-- The run's steps as its definition lists them: a map step is one row, whose `children` sums
-- up its children (step_map_summary), never one row per child. reused_from: where a step
-- reused from the step cache took its result (migration 0013). wait_*: what a waiting step
-- (migration 0021: blocked, with a rara_waits row) waits for; null for every other step.
SELECT s.id, s.key, s.depends_on, s.capability, s.executor, s.status, s.attempt,
       s.max_attempts,
       -- (a paused run's held step: its own, not the hold's 'infinity': rara_run_set_paused)
       coalesce(s.held_available_at, s.available_at) AS available_at, s.started_at, s.finished_at, s.result, s.error,
       s.leased_by, m.summary AS children, s.reused_from, w.kind AS wait_kind,
       w.signal AS wait_signal, w.due_at AS wait_due_at
FROM rara_steps s
LEFT JOIN LATERAL (SELECT rara_map_summary(s.map_total, s.map_succeeded, s.map_failed,
                                            s.id) AS summary
                   WHERE s.map_over IS NOT NULL) m ON true
LEFT JOIN rara_waits w ON w.step_id = s.id
WHERE s.run_id = :run_id AND s.map_parent IS NULL ORDER BY s.id;

-- name: step_list_progress
-- Each step of a run with its latest progress event (of its current attempt); a map step's
-- progress is its children's: the fraction done and a summary (done/running/failed of N);
-- wait_kind: what a waiting step waits for (timer | signal | approval; null: it does not).
SELECT s.id, s.key, s.capability, s.executor, s.status::text AS status, s.attempt,
       s.max_attempts, s.started_at, s.finished_at, s.result, s.error,
       CASE WHEN s.map_over IS NULL THEN e.fraction
            ELSE s.map_succeeded::double precision / nullif(s.map_total, 0) END AS fraction,
       CASE WHEN s.map_over IS NULL THEN e.message
            ELSE rara_map_summary(s.map_total, s.map_succeeded, s.map_failed, s.id)
       END AS message,
       e.metrics, s.map_over IS NOT NULL AS is_map, s.reused_from, w.kind AS wait_kind
FROM rara_steps s
LEFT JOIN LATERAL (
    SELECT fraction, message, metrics FROM rara_events
    WHERE step_id = s.id AND attempt = s.attempt
    ORDER BY seq DESC LIMIT 1
) e ON true
LEFT JOIN rara_waits w ON w.step_id = s.id
WHERE s.run_id = :run_id AND s.map_parent IS NULL ORDER BY s.id;

-- name: step_next_available$
-- Seconds until the earliest backing-off ready step of the served pairs becomes leasable (NULL:
-- none). Asked only when a lease came back short, so a retry runs when its backoff ends
-- instead of at the next poll.
SELECT extract(epoch FROM min(n.available_at) - now())::double precision
FROM unnest(CAST(:capabilities AS text[]), CAST(:executors AS text[])) AS cap(name, executor)
CROSS JOIN LATERAL (
    SELECT min(available_at) AS available_at FROM rara_steps
    WHERE status = 'ready' AND capability = cap.name AND executor = cap.executor
      AND available_at < 'infinity'  -- not a paused run's held step (rara_run_set_paused)
) AS n;

-- name: step_backlog
-- Ready + running steps per capability, and the capability's concurrency limit (null: none;
-- migration 0009): what the operator scales pools by — no more than the limit lets run.
SELECT b.capability, b.ready, b.running, l.max_running
FROM (SELECT capability,
             -- (not a paused run's held steps: no pool scales for work that may not run)
             count(*) FILTER (WHERE status = 'ready' AND available_at < 'infinity') AS ready,
             count(*) FILTER (WHERE status = 'running') AS running
      FROM rara_steps WHERE status IN ('ready', 'running') GROUP BY capability) AS b
LEFT JOIN rara_capability_limits l USING (capability)
ORDER BY b.capability;

-- name: step_list_failed
SELECT s.run_id, s.key, s.capability, s.attempt, s.finished_at, s.error
FROM rara_steps s WHERE s.status = 'failed'
ORDER BY s.finished_at DESC LIMIT :limit;
