-- Runs (rara_runs): start (with the run's steps), read, cancel, and the parent aggregation that
-- follows every step change (by counters: run_count_many). Typed: rara.pg.runs.
-- Loaded by rara.pg.queries with every other file of this folder: one name space, each name
-- object first, then verb (`step_lease`, `run_cancel_request`); `_many` takes arrays.
-- aiosql suffixes: ^ one row, $ one value, ! no result; none: all rows. No literal percent
-- signs: statements go to psycopg's %-style placeholders.

-- name: run_start^
-- A run and its steps in one round trip (rara.runs.start_run). Resolves the version as
-- definition_version_get does (:version, or the latest when null) and inserts only when that
-- version's digest is :digest, the caller's cached digest whose step rows :steps are (built
-- by rara.runs, one element per step), and nothing refuses the start: a retired definition
-- without an explicit :version, or with :check_capabilities a step capability that no live
-- worker serves (heartbeat within :alive_seconds, as worker_capabilities). The spec comes
-- back only when the digest differs, so a stale or empty cache costs one more call and no
-- extra fetch. No row: no such definition. run_id is null when nothing was inserted;
-- ON CONFLICT makes racing clients with one idempotency key create one run: the loser waits
-- for the winner's commit, inserts nothing, and reads the winner's row with run_get_by_key.
WITH resolved AS (
    SELECT v.id, v.digest, v.spec, d.retired_at,
           coalesce(v.digest = CAST(:digest AS text), false) AS matched
    FROM rara_definition_versions v JOIN rara_definitions d USING (name)
    WHERE v.name = :name AND (CAST(:version AS integer) IS NULL OR v.version = :version)
    ORDER BY v.version DESC LIMIT 1
), step_rows AS (
    SELECT s.* FROM resolved, jsonb_to_recordset(CAST(:steps AS jsonb)) AS s(
        key text, depends_on text[], dependants text[], capability text, executor text,
        priority integer,
        payload jsonb, max_attempts integer, retry_initial_ms integer, retry_max_ms integer,
        retry_coefficient double precision, timeout_ms integer, heartbeat_timeout_ms integer)
    WHERE resolved.matched
), missing AS (
    -- One row always (an aggregate): null when nothing is missing or nothing was checked.
    SELECT array_agg(DISTINCT s.capability ORDER BY s.capability) AS capabilities
    FROM step_rows s
    WHERE CAST(:check_capabilities AS boolean) AND NOT EXISTS (
        SELECT FROM rara_workers w
        WHERE s.capability = ANY (w.capabilities) AND w.stopped_at IS NULL
          AND w.heartbeat_at > now() - make_interval(secs => :alive_seconds))
), run AS (
    INSERT INTO rara_runs (definition_version_id, input, idempotency_key, steps_total)
    SELECT resolved.id, CAST(:input AS jsonb), CAST(:idempotency_key AS text),
           jsonb_array_length(CAST(:steps AS jsonb))
    FROM resolved, missing
    WHERE resolved.matched AND missing.capabilities IS NULL
      AND (resolved.retired_at IS NULL OR CAST(:version AS integer) IS NOT NULL)
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING id
), steps AS (
    INSERT INTO rara_steps (run_id, key, depends_on, dependants, pending_deps, capability,
                            executor, priority, payload, max_attempts, retry_initial_ms,
                            retry_max_ms, retry_coefficient, timeout_ms, heartbeat_timeout_ms,
                            status)
    SELECT run.id, s.key, s.depends_on, s.dependants, cardinality(s.depends_on), s.capability,
           s.executor,
           s.priority, s.payload, s.max_attempts, s.retry_initial_ms, s.retry_max_ms,
           s.retry_coefficient, s.timeout_ms, s.heartbeat_timeout_ms,
           CASE WHEN cardinality(s.depends_on) = 0 THEN 'ready' ELSE 'blocked' END::rara_step_status
    FROM run, step_rows s
)
SELECT resolved.id, resolved.digest, resolved.retired_at,
       CASE WHEN resolved.matched THEN NULL ELSE resolved.spec END AS spec,
       missing.capabilities AS missing, (SELECT id FROM run) AS run_id
FROM resolved, missing;

-- name: run_get_by_key$
SELECT id FROM rara_runs WHERE idempotency_key = :idempotency_key;

-- name: run_get^
SELECT r.id, r.status, r.input, r.idempotency_key, r.cancel_requested, r.error, r.created_at,
       r.started_at, r.finished_at, v.name AS definition, v.version, v.digest
FROM rara_runs r JOIN rara_definition_versions v ON v.id = r.definition_version_id
WHERE r.id = :run_id;

-- name: run_list
SELECT r.id, r.status, v.name AS definition, v.version, r.created_at, r.finished_at,
       r.steps_succeeded AS done, r.steps_total AS total
FROM rara_runs r JOIN rara_definition_versions v ON v.id = r.definition_version_id
WHERE (CAST(:status AS rara_run_status) IS NULL OR r.status = :status)
ORDER BY r.id DESC LIMIT :limit;

-- name: run_cancel_request$
-- Mark the run; the caller then cancels waiting steps and tells running ones.
UPDATE rara_runs SET cancel_requested = true
WHERE id = :run_id AND status IN ('pending', 'running')
RETURNING id;

-- name: run_count_many
-- The parent aggregation, by counters (migration 0006): the runs' step counts move by :deltas,
-- a JSON array of {run_id, succeeded, failed, cancelled} — the steps this transaction made
-- terminal — and a run whose steps are then all terminal ends by the one rule
-- (rara_run_end_status). O(1) per run, whatever its size; step_complete_many does the same for
-- the successes it writes (and the deltas it is given), so a batch of successes needs no call.
-- The last statement of its transaction, before the commit: run rows are the last locks a
-- transaction takes, in id order, so no two transactions (nor a run cancel, which takes the
-- run's steps first) wait on each other in a cycle; and a row is held only until the commit.
-- Under READ COMMITTED the UPDATE applies the deltas to the newest version of the row (a
-- concurrent batch's commit that it waited for included): two siblings finishing in
-- concurrent transactions are both counted, and the second ends the run.
WITH d AS MATERIALIZED (
    SELECT run_id, sum(succeeded)::integer AS succeeded, sum(failed)::integer AS failed,
           sum(cancelled)::integer AS cancelled
    FROM jsonb_to_recordset(CAST(:deltas AS jsonb))
        AS d(run_id bigint, succeeded integer, failed integer, cancelled integer)
    GROUP BY run_id
), locked AS (
    SELECT id FROM rara_runs WHERE id = ANY (ARRAY(SELECT run_id FROM d)) ORDER BY id
    FOR NO KEY UPDATE
)
UPDATE rara_runs r SET
    steps_succeeded = r.steps_succeeded + d.succeeded,
    steps_failed = r.steps_failed + d.failed,
    steps_cancelled = r.steps_cancelled + d.cancelled,
    status = CASE WHEN r.status IN ('pending', 'running') THEN coalesce(rara_run_end_status(
        r.cancel_requested, r.steps_total, r.steps_succeeded + d.succeeded,
        r.steps_failed + d.failed, r.steps_cancelled + d.cancelled), r.status) ELSE r.status END,
    finished_at = CASE WHEN r.status IN ('pending', 'running') AND rara_run_end_status(
        r.cancel_requested, r.steps_total, r.steps_succeeded + d.succeeded,
        r.steps_failed + d.failed, r.steps_cancelled + d.cancelled) IS NOT NULL
        THEN now() ELSE r.finished_at END
FROM d
WHERE r.id = d.run_id AND r.id = ANY (ARRAY(SELECT id FROM locked))
RETURNING r.id, r.status::text;

-- name: run_enqueue_many
-- Tests and benchmarks only (not the runtime path: no input validation, no routing check):
-- :runs runs of the definition version :name/:version (the latest when null), each with :steps
-- steps of one capability inserted set-wise. Keys: :key0, :key1… when :numbered, else :key;
-- :chained makes each step depend on the one before (only the first ready), otherwise every
-- step is ready. Returns each step's run id. One statement whatever the size, so a
-- new NOT NULL column of rara_steps is added here and in run_start only.
WITH version AS (
    SELECT id FROM rara_definition_versions
    WHERE name = :name AND (CAST(:version AS integer) IS NULL OR version = :version)
    ORDER BY version DESC LIMIT 1
), runs AS (
    INSERT INTO rara_runs (definition_version_id, input, steps_total)
    SELECT version.id, CAST(:input AS jsonb), :steps FROM version, generate_series(1, :runs)
    RETURNING id
)
INSERT INTO rara_steps (run_id, key, depends_on, dependants, pending_deps, capability, executor,
                        payload, priority, max_attempts, retry_initial_ms, retry_max_ms,
                        retry_coefficient, status)
SELECT r.id, CASE WHEN :numbered THEN :key || i ELSE :key END,
       CASE WHEN :chained AND i > 0 THEN ARRAY[:key || (i - 1)] ELSE '{}'::text[] END,
       CASE WHEN :chained AND i < :steps - 1 THEN ARRAY[:key || (i + 1)] ELSE '{}'::text[] END,
       CASE WHEN :chained AND i > 0 THEN 1 ELSE 0 END,
       :capability, :executor, CAST(:payload AS jsonb), :priority, :max_attempts,
       :retry_initial_ms, :retry_max_ms, 2,
       CASE WHEN :chained AND i > 0 THEN 'blocked' ELSE 'ready' END::rara_step_status
FROM runs r, generate_series(0, :steps - 1) AS i
ORDER BY r.id, i
RETURNING run_id;

-- name: database_now
-- The database's clock: `rara runs watch` times running steps by it, not by the viewer's.
SELECT now();
