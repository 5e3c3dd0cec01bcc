-- Workers: a worker process registers what it serves and says when it stops (its heartbeat is
-- rara_step_heartbeat, lease.sql). Only rara_worker may; no role writes rara_workers directly
-- (migration 0007). Called through db/queries/workers.sql by the worker's store.
-- Repeatable (rara.pg.migrate): edit in place.

CREATE OR REPLACE FUNCTION rara_worker_register(p_worker text, p_capabilities text[])
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO rara_workers (id, capabilities) VALUES (p_worker, p_capabilities)
    ON CONFLICT (id) DO UPDATE SET capabilities = EXCLUDED.capabilities, heartbeat_at = now(),
        stopped_at = NULL;
END $$;
SELECT rara_grant('rara_worker_register', 'rara_worker');

CREATE OR REPLACE FUNCTION rara_worker_stop(p_worker text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE rara_workers SET stopped_at = now() WHERE id = p_worker;
END $$;
SELECT rara_grant('rara_worker_stop', 'rara_worker');
