-- Freshness (docs/freshness.md): what a definition that declares `freshness` made last — its
-- newest succeeded run, and the current release of each name its runs were promoted as — for
-- rara.freshness to judge against the declared maximum age. Read-only, under the namespace
-- policies. Typed: rara.freshness.
-- Loaded by rara.pg.queries with every other file of this folder: one name space, each name
-- object first, then verb (`step_lease`, `run_cancel`); `_many` takes arrays.
-- aiosql suffixes: ^ one row, $ one value, ! no result; none: all rows. No literal percent
-- signs: statements go to psycopg's %-style placeholders.

-- name: freshness_list
-- Per definition of :namespace (every namespace when null; not retired; only :definition
-- when it is not null) whose latest version declares freshness: itself (kind `definition`, its newest succeeded run) and each release
-- name whose current release is a run of it (kind `release`, when it was promoted).
WITH declared AS (
    SELECT DISTINCT ON (v.namespace, v.name)
           v.namespace, v.name, v.spec -> 'freshness' ->> 'maxAge' AS max_age,
           d.created_at AS defined_at
    FROM rara_definition_versions v
    JOIN rara_definitions d ON d.namespace = v.namespace AND d.name = v.name
    WHERE d.retired_at IS NULL
      AND (CAST(:namespace AS text) IS NULL OR v.namespace = :namespace)
      AND (CAST(:definition AS text) IS NULL OR v.name = :definition)
    ORDER BY v.namespace, v.name, v.version DESC
)
SELECT 'definition' AS kind, x.namespace, x.name, x.name AS definition, x.max_age,
       x.defined_at, s.finished_at AS made_at, s.id AS run_id, now() AS db_now
FROM declared x
LEFT JOIN LATERAL (
    SELECT r.id, r.finished_at FROM rara_runs r
    JOIN rara_definition_versions rv ON rv.id = r.definition_version_id
    WHERE rv.namespace = x.namespace AND rv.name = x.name AND r.status = 'succeeded'
    ORDER BY r.finished_at DESC LIMIT 1) s ON true
WHERE x.max_age IS NOT NULL
UNION ALL
SELECT 'release', x.namespace, c.name, x.name, x.max_age, x.defined_at, rel.promoted_at,
       rel.run_id, now()
FROM declared x
JOIN rara_release_current c ON c.namespace = x.namespace
JOIN rara_releases rel
  ON rel.namespace = c.namespace AND rel.name = c.name AND rel.number = c.number
JOIN rara_definition_versions rv
  ON rv.id = rel.definition_version_id AND rv.name = x.name
WHERE x.max_age IS NOT NULL
ORDER BY 2, 1, 3;
