-- Workers: a worker process registers what it serves and says when it stops (its heartbeat is
-- rara_step_heartbeat, lease.sql). Only rara_worker may, each login for its own workers; no
-- role writes rara_workers directly (migration 0007). Called through db/queries/workers.sql by the worker's store.
-- Repeatable (rara.pg.migrate): edit in place.

-- A worker id belongs to the login that registered it (migration 0012): a login may speak only
-- for its own workers. Raises, naming the id, when p_worker is another login's; an id nobody
-- registered (or registered before 0012) is nobody's. Called first by every function that
-- acts as a worker (register, stop, heartbeat, lease); session_user is the login whatever
-- role a SECURITY DEFINER function runs as.
CREATE OR REPLACE FUNCTION rara_worker_check_login(p_worker text)
RETURNS void
LANGUAGE plpgsql STABLE AS $$
DECLARE
    owner name;
BEGIN
    SELECT w.login INTO owner FROM rara_workers w WHERE w.id = p_worker;
    IF owner IS NOT NULL AND owner <> session_user THEN
        RAISE EXCEPTION 'worker id % belongs to another login; % may not act for it', p_worker,
            session_user USING ERRCODE = 'insufficient_privilege';
    END IF;
END $$;
SELECT rara_grant('rara_worker_check_login');  -- only through the functions below and lease.sql

-- p_executors: the remote executors the worker reaches, one object per endpoint
-- ({"endpoint", "capabilities", "version", "live"}; migration 0015), for the Fleet page. The
-- worker registers again whenever they change.
CREATE OR REPLACE FUNCTION rara_worker_register(
    p_worker text, p_capabilities text[], p_executors jsonb DEFAULT '[]'
)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM rara_worker_check_login(p_worker);
    -- A worker leases from every namespace (a pool kept for one team needs the lease to pick
    -- by namespace: fair share, issue 34), so while isolation is on its role must have every
    -- one; refused here, once, rather than serve namespaces it may not read.
    IF NOT rara_namespace_allowed('*') THEN
        RAISE EXCEPTION 'role % may not register a worker: workers lease from every namespace '
            'and this role has only some', rara_caller()
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'rara access grant ROLE ''*'' (rara_worker has it unless revoked)';
    END IF;
    INSERT INTO rara_workers (id, capabilities, executors, login)
    VALUES (p_worker, p_capabilities, p_executors, session_user)
    ON CONFLICT (id) DO UPDATE SET capabilities = EXCLUDED.capabilities,
        executors = EXCLUDED.executors, heartbeat_at = now(), stopped_at = NULL,
        login = session_user
    -- (a concurrent registration by another login between the check and here: refused)
    WHERE rara_workers.login IS NULL OR rara_workers.login = session_user;
    IF NOT FOUND THEN
        PERFORM rara_worker_check_login(p_worker);
    END IF;
END $$;
SELECT rara_grant('rara_worker_register', 'rara_worker');

CREATE OR REPLACE FUNCTION rara_worker_stop(p_worker text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM rara_worker_check_login(p_worker);
    UPDATE rara_workers SET stopped_at = now() WHERE id = p_worker;
END $$;
SELECT rara_grant('rara_worker_stop', 'rara_worker');
