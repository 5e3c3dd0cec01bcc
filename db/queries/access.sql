-- Which roles may read and act in which namespaces (rara_namespace_access, migration 0018;
-- docs/namespaces.md, "Isolation"). Only the schema's owner writes the table: `rara access`
-- run with the owner's DATABASE_URL, like `rara migrate`. Typed: rara.pg.access.
-- Loaded by rara.pg.queries with every other file of this folder: one name space, each name
-- object first, then verb (`step_lease`, `run_cancel`); `_many` takes arrays.
-- aiosql suffixes: ^ one row, $ one value, ! no result; none: all rows. No literal percent
-- signs: statements go to psycopg's %-style placeholders.

-- name: namespace_access_list
-- Every grant, with whether its role still exists (a dropped role's rows grant nobody).
SELECT a.role, a.namespace, a.granted_at,
       EXISTS (SELECT FROM pg_roles r WHERE r.rolname = a.role) AS role_exists
FROM rara_namespace_access a ORDER BY a.role, a.namespace;

-- name: namespace_access_grant_many
-- :role may read and act in each of :namespaces ('*': every one); returns those it had not.
INSERT INTO rara_namespace_access (role, namespace)
SELECT :role, n FROM unnest(CAST(:namespaces AS text[])) AS n
ON CONFLICT DO NOTHING
RETURNING namespace;

-- name: namespace_access_revoke_many
-- Returns the namespaces :role had.
DELETE FROM rara_namespace_access
WHERE role = :role AND namespace = ANY (CAST(:namespaces AS text[]))
RETURNING namespace;

-- name: namespace_caller_list$
-- The namespaces of the role this session acts as ('{*}': every one).
SELECT rara_caller_namespaces();

-- name: role_exists$
SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = :role);
