-- Runs (rara_runs): start (with the run's steps), read, cancel (the writes are functions of
-- db/functions/runs.sql; the parent aggregation by counters is db/functions/steps.sql's). Typed:
-- rara.pg.runs.
-- Loaded by rara.pg.queries with every other file of this folder: one name space, each name
-- object first, then verb (`step_lease`, `run_cancel`); `_many` takes arrays.
-- aiosql suffixes: ^ one row, $ one value, ! no result; none: all rows. No literal percent
-- signs: statements go to psycopg's %-style placeholders.

-- name: run_start^
-- A run and its steps in one round trip (rara.runs.start_run; db/functions/runs.sql tells
-- the rules). No row: no such definition; run_id null: nothing was inserted (see `missing`,
-- `retired_at`, or a stale :digest answered with the version's spec).
SELECT * FROM rara_run_start(
    p_name => :name, p_version => CAST(:version AS integer), p_digest => CAST(:digest AS text),
    p_input => CAST(:input AS jsonb),
    p_idempotency_key => CAST(:idempotency_key AS text),
    p_check_capabilities => CAST(:check_capabilities AS boolean),
    p_alive_seconds => :alive_seconds, p_namespace => :namespace);

-- name: run_get_by_key$
-- An idempotency key names one run in its namespace.
SELECT id FROM rara_runs WHERE namespace = :namespace AND idempotency_key = :idempotency_key;

-- name: run_get^
-- A run, with its phase (its status, or `waiting`) and what it waits for: rara_run_phase.
SELECT r.id, r.namespace, r.status, r.input, r.idempotency_key, r.cancel_requested, r.error, r.created_at,
       r.started_at, r.finished_at, v.name AS definition, v.version, v.digest, ph.phase,
       ph.waiting_for
FROM rara_runs r JOIN rara_definition_versions v ON v.id = r.definition_version_id
CROSS JOIN LATERAL rara_run_phase(r.id, r.status) ph
WHERE r.id = :run_id;

-- name: run_status_many
-- The operator's WorkflowRun status sync (rara.operator.runsync): every run of :run_ids in
-- one read per tick, however many WorkflowRuns point at them, instead of one read per
-- WorkflowRun. The step counts are the run's own counters (the parent aggregation keeps them
-- in the transaction of every step change), so no step row is read. A run that is missing
-- (deleted by hand) has no row. The phase (rara_run_phase) is the WorkflowRun's: `Waiting`
-- while only a wait can move the run on.
SELECT r.id, r.status, v.version, r.steps_succeeded AS done, r.steps_total AS total,
       r.started_at, r.finished_at, ph.phase, ph.waiting_for
FROM rara_runs r JOIN rara_definition_versions v ON v.id = r.definition_version_id
CROSS JOIN LATERAL rara_run_phase(r.id, r.status) ph
WHERE r.id = ANY(CAST(:run_ids AS bigint[]));

-- name: run_list
-- The newest runs of :namespace (of every namespace when null), each with its phase
-- (rara_run_phase: its status, `paused` or `waiting`); :status filters by the phase
-- (rara.waits RUN_PHASES), a waiting or paused run being an unfinished one.
SELECT r.id, r.namespace, r.status, v.name AS definition, v.version, r.created_at,
       r.finished_at, r.steps_succeeded AS done, r.steps_total AS total, ph.phase,
       ph.waiting_for
FROM rara_runs r JOIN rara_definition_versions v ON v.id = r.definition_version_id
CROSS JOIN LATERAL rara_run_phase(r.id, r.status) ph
WHERE (CAST(:status AS text) IS NULL OR r.status::text = :status
       OR (:status IN ('waiting', 'paused') AND r.status IN ('pending', 'running')))
  AND (CAST(:status AS text) IS NULL OR ph.phase = :status)
  -- A waiting run has an open wait: that filter starts from rara_waits, not from every run.
  AND (CAST(:status AS text) IS DISTINCT FROM 'waiting'
       OR r.id = ANY (ARRAY(SELECT DISTINCT w.run_id FROM rara_waits w)))
  AND (CAST(:namespace AS text) IS NULL OR r.namespace = :namespace)
ORDER BY r.id DESC LIMIT :limit;

-- name: run_waiting_count
-- The runs waiting now (rara_run_phase), by what they wait for: an approval when any of
-- their open waits is a gate, else a signal, else a timer (the operator's rara_runs_waiting
-- gauge). From the open waits, never a scan of the runs: only a run with one can wait.
SELECT CASE WHEN ph.waiting_for @> '[{"kind": "approval"}]' THEN 'approval'
            WHEN ph.waiting_for @> '[{"kind": "signal"}]' THEN 'signal'
            ELSE 'timer' END AS kind,
       count(*) AS runs
FROM (SELECT DISTINCT w.run_id FROM rara_waits w) w
JOIN rara_runs r ON r.id = w.run_id
CROSS JOIN LATERAL rara_run_phase(r.id, r.status) ph
WHERE ph.phase = 'waiting'
GROUP BY 1;

-- name: run_cancel$
-- True: cancelled now; false: the run had already ended; null: no such run.
SELECT rara_run_cancel(p_run_id => :run_id);

-- name: run_pause_set^
-- Pause (:paused) or resume a run: (outcome, steps), outcome 'paused' | 'resumed' with the
-- steps held or released, 'unchanged' or 'ended'; no row: no such run.
SELECT outcome, steps FROM rara_run_set_paused(p_run_id => :run_id, p_paused => :paused);

-- name: run_enqueue_many
-- Tests and benchmarks only, as the database's owner (no process role may insert: migration
-- 0007; not the runtime path: no input validation, no routing check):
-- :runs runs of the definition version :namespace/:name/:version (the latest when null), each
-- with :steps
-- steps of one capability inserted set-wise. Keys: :key0, :key1… when :numbered, else :key;
-- :chained makes each step depend on the one before (only the first ready), otherwise every
-- step is ready. :concurrency_keys (null: none): the runs' steps take concurrency keys
-- k0, k1… in turn, that many distinct, each at most :concurrency_max running (a rule
-- `concurrency: {key: input.k, max: …}` would give them; migration 0020). Returns each step's
-- run id. One statement whatever the size, so a new NOT NULL column of rara_steps is added
-- here and in run_start only.
WITH version AS (
    SELECT id, namespace FROM rara_definition_versions
    WHERE namespace = :namespace AND name = :name
      AND (CAST(:version AS integer) IS NULL OR version = :version)
    ORDER BY version DESC LIMIT 1
), runs AS (
    INSERT INTO rara_runs (namespace, definition_version_id, input, steps_total)
    SELECT version.namespace, version.id, CAST(:input AS jsonb), :steps
    FROM version, generate_series(1, :runs)
    RETURNING id, namespace
)
INSERT INTO rara_steps (run_id, namespace, key, depends_on, dependants, pending_deps, capability,
                        executor, payload, priority, max_attempts, retry_initial_ms, retry_max_ms,
                        retry_coefficient, status, concurrency_key, concurrency_max)
SELECT r.id, r.namespace, CASE WHEN :numbered THEN :key || i ELSE :key END,
       CASE WHEN :chained AND i > 0 THEN ARRAY[:key || (i - 1)] ELSE '{}'::text[] END,
       CASE WHEN :chained AND i < :steps - 1 THEN ARRAY[:key || (i + 1)] ELSE '{}'::text[] END,
       CASE WHEN :chained AND i > 0 THEN 1 ELSE 0 END,
       :capability, :executor, CAST(:payload AS jsonb), :priority, :max_attempts,
       :retry_initial_ms, :retry_max_ms, 2,
       CASE WHEN :chained AND i > 0 THEN 'blocked' ELSE 'ready' END::rara_step_status,
       CASE WHEN CAST(:concurrency_keys AS integer) IS NOT NULL
           THEN r.namespace || '/' || :name || '.' || :key || '=k'
                || mod(r.id, CAST(:concurrency_keys AS integer)) END,
       CASE WHEN CAST(:concurrency_keys AS integer) IS NOT NULL
           THEN CAST(:concurrency_max AS integer) END
FROM runs r, generate_series(0, :steps - 1) AS i
ORDER BY r.id, i
RETURNING run_id;

-- name: database_now
-- The database's clock: `rara runs watch` times running steps by it, not by the viewer's.
SELECT now();

-- name: run_resume^
-- A new run of run :run_id's version and input reusing every step that succeeded in it
-- (rara.runs.resume_run; db/functions/runs.sql tells the rules): (run_id, reused, created).
-- :rerun_from, when not null, names the step that runs again with all it feeds.
SELECT * FROM rara_run_resume(p_run_id => :run_id,
                              p_idempotency_key => CAST(:idempotency_key AS text),
                              p_rerun_from => CAST(:rerun_from AS text));
