-- Definitions: names and their immutable versions (rara_definitions, rara_definition_versions).
-- Read and written by rara.definitions.registry, rara.client and the operator (typed: rara.pg.definitions).
-- Loaded by rara.pg.queries with every other file of this folder: one name space, each name
-- object first, then verb (`step_lease`, `run_cancel`); `_many` takes arrays.
-- aiosql suffixes: ^ one row, $ one value, ! no result; none: all rows. No literal percent
-- signs: statements go to psycopg's %-style placeholders.

-- name: definition_register^
-- The version of :spec under :name in :namespace: the existing one with the same spec, or
-- the next number (created true); the database computes the digest.
-- db/functions/definitions.sql.
SELECT * FROM rara_definition_register(p_name => :name, p_spec => CAST(:spec AS jsonb),
                                       p_namespace => :namespace);

-- name: definition_version_get^
-- The given version of :name in :namespace, or the latest when :version is null.
SELECT v.id, v.namespace, v.name, v.version, v.digest, v.spec, v.created_at, d.retired_at
FROM rara_definition_versions v JOIN rara_definitions d USING (namespace, name)
WHERE v.namespace = :namespace AND v.name = :name
  AND (CAST(:version AS integer) IS NULL OR v.version = :version)
ORDER BY v.version DESC LIMIT 1;

-- name: definition_list
-- The definitions of :namespace (of every namespace when null), each with its latest version.
SELECT d.namespace, d.name, max(v.version) AS latest_version, count(*) AS versions,
       (array_agg(v.digest ORDER BY v.version DESC))[1] AS digest, d.retired_at
FROM rara_definitions d JOIN rara_definition_versions v USING (namespace, name)
WHERE CAST(:namespace AS text) IS NULL OR d.namespace = :namespace
GROUP BY d.namespace, d.name, d.retired_at ORDER BY d.namespace, d.name;

-- name: definition_retire$
SELECT rara_definition_retire(p_name => :name, p_namespace => :namespace);
