-- rara 0019: fair share between namespaces at lease time (issue 34, item 3; docs/namespaces.md,
-- "Fair share", docs/decisions/0012-fair-share-lanes.md).
--
-- Until now the lease took the served capabilities' ready steps in one order, priority then
-- age, whoever's they were: a team's 100,000-step backlog ran before every step another team
-- started after it. Now the lease shares its slots between namespaces by weight (equal unless
-- set), and may cap what a namespace runs, in the lease statement itself (rara_step_lease):
--
-- - rara_steps.namespace: a step's run's, copied when the step is inserted, so that the ready
--   index can order by it (the lease reads a namespace's queue as one index range).
-- - rara_steps_ready gains executor and namespace in its key: one range per lane, a
--   (capability, executor, namespace) triple. The executor was a filter on the range before.
-- - rara_lanes: every lane that has had a step, with its namespace's weight laid out for a
--   draw by weight in one index probe. The lease draws lanes from it instead of looking for
--   namespaces in the index, whose ranges a held xmin horizon fills with dead entries. A
--   statement trigger adds a lane with the first step inserted into it, whichever function
--   inserts it (start, resume, a map's children).
-- - rara_namespace_shares: a namespace's weight (1 when absent).
-- - rara_namespace_quotas: at most max_running attempts at once of a namespace, per capability
--   or, with capability '*', for all of them.
--
-- Existing steps take their run's namespace (`default` for every run of before 0017, and the
-- column is added with that default: a catalog change; only other namespaces' steps are
-- rewritten), and the default is dropped so that no writer can forget it.

ALTER TABLE rara_steps ADD COLUMN namespace text NOT NULL DEFAULT 'default';
UPDATE rara_steps s SET namespace = r.namespace
FROM rara_runs r WHERE r.id = s.run_id AND r.namespace <> 'default';
ALTER TABLE rara_steps ALTER COLUMN namespace DROP DEFAULT;

DROP INDEX rara_steps_ready;
CREATE INDEX rara_steps_ready
    ON rara_steps (capability, executor, namespace, (-priority), available_at, id)
    WHERE status = 'ready';

-- Read policies (0018) by the step's own column now, not through its run.
ALTER POLICY rara_steps_read ON rara_steps
    USING ((SELECT rara_caller_namespaces()) @> '{*}'
           OR namespace = ANY ((SELECT rara_caller_namespaces())::text[]));

CREATE TABLE rara_namespace_shares (
    namespace  text PRIMARY KEY CONSTRAINT rara_namespace_shares_namespace_check
        CHECK (namespace ~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'),
    weight     integer NOT NULL CHECK (weight BETWEEN 1 AND 10000),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- A lane's weight is its namespace's, copied here, and `low` is the sum of the weights of the
-- lanes of its (capability, executor) pair before it in namespace order: the pair's lanes
-- tile [0, Σ weights), each with an interval as long as its weight, so that the lease draws
-- a lane by weight with one index probe (`low <= r ORDER BY low DESC LIMIT 1`), whatever the
-- number of lanes. Kept by rara_lanes_rebalance (db/functions/lease.sql) when a lane is added
-- or a weight set.
CREATE TABLE rara_lanes (
    capability text NOT NULL,
    executor   text NOT NULL,
    namespace  text NOT NULL,
    weight     integer NOT NULL DEFAULT 1,
    low        double precision NOT NULL DEFAULT 0,
    PRIMARY KEY (capability, executor, namespace)
);
CREATE INDEX rara_lanes_draw ON rara_lanes (capability, executor, low);
INSERT INTO rara_lanes (capability, executor, namespace, low)
SELECT l.capability, l.executor, l.namespace,
       row_number() OVER (PARTITION BY l.capability, l.executor ORDER BY l.namespace) - 1
FROM (SELECT DISTINCT capability, executor, namespace FROM rara_steps
      WHERE status IN ('blocked', 'ready', 'running')) AS l;

-- (one statement per INSERT, however many steps it inserts: a run's start, a map's slice; as
-- the inserting role, which is the owner: no other role inserts steps)
CREATE FUNCTION rara_lanes_add() RETURNS trigger
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
REVOKE ALL ON FUNCTION rara_lanes_add() FROM PUBLIC;
CREATE TRIGGER rara_steps_lanes AFTER INSERT ON rara_steps
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION rara_lanes_add();

CREATE TABLE rara_namespace_quotas (
    namespace   text NOT NULL CONSTRAINT rara_namespace_quotas_namespace_check
        CHECK (namespace ~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'),
    capability  text NOT NULL CONSTRAINT rara_namespace_quotas_capability_check
        CHECK (capability = '*' OR capability ~ '^[a-z0-9][a-z0-9._-]*@[0-9]+$'),
    max_running integer NOT NULL CHECK (max_running >= 0),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, capability)
);

-- Each team sees its own lanes, weight and quotas; the fleet's roles see all.
DO $$
DECLARE
    tab text;
BEGIN
    FOREACH tab IN ARRAY ARRAY['rara_lanes', 'rara_namespace_shares', 'rara_namespace_quotas']
    LOOP
        EXECUTE format('CREATE POLICY %I ON %I FOR SELECT USING '
                       '((SELECT rara_caller_namespaces()) @> ''{*}'' '
                       'OR namespace = ANY ((SELECT rara_caller_namespaces())::text[]))',
                       tab || '_read', tab);
        -- Isolated already (`rara access isolate`): the new tables are too.
        IF (SELECT c.relrowsecurity FROM pg_class c WHERE c.oid = 'rara_runs'::regclass) THEN
            EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', tab);
        END IF;
    END LOOP;
END $$;

-- The lease gains the lane cursors' namespaces (p_after_namespaces, last, NULL by default: a
-- worker of the previous release still leases, each range from its start) and returns each
-- step's namespace (last: that worker's row factory ignores a column it does not know).
DROP FUNCTION IF EXISTS rara_step_lease(text, text[], text[], integer[], timestamptz[],
                                        bigint[], integer, double precision);
