-- What happened in a run: its progress events (rara_events, written by step_progress_many in
-- lease.sql) and its attempt history (rara_attempts). Typed: rara.pg.events.
-- Loaded by rara.pg.queries with every other file of this folder: one name space, each name
-- object first, then verb (`step_lease`, `run_cancel`); `_many` takes arrays.
-- aiosql suffixes: ^ one row, $ one value, ! no result; none: all rows. No literal percent
-- signs: statements go to psycopg's %-style placeholders.

-- name: event_list
SELECT s.key, e.attempt, e.seq, e.kind, e.fraction, e.message, e.metrics, e.created_at
FROM rara_events e JOIN rara_steps s ON s.id = e.step_id
WHERE s.run_id = :run_id ORDER BY e.created_at, s.key, e.attempt, e.seq;

-- name: attempt_list
SELECT s.key, a.attempt, a.worker, a.outcome::text AS outcome, a.started_at, a.ended_at,
       a.error
FROM rara_attempts a JOIN rara_steps s ON s.id = a.step_id
WHERE a.run_id = :run_id ORDER BY s.id, a.attempt;
