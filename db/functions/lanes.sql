-- The lanes of the lease's fair-share draw (migration 0019; docs/namespaces.md, "Fair share"):
-- one lane per (capability, executor, namespace) with work queued, laid out by the namespaces'
-- weights (rara_namespace_share_set, limits.sql), which rara_step_lease (lease.sql) draws from.
-- Below both. Repeatable (rara.pg.migrate): edit in place.

CREATE OR REPLACE FUNCTION rara_lanes_rebalance(p_capability text, p_executor text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    -- Lays the lanes of a (capability, executor) pair out for the lease's draw (migration
    -- 0019): each its namespace's weight, and `low` the sum of the weights before it in
    -- namespace order. After a lane is added (rara_lanes_add) or a weight set. Callers of one
    -- pair take turns, and the layout is read in a later statement than the lock, so it sees
    -- the lanes the previous holder added: every layout covers every committed lane. A lease
    -- reads one layout or the next (its snapshot), never half of one.
    PERFORM pg_advisory_xact_lock(hashtext('rara_lanes'),
                                  hashtext(p_capability || ' ' || p_executor));
    UPDATE rara_lanes l SET weight = n.weight, low = n.low
    FROM (SELECT l.namespace, coalesce(w.weight, 1) AS weight,
                 sum(coalesce(w.weight, 1)) OVER (ORDER BY l.namespace)
                     - coalesce(w.weight, 1) AS low
          FROM rara_lanes l LEFT JOIN rara_namespace_shares w ON w.namespace = l.namespace
          WHERE l.capability = p_capability AND l.executor = p_executor) AS n
    WHERE l.capability = p_capability AND l.executor = p_executor
      AND l.namespace = n.namespace AND (l.weight, l.low) IS DISTINCT FROM (n.weight, n.low);
END $$;
SELECT rara_grant('rara_lanes_rebalance');  -- only through rara_lanes_add, the weights

-- AFTER INSERT ON rara_steps (rara_steps_lanes), one statement per INSERT however many steps it
-- inserts (a run's start, a map's slice), as the inserting role, which is the owner: no other
-- role inserts steps. Adds the lanes of the new steps and lays out each pair that gained one.
CREATE OR REPLACE FUNCTION rara_lanes_add() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    added record;
BEGIN
    FOR added IN
        WITH new AS (
            INSERT INTO rara_lanes (capability, executor, namespace)
            SELECT DISTINCT i.capability, i.executor, i.namespace FROM inserted i
            WHERE i.status IN ('blocked', 'ready')
            ON CONFLICT DO NOTHING
            RETURNING capability, executor
        )
        SELECT DISTINCT n.capability, n.executor FROM new n ORDER BY 1, 2
    LOOP
        PERFORM rara_lanes_rebalance(added.capability, added.executor);
    END LOOP;
    RETURN NULL;
END $$;
SELECT rara_grant('rara_lanes_add');  -- a trigger
