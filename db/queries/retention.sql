-- Retention: the history of finished runs deleted in bounded batches (`rara runs prune`).
-- A maintenance operation of the schema's owner, like migrations and `rara artifacts gc`: no
-- process role may delete history (migration 0007), and these are plain statements, not a
-- function granted to one (docs/retention.md says why). Typed: rara.pg.retention.
-- Loaded by rara.pg.queries with every other file of this folder: one name space, each name
-- object first, then verb (`step_lease`, `run_cancel`); `_many` takes arrays.
-- aiosql suffixes: ^ one row, $ one value, ! no result; none: all rows. No literal percent
-- signs: statements go to psycopg's %-style placeholders.

-- name: run_prune_allowed$
-- Whether this login may prune: DELETE on every table a prune deletes from (the owner only).
SELECT bool_and(has_table_privilege(t, 'DELETE'))
FROM unnest(ARRAY['rara_runs', 'rara_steps', 'rara_attempts', 'rara_events',
                  'rara_checkpoints', 'rara_step_artifacts']) AS t;

-- name: run_prune_select
-- The next batch: the finished runs after run :after_id (a keyset walk of the primary key, so
-- a whole prune reads each run once) that ended before :before, at most :batch of them and,
-- past the first, at most :max_steps steps in all; locked until the transaction ends, which
-- deletes (run_prune_delete_many) or counts (run_prune_count_many) them. No index on
-- finished_at: old runs are at the start of the key, and an index on a column the run's end
-- writes would make that update non-HOT (docs/retention.md).
WITH candidates AS (
    -- A run ends only when every step of it has (rara_run_end_status): no step of a finished
    -- run is leased, so nothing of the runtime waits on these rows. SKIP LOCKED: a run someone
    -- holds (a late cancel of an ended run) is left to the next prune instead of waited for.
    SELECT r.id, r.steps_total FROM rara_runs r
    WHERE r.id > :after_id AND r.status IN ('succeeded', 'failed', 'cancelled')
      AND r.finished_at < :before
    ORDER BY r.id
    LIMIT :batch
    FOR UPDATE SKIP LOCKED
)
-- The step bound: runs up to :max_steps steps in all (a run goes whole, so the first one is
-- always taken, however large). A prefix of the candidates, so the cursor stays exact.
SELECT c.id FROM (
    SELECT c.id, row_number() OVER w AS n, sum(c.steps_total) OVER w AS steps_so_far
    FROM candidates c WINDOW w AS (ORDER BY c.id)) AS c
WHERE c.n = 1 OR c.steps_so_far <= :max_steps
ORDER BY c.id;

-- name: run_prune_delete_many^
-- The runs :run_ids deleted with everything under them — steps, attempts, events, checkpoints
-- and manifests — if they are finished (a run that is not is left alone, whoever asks). Blobs
-- (rara_artifacts) stay: `rara artifacts gc` removes the ones no manifest or checkpoint
-- references any more, after its grace, so a blob that a kept run references stays. A released
-- run goes too: its release keeps its own copy of the manifest rows (rara_release_artifacts,
-- migration 0022), which GC keeps the blobs of.
-- The children are deleted here rather than by the cascades so that they are counted (the
-- cascades and the steps' delete trigger then find nothing).
WITH runs AS MATERIALIZED (
    SELECT r.id FROM rara_runs r
    WHERE r.id = ANY (CAST(:run_ids AS bigint[]))
      AND r.status IN ('succeeded', 'failed', 'cancelled')
), steps AS MATERIALIZED (
    SELECT s.id FROM rara_steps s WHERE s.run_id = ANY (ARRAY(SELECT r.id FROM runs r))
), events AS (
    DELETE FROM rara_events e WHERE e.step_id = ANY (ARRAY(SELECT s.id FROM steps s))
    RETURNING 1
), checkpoints AS (
    DELETE FROM rara_checkpoints c WHERE c.step_id = ANY (ARRAY(SELECT s.id FROM steps s))
    RETURNING 1
), manifests AS (
    DELETE FROM rara_step_artifacts m WHERE m.step_id = ANY (ARRAY(SELECT s.id FROM steps s))
    RETURNING 1
), attempts AS (
    DELETE FROM rara_attempts a WHERE a.step_id = ANY (ARRAY(SELECT s.id FROM steps s))
    RETURNING 1
), deleted_steps AS (
    DELETE FROM rara_steps s WHERE s.id = ANY (ARRAY(SELECT s2.id FROM steps s2))
    RETURNING 1
), deleted_runs AS (
    DELETE FROM rara_runs r WHERE r.id = ANY (ARRAY(SELECT r2.id FROM runs r2))
    RETURNING 1
)
SELECT (SELECT count(*) FROM deleted_runs) AS runs,
       (SELECT count(*) FROM deleted_steps) AS steps,
       (SELECT count(*) FROM attempts) AS attempts,
       (SELECT count(*) FROM events) AS events,
       (SELECT count(*) FROM checkpoints) AS checkpoints,
       (SELECT count(*) FROM manifests) AS manifests;

-- name: run_prune_count_many^
-- What run_prune_delete_many would delete of the runs :run_ids (`rara runs prune --dry-run`).
WITH runs AS MATERIALIZED (
    SELECT r.id FROM rara_runs r
    WHERE r.id = ANY (CAST(:run_ids AS bigint[]))
      AND r.status IN ('succeeded', 'failed', 'cancelled')
), steps AS MATERIALIZED (
    SELECT s.id FROM rara_steps s WHERE s.run_id = ANY (ARRAY(SELECT r.id FROM runs r))
)
SELECT (SELECT count(*) FROM runs) AS runs,
       (SELECT count(*) FROM steps) AS steps,
       (SELECT count(*) FROM rara_attempts a
        WHERE a.step_id = ANY (ARRAY(SELECT s.id FROM steps s))) AS attempts,
       (SELECT count(*) FROM rara_events e
        WHERE e.step_id = ANY (ARRAY(SELECT s.id FROM steps s))) AS events,
       (SELECT count(*) FROM rara_checkpoints c
        WHERE c.step_id = ANY (ARRAY(SELECT s.id FROM steps s))) AS checkpoints,
       (SELECT count(*) FROM rara_step_artifacts m
        WHERE m.step_id = ANY (ARRAY(SELECT s.id FROM steps s))) AS manifests;
