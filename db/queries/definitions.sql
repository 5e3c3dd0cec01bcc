-- Definitions: names and their immutable versions (rara_definitions, rara_definition_versions).
-- Read and written by rara.definitions.registry, rara.client and the operator (typed: rara.pg.definitions).
-- Loaded by rara.pg.queries with every other file of this folder: one name space, each name
-- object first, then verb (`step_lease`, `run_cancel`); `_many` takes arrays.
-- aiosql suffixes: ^ one row, $ one value, ! no result; none: all rows. No literal percent
-- signs: statements go to psycopg's %-style placeholders.

-- name: definition_register^
-- The version of :spec under :name: the existing one with the same spec, or the next number
-- (created true); the database computes the digest. db/functions/definitions.sql.
SELECT * FROM rara_definition_register(p_name => :name, p_spec => CAST(:spec AS jsonb));

-- name: definition_version_get^
-- The given version, or the latest when :version is null.
SELECT v.id, v.name, v.version, v.digest, v.spec, v.created_at, d.retired_at
FROM rara_definition_versions v JOIN rara_definitions d USING (name)
WHERE v.name = :name AND (CAST(:version AS integer) IS NULL OR v.version = :version)
ORDER BY v.version DESC LIMIT 1;

-- name: definition_list
SELECT d.name, max(v.version) AS latest_version, count(*) AS versions,
       (array_agg(v.digest ORDER BY v.version DESC))[1] AS digest, d.retired_at
FROM rara_definitions d JOIN rara_definition_versions v USING (name)
GROUP BY d.name, d.retired_at ORDER BY d.name;

-- name: definition_retire$
SELECT rara_definition_retire(p_name => :name);
