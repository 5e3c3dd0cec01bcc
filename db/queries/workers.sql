-- Workers (rara_workers): registration, stop, and who serves what now. A worker's heartbeat is
-- step_heartbeat (lease.sql): one statement extends its row and its leases. Typed: rara.pg.workers.
-- Loaded by rara.pg.queries with every other file of this folder: one name space, each name
-- object first, then verb (`step_lease`, `run_cancel_request`); `_many` takes arrays.
-- aiosql suffixes: ^ one row, $ one value, ! no result; none: all rows. No literal percent
-- signs: statements go to psycopg's %-style placeholders.

-- name: worker_register!
INSERT INTO rara_workers (id, capabilities) VALUES (:worker, :capabilities)
ON CONFLICT (id) DO UPDATE SET capabilities = EXCLUDED.capabilities, heartbeat_at = now(),
    stopped_at = NULL;

-- name: worker_stop!
UPDATE rara_workers SET stopped_at = now() WHERE id = :worker;

-- name: worker_list_live
SELECT id, capabilities, started_at, heartbeat_at FROM rara_workers
WHERE stopped_at IS NULL AND heartbeat_at > now() - make_interval(secs => :alive_seconds)
ORDER BY id;

-- name: worker_capabilities
-- What live workers serve now (heartbeat within :alive_seconds).
SELECT DISTINCT unnest(capabilities) AS capability FROM rara_workers
WHERE stopped_at IS NULL AND heartbeat_at > now() - make_interval(secs => :alive_seconds);
