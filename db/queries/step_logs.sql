-- Step logs: what an attempt's handler wrote, in chunks (rara_step_logs, migration 0032), shipped
-- by the worker that holds the lease (step_log_many, rara.worker.step_logs) and read by the CLI
-- and the dashboard under the namespace policy of the step's run (rara.pg.step_logs).
-- Loaded by rara.pg.queries with every other file of this folder: one name space, each name
-- object first, then verb (`step_lease`, `run_cancel`); `_many` takes arrays.
-- aiosql suffixes: ^ one row, $ one value, ! no result; none: all rows. No literal percent
-- signs: statements go to psycopg's %-style placeholders.

-- name: step_log_many
-- Chunks of many attempts (step, token, seq, body, bytes dropped before it); returns the steps
-- still owned.
SELECT * FROM rara_step_log_many(
    p_worker => :worker, p_step_ids => CAST(:step_ids AS bigint[]),
    p_tokens => CAST(:tokens AS uuid[]), p_seqs => CAST(:seqs AS integer[]),
    p_bodies => CAST(:bodies AS text[]), p_dropped => CAST(:dropped AS bigint[]));

-- name: step_log_list
-- A run's chunks (of one step when :step_key is not NULL, and of a map step's children with it)
-- after those already read: :seen maps "step_id:attempt" to the last seq read of that attempt
-- (an attempt's seqs are written in order, each after the one before committed, so a reader
-- that follows by them misses none).
SELECT l.step_id, s.key, l.attempt, l.seq, l.body, l.dropped, l.created_at
FROM rara_step_logs l JOIN rara_steps s ON s.id = l.step_id
WHERE s.run_id = :run_id
  AND (CAST(:step_key AS text) IS NULL OR s.key = :step_key
       OR s.map_parent = (SELECT p.id FROM rara_steps p
                          WHERE p.run_id = :run_id AND p.key = :step_key))
  AND l.seq > coalesce(CAST(CAST(:seen AS jsonb) ->> (l.step_id || ':' || l.attempt) AS integer), 0)
ORDER BY l.created_at, l.step_id, l.attempt, l.seq
LIMIT :limit;

-- name: step_log_marks
-- The dashboard's live view: per watched run, the sum of the last seq of its running steps'
-- current attempts (one index probe each); a run's mark moves when one of them wrote more.
SELECT s.run_id,
       CAST(sum((SELECT max(l.seq) FROM rara_step_logs l
                 WHERE l.step_id = s.id AND l.attempt = s.attempt)) AS bigint) AS mark
FROM rara_steps s
WHERE s.run_id = ANY (CAST(:run_ids AS bigint[])) AND s.status = 'running'
GROUP BY s.run_id;
