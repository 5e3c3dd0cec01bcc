-- rara 0018: namespaces are tenants (issue 34, item 2; docs/namespaces.md, "Isolation",
-- docs/decisions/0011-namespace-isolation.md).
--
-- rara_namespace_access says which roles may read and act in which namespaces ('*': every
-- one). A role has a namespace when it is a member (pg_has_role … 'MEMBER', directly or
-- through groups) of a role with a row for it, or of the schema's owner. The owner edits the
-- table (`rara access grant|revoke`); no other role writes it.
--
-- Enforced by PostgreSQL on both paths, with one rule (rara_caller_namespaces below):
-- - reads: row-level security on every table that holds a namespace's data. A row is visible
--   when its namespace (its run's, for a run's steps, attempts, events…) is the caller's.
--   The owner owns the tables and so bypasses the policies, and with it every SECURITY
--   DEFINER function (they run as the owner): their checks are their own.
-- - acts: the definer functions that act in a namespace check it (db/functions/access.sql).
--
-- The caller is the role the statement runs as: the role of `SET ROLE` when the session set
-- one (a dashboard acting for its user, PostgREST's pattern), else the login. Inside a
-- SECURITY DEFINER function current_user is the owner, but the `role` setting and
-- session_user are still the caller's, so a policy (evaluated as the caller) and a definer's
-- check (evaluated as the owner) name the same role.
--
-- Rows for rara_worker, rara_operator, rara_client and rara_reader with '*' keep every
-- deployment as it was: isolating teams is deleting the last two and granting each team's
-- roles their namespaces. Workers and operators serve the fleet ('*').

CREATE TABLE rara_namespace_access (
    role name NOT NULL,
    namespace text NOT NULL CONSTRAINT rara_namespace_access_namespace_check
        CHECK (namespace = '*' OR namespace ~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'),
    granted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (role, namespace)
);

INSERT INTO rara_namespace_access (role, namespace)
SELECT r.rolname, '*' FROM pg_roles r
WHERE r.rolname IN ('rara_worker', 'rara_operator', 'rara_client', 'rara_reader');

-- The role a statement runs as, also from inside a SECURITY DEFINER function.
CREATE FUNCTION rara_caller() RETURNS name
LANGUAGE sql STABLE AS $$
    SELECT CASE current_setting('role') WHEN 'none' THEN session_user
                ELSE current_setting('role')::name END
$$;

-- The caller's namespaces ('{*}': every one). SECURITY DEFINER so that it reads the access
-- table whoever calls it; it answers only for the caller. Called once per statement by the
-- policies below (an uncorrelated subquery: an InitPlan).
CREATE FUNCTION rara_caller_namespaces() RETURNS text[]
LANGUAGE plpgsql STABLE SECURITY DEFINER AS $$
BEGIN
    -- (PL/pgSQL: its body names a table, which a dump of the schema creates after it.)
    IF pg_has_role(rara_caller(), current_user, 'MEMBER') THEN  -- the owner (current_user here)
        RETURN '{*}';
    END IF;
    RETURN (SELECT coalesce(array_agg(DISTINCT a.namespace), '{}')
            FROM rara_namespace_access a JOIN pg_roles r ON r.rolname = a.role
            WHERE pg_has_role(rara_caller(), r.oid, 'MEMBER'));
END $$;
-- Names resolve in this schema, then pg_temp (as every definer function's: migration 0012).
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION rara_caller_namespaces() SET search_path = %I, pg_temp',
                   current_schema());
END $$;

-- Every function of this schema is revoked from PUBLIC (0007); these two are for every role
-- that reads (rara_grant: in db/functions/access.sql, run after every migration).

-- Reads. A table with a namespace column compares it; a run's rows ask whether their run is
-- visible (a probe of rara_runs by primary key, under rara_runs' own policy), a step's rows
-- whether their step is. The '*' test comes first, so the fleet's roles pay one InitPlan.
DO $$
DECLARE
    t record;
BEGIN
    FOR t IN SELECT * FROM (VALUES
        -- (table, how a row finds its namespace: its own column, or its run's or step's)
        ('rara_definitions', 'namespace', NULL),
        ('rara_definition_versions', 'namespace', NULL),
        ('rara_runs', 'namespace', NULL),
        ('rara_schedules', 'namespace', NULL),
        ('rara_schedule_ticks', 'namespace', NULL),
        ('rara_steps', 'run_id', 'rara_runs'),
        ('rara_attempts', 'run_id', 'rara_runs'),
        ('rara_step_cache', 'source_run', 'rara_runs'),
        ('rara_events', 'step_id', 'rara_steps'),
        ('rara_checkpoints', 'step_id', 'rara_steps'),
        ('rara_step_artifacts', 'step_id', 'rara_steps'),
        ('rara_step_reads', 'step_id', 'rara_steps'),
        ('rara_map_lists', 'map_id', 'rara_steps')
    ) AS v(tab, col, via)
    LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t.tab);
        IF t.via IS NULL THEN
            EXECUTE format('CREATE POLICY %I ON %I FOR SELECT USING '
                           '((SELECT rara_caller_namespaces()) && ARRAY[''*'', %I])',
                           t.tab || '_read', t.tab, t.col);
        ELSE
            EXECUTE format('CREATE POLICY %I ON %I FOR SELECT USING '
                           '((SELECT rara_caller_namespaces()) @> ''{*}'' '
                           'OR EXISTS (SELECT FROM %I o WHERE o.id = %I.%I))',
                           t.tab || '_read', t.tab, t.via, t.tab, t.col);
        END IF;
    END LOOP;
END $$;

-- A blob is content-addressed and shared, but its existence is a team's: visible when a
-- visible step wrote or read it.
ALTER TABLE rara_artifacts ENABLE ROW LEVEL SECURITY;
CREATE POLICY rara_artifacts_read ON rara_artifacts FOR SELECT
    USING ((SELECT rara_caller_namespaces()) @> '{*}'
           OR EXISTS (SELECT FROM rara_step_artifacts m WHERE m.digest = rara_artifacts.digest)
           OR EXISTS (SELECT FROM rara_step_reads d WHERE d.digest = rara_artifacts.digest));

-- Who may see whom is the fleet's business.
ALTER TABLE rara_namespace_access ENABLE ROW LEVEL SECURITY;
CREATE POLICY rara_namespace_access_read ON rara_namespace_access FOR SELECT
    USING ((SELECT rara_caller_namespaces()) @> '{*}');

-- The step cache is per namespace from now on (decision 0011): a step's `cache:` payload
-- carries its run's namespace, which the worker makes a part of the key. The function that
-- builds that payload takes the namespace.
DROP FUNCTION IF EXISTS rara_spec_caches(jsonb);
