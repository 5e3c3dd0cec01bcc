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

-- Fair share between namespaces (migration 0019, docs/namespaces.md "Fair share"): a
-- namespace's weight, and its quotas — the fleet's business, as the limits are: a team must
-- not raise its own share, so both need every namespace ('*'). Enforced in the lease.

CREATE OR REPLACE FUNCTION rara_namespace_share_set(p_namespace text, p_weight integer)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM rara_namespace_check('*');
    -- p_namespace's weight; NULL: back to 1, every namespace's unless set.
    IF p_weight IS NULL THEN
        DELETE FROM rara_namespace_shares WHERE namespace = p_namespace;
    ELSE
        INSERT INTO rara_namespace_shares (namespace, weight) VALUES (p_namespace, p_weight)
        ON CONFLICT (namespace) DO UPDATE SET weight = EXCLUDED.weight, updated_at = now();
    END IF;
    -- The lease draws lanes by the weights laid out in rara_lanes: lay them out again.
    PERFORM rara_lanes_rebalance(l.capability, l.executor) FROM rara_lanes l
    WHERE l.namespace = p_namespace ORDER BY l.capability, l.executor;
END $$;
SELECT rara_grant('rara_namespace_share_set', 'rara_client', 'rara_operator');

CREATE OR REPLACE FUNCTION rara_namespace_quota_set(p_namespace text, p_capability text,
                                                    p_max_running integer)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM rara_namespace_check('*');
    -- At most p_max_running attempts of p_namespace at once, of p_capability ('*': of all its
    -- capabilities together); NULL: no quota. As with a limit, attempts already running
    -- above a lowered quota finish.
    IF p_max_running IS NULL THEN
        DELETE FROM rara_namespace_quotas
        WHERE namespace = p_namespace AND capability = p_capability;
    ELSE
        INSERT INTO rara_namespace_quotas (namespace, capability, max_running)
        VALUES (p_namespace, p_capability, p_max_running)
        ON CONFLICT (namespace, capability) DO UPDATE SET max_running = EXCLUDED.max_running,
                                                          updated_at = now();
    END IF;
END $$;
SELECT rara_grant('rara_namespace_quota_set', 'rara_client', 'rara_operator');
