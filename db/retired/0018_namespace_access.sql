-- rara 0018: namespaces are tenants (issue 34, item 2; docs/namespaces.md, "Isolation",
-- docs/decisions/0011-namespace-isolation.md).
--
-- rara_namespace_access says which roles may read and act in which namespaces ('*': every
-- one). A role has a namespace when it is a member (pg_has_role … 'MEMBER', directly or
-- through groups) of a role with a row for it, or of the schema's owner. The owner edits the
-- table (`rara access grant|revoke`); no other role writes it.
--
-- Isolation is switched on per database by the owner (`rara access isolate`,
-- rara_namespace_isolation in db/functions/access.sql): until then every role reads and acts
-- in every namespace, as before, and reads pay nothing. Once on, it is enforced by PostgreSQL
-- on both paths, with one rule (rara_caller_namespaces below):
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
-- Whether it is on is the catalog's word, not a setting of ours: row-level security enabled on
-- rara_runs (rara_namespace_isolation enables or disables it on every table with a policy
-- below, in one transaction). Workers and operators serve the fleet: their roles have '*'.

CREATE TABLE rara_namespace_access (
    role name NOT NULL,
    namespace text NOT NULL CONSTRAINT rara_namespace_access_namespace_check
        CHECK (namespace = '*' OR namespace ~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'),
    granted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (role, namespace)
);

INSERT INTO rara_namespace_access (role, namespace)
SELECT r.rolname, '*' FROM pg_roles r
WHERE r.rolname IN ('rara_worker', 'rara_operator');

-- The role a statement runs as, also from inside a SECURITY DEFINER function.
CREATE FUNCTION rara_caller() RETURNS name
LANGUAGE sql STABLE AS $$
    SELECT CASE current_setting('role') WHEN 'none' THEN session_user
                ELSE current_setting('role')::name END
$$;

-- The caller's namespaces ('{*}': every one; every role's while isolation is off). SECURITY
-- DEFINER so that it reads the access table whoever calls it; it answers only for the caller.
-- Called once per statement by the policies below (an uncorrelated subquery: an InitPlan).
CREATE FUNCTION rara_caller_namespaces() RETURNS text[]
LANGUAGE plpgsql STABLE SECURITY DEFINER AS $$
BEGIN
    -- (PL/pgSQL: its body names a table, which a dump of the schema creates after it.)
    IF pg_has_role(rara_caller(), current_user, 'MEMBER')  -- the owner (current_user here)
       OR NOT (SELECT c.relrowsecurity FROM pg_class c WHERE c.oid = 'rara_runs'::regclass) THEN
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

-- Reads: a policy per table that holds a namespace's data, in force while isolation is on. A
-- table with a namespace column compares it; a run's rows read their run's (a scalar
-- subquery: one primary-key probe of rara_runs per row, under rara_runs' own policy — an
-- EXISTS would be planned as a hash of every visible run), a step's rows their step's run's.
-- The '*' test comes first, so the fleet's roles pay one InitPlan per statement.
DO $$
DECLARE
    t record;
BEGIN
    FOR t IN SELECT * FROM (VALUES
        -- (table, the expression of a row's namespace)
        ('rara_definitions', 'namespace'),
        ('rara_definition_versions', 'namespace'),
        ('rara_runs', 'namespace'),
        ('rara_schedules', 'namespace'),
        ('rara_schedule_ticks', 'namespace'),
        ('rara_steps', '(SELECT r.namespace FROM rara_runs r WHERE r.id = run_id)'),
        ('rara_attempts', '(SELECT r.namespace FROM rara_runs r WHERE r.id = run_id)'),
        ('rara_step_cache', '(SELECT r.namespace FROM rara_runs r WHERE r.id = source_run)'),
        ('rara_events', '(SELECT r.namespace FROM rara_steps s JOIN rara_runs r '
                        'ON r.id = s.run_id WHERE s.id = step_id)'),
        ('rara_checkpoints', '(SELECT r.namespace FROM rara_steps s JOIN rara_runs r '
                             'ON r.id = s.run_id WHERE s.id = step_id)'),
        ('rara_step_artifacts', '(SELECT r.namespace FROM rara_steps s JOIN rara_runs r '
                                'ON r.id = s.run_id WHERE s.id = step_id)'),
        ('rara_step_reads', '(SELECT r.namespace FROM rara_steps s JOIN rara_runs r '
                            'ON r.id = s.run_id WHERE s.id = step_id)'),
        ('rara_map_lists', '(SELECT r.namespace FROM rara_steps s JOIN rara_runs r '
                           'ON r.id = s.run_id WHERE s.id = map_id)')
    ) AS v(tab, namespace)
    LOOP
        EXECUTE format('CREATE POLICY %I ON %I FOR SELECT USING '
                       '((SELECT rara_caller_namespaces()) @> ''{*}'' '
                       'OR %s = ANY ((SELECT rara_caller_namespaces())::text[]))',
                       t.tab || '_read', t.tab, t.namespace);
    END LOOP;
END $$;

-- A blob is content-addressed and shared, but its existence is a team's: visible when a
-- visible step wrote or read it.
CREATE POLICY rara_artifacts_read ON rara_artifacts FOR SELECT
    USING ((SELECT rara_caller_namespaces()) @> '{*}'
           OR EXISTS (SELECT FROM rara_step_artifacts m WHERE m.digest = rara_artifacts.digest)
           OR EXISTS (SELECT FROM rara_step_reads d WHERE d.digest = rara_artifacts.digest));

-- Who may see whom is the fleet's business.
CREATE POLICY rara_namespace_access_read ON rara_namespace_access FOR SELECT
    USING ((SELECT rara_caller_namespaces()) @> '{*}');

-- The step cache is per namespace from now on (decision 0011): a step's `cache:` payload
-- carries its run's namespace, which the worker makes a part of the key. The function that
-- builds that payload takes the namespace.
DROP FUNCTION IF EXISTS rara_spec_caches(jsonb);
