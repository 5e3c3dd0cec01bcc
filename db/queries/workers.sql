-- Workers (rara_workers): registration and stop (db/functions/workers.sql), and who serves what
-- now. A worker's heartbeat is step_heartbeat (lease.sql): one statement extends its row and
-- its leases. Typed: rara.pg.workers.
-- Loaded by rara.pg.queries with every other file of this folder: one name space, each name
-- object first, then verb (`step_lease`, `run_cancel`); `_many` takes arrays.
-- aiosql suffixes: ^ one row, $ one value, ! no result; none: all rows. No literal percent
-- signs: statements go to psycopg's %-style placeholders.

-- name: worker_register!
SELECT rara_worker_register(
    p_worker => :worker, p_capabilities => CAST(:capabilities AS text[]),
    p_executors => CAST(:executors AS jsonb)
);

-- name: worker_stop!
SELECT rara_worker_stop(p_worker => :worker);

-- name: worker_list_live
SELECT id, capabilities, started_at, heartbeat_at FROM rara_workers
WHERE stopped_at IS NULL AND heartbeat_at > now() - make_interval(secs => :alive_seconds)
ORDER BY id;

-- name: worker_capabilities
-- What live workers serve now (heartbeat within :alive_seconds).
SELECT DISTINCT unnest(capabilities) AS capability FROM rara_workers
WHERE stopped_at IS NULL AND heartbeat_at > now() - make_interval(secs => :alive_seconds);
