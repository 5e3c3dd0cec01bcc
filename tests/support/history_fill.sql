-- History for bench/history.py and the retention tests (history_fill.py): finished runs with
-- their steps, attempts and events, inserted set-wise as the database's owner (with
-- session_replication_role = replica: no foreign key checks or triggers per row) — what months of a busy deployment leave. run_enqueue_many
-- (db/queries/runs.sql) inserts work to do; nothing in the runtime inserts work already done,
-- so these statements are the bench's own. Ids are explicit (after :base_run, :base_step) so
-- that every table can be filled from the one before without RETURNING millions of rows; the
-- oldest runs have the lowest ids, as in a deployment.
-- aiosql names; `!`: no result. No literal percent signs (psycopg placeholders).

-- name: history_runs!
-- :runs runs of :definition that succeeded, one finished every :span_seconds / :runs seconds
-- up to now.
INSERT INTO rara_runs (id, namespace, definition_version_id, input, status, created_at,
                       started_at, finished_at, steps_total, steps_succeeded)
OVERRIDING SYSTEM VALUE
SELECT :base_run + i, v.namespace, v.id, '{}', 'succeeded', at.t - interval '2 minutes',
       at.t - interval '1 minute', at.t, :steps, :steps
FROM (SELECT id, namespace FROM rara_definition_versions
      WHERE namespace = 'default' AND name = :definition
      ORDER BY version DESC LIMIT 1) AS v,
     generate_series(1, :runs) AS i,
     LATERAL (SELECT now() - make_interval(secs => :span_seconds * (:runs - i)::float8 / :runs)
              AS t) AS at;

-- name: history_steps!
-- :steps succeeded steps per run (keys s0, s1, …), each ended by its attempt number :attempts.
INSERT INTO rara_steps (id, run_id, namespace, key, capability, executor, payload, priority,
                        max_attempts, retry_initial_ms, retry_max_ms, retry_coefficient, status,
                        attempt, available_at, started_at, finished_at, result)
OVERRIDING SYSTEM VALUE
SELECT :base_step + (r.id - :base_run - 1) * :steps + k + 1, r.id, r.namespace, 's' || k,
       :capability,
       'inprocess', '{}', 0, :attempts + 1, 1000, 60000, 2, 'succeeded', :attempts,
       r.started_at, r.started_at, r.finished_at, '{"ok": true}'
FROM rara_runs r, generate_series(0, :steps - 1) AS k
WHERE r.id > :base_run;

-- name: history_attempts!
-- :attempts attempts per step, one after the other within the step's time: the last
-- succeeded, the ones before failed (and were retried).
INSERT INTO rara_attempts (step_id, attempt, run_id, worker, lease_token, started_at, ended_at,
                           ended_by, outcome, error)
SELECT s.id, a, s.run_id, 'history-worker', gen_random_uuid(),
       s.started_at + (s.finished_at - s.started_at) * (a - 1) / :attempts,
       s.started_at + (s.finished_at - s.started_at) * a / :attempts, 'history-worker',
       CASE WHEN a < :attempts THEN 'failed' ELSE 'succeeded' END::rara_attempt_outcome,
       CASE WHEN a < :attempts
            THEN '{"code": "HANDLER_ERROR", "message": "transient"}'::jsonb END
FROM rara_steps s, generate_series(1, :attempts) AS a
WHERE s.id > :base_step;

-- name: history_events!
-- One progress event per attempt, half-way through it.
INSERT INTO rara_events (step_id, attempt, seq, kind, fraction, message, metrics, created_at)
SELECT a.step_id, a.attempt, 1, 'progress', 0.5, 'half-way', '{"loss": 0.5}',
       a.started_at + (a.ended_at - a.started_at) / 2
FROM rara_attempts a
WHERE a.step_id > :base_step;
