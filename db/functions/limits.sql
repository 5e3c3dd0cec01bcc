-- Concurrency limits per capability (migration 0009, docs/limits.md): set or removed by the
-- roles that run the fleet (rara_client: `rara limits set`; rara_operator), enforced in the
-- lease (rara_step_lease, lease.sql). Called through db/queries/limits.sql.
-- Repeatable (rara.pg.migrate): edit in place.

CREATE OR REPLACE FUNCTION rara_capability_limit_set(p_capability text, p_max_running integer)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM rara_namespace_check('*');  -- the fleet's capacity: every namespace's
    -- At most p_max_running attempts of p_capability at once (0: none start); NULL: no limit.
    -- Attempts already running above a lowered limit finish; no new one starts until the
    -- running ones are below it.
    IF p_max_running IS NULL THEN
        DELETE FROM rara_capability_limits WHERE capability = p_capability;
    ELSE
        INSERT INTO rara_capability_limits (capability, max_running)
        VALUES (p_capability, p_max_running)
        ON CONFLICT (capability) DO UPDATE SET max_running = EXCLUDED.max_running,
                                               updated_at = now();
    END IF;
END $$;
SELECT rara_grant('rara_capability_limit_set', 'rara_client', 'rara_operator');
