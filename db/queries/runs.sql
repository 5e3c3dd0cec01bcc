-- Runs (rara_runs): start (with the run's steps), read, cancel, and the parent aggregation that
-- follows every step change. Typed: rara.pg.runs.
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
        key text, depends_on text[], capability text, executor text, priority integer,
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
    INSERT INTO rara_runs (definition_version_id, input, idempotency_key)
    SELECT resolved.id, CAST(:input AS jsonb), CAST(:idempotency_key AS text)
    FROM resolved, missing
    WHERE resolved.matched AND missing.capabilities IS NULL
      AND (resolved.retired_at IS NULL OR CAST(:version AS integer) IS NOT NULL)
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING id
), steps AS (
    INSERT INTO rara_steps (run_id, key, depends_on, pending_deps, capability, executor,
                            priority, payload, max_attempts, retry_initial_ms, retry_max_ms,
                            retry_coefficient, timeout_ms, heartbeat_timeout_ms, status)
    SELECT run.id, s.key, s.depends_on, cardinality(s.depends_on), s.capability, s.executor,
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
       (SELECT count(*) FROM rara_steps s WHERE s.run_id = r.id AND s.status = 'succeeded') AS done,
       (SELECT count(*) FROM rara_steps s WHERE s.run_id = r.id) AS total
FROM rara_runs r JOIN rara_definition_versions v ON v.id = r.definition_version_id
WHERE (CAST(:status AS rara_run_status) IS NULL OR r.status = :status)
ORDER BY r.id DESC LIMIT :limit;

-- name: run_cancel_request$
-- Mark the run; the caller then cancels waiting steps and tells running ones.
UPDATE rara_runs SET cancel_requested = true
WHERE id = :run_id AND status IN ('pending', 'running')
RETURNING id;

-- name: run_lock_many
-- Serialises the aggregation of runs. Taken just before run_refresh_many in the transaction of step
-- changes: under READ COMMITTED, run_refresh_many's snapshot is taken when its statement starts, so
-- two sibling steps finishing in concurrent transactions would each miss the other's commit and
-- leave the run `running` forever. With the lock the second waits for the first's commit, and
-- its refresh (a later statement, a later snapshot) sees both. In id order and always the last
-- locks a transaction takes (after its step rows), so they cannot take part in a lock cycle.
SELECT id FROM rara_runs WHERE id = ANY (CAST(:run_ids AS bigint[])) ORDER BY id
FOR NO KEY UPDATE;

-- name: run_refresh_many
-- Parent aggregation, the one rule, for the given runs: a run ends when all its steps are
-- terminal — failed if any step failed, else cancelled if cancel was asked or a step was
-- cancelled, else succeeded; a run with a started step is running. A run whose aggregate did
-- not change is left as it is.
WITH agg AS (
    SELECT run_id,
           bool_and(status IN ('succeeded', 'failed', 'cancelled')) AS all_terminal,
           bool_or(status = 'failed') AS any_failed,
           bool_or(status = 'cancelled') AS any_cancelled,
           bool_or(attempt > 0) AS any_started
    FROM rara_steps WHERE run_id = ANY (CAST(:run_ids AS bigint[])) GROUP BY run_id
), next AS (
    SELECT r.id, CASE
        WHEN NOT agg.all_terminal THEN
            CASE WHEN agg.any_started THEN 'running' ELSE r.status END
        WHEN agg.any_failed THEN 'failed'
        WHEN r.cancel_requested OR agg.any_cancelled THEN 'cancelled'
        ELSE 'succeeded' END::rara_run_status AS status
    FROM rara_runs r JOIN agg ON agg.run_id = r.id
    WHERE r.id = ANY (CAST(:run_ids AS bigint[]))  -- an index probe, in a generic plan too
)
UPDATE rara_runs r SET
    status = next.status,
    started_at = CASE WHEN next.status <> 'cancelled' OR r.started_at IS NOT NULL
                      THEN coalesce(r.started_at, now()) END,
    finished_at = CASE WHEN next.status IN ('succeeded', 'failed', 'cancelled') THEN now() END
FROM next
WHERE r.id = next.id AND r.id = ANY (CAST(:run_ids AS bigint[]))
  AND r.status IN ('pending', 'running') AND r.status <> next.status
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
    INSERT INTO rara_runs (definition_version_id, input)
    SELECT version.id, CAST(:input AS jsonb) FROM version, generate_series(1, :runs)
    RETURNING id
)
INSERT INTO rara_steps (run_id, key, depends_on, pending_deps, capability, executor, payload,
                        priority, max_attempts, retry_initial_ms, retry_max_ms,
                        retry_coefficient, status)
SELECT r.id, CASE WHEN :numbered THEN :key || i ELSE :key END,
       CASE WHEN :chained AND i > 0 THEN ARRAY[:key || (i - 1)] ELSE '{}'::text[] END,
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
