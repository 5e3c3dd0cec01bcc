-- The dashboard's releases (rara.ui.releases; docs/ui.md, "Releases"): read as the viewer, so
-- row-level security narrows them to the viewer's namespaces as it narrows every list. The
-- release itself, its numbers, moves and artifacts are read by the statements of `rara
-- releases` (db/queries/releases.sql).
-- Loaded by rara.pg.queries with every other file of this folder: one name space, each name
-- object first, then verb; aiosql suffixes: ^ one row, $ one value, ! no result; none: all
-- rows. No literal percent signs: statements go to psycopg's %-style placeholders.

-- name: ui_release_page
-- Release names by (namespace, name) after the keyset cursor (:after_namespace, :after), each
-- with its current release (its run, its definition's version, who promoted it and when), the
-- newest number, and the last move of its pointer (a rollback says who moved it back);
-- :namespace (null: every namespace) narrows to one.
SELECT c.namespace, c.name, c.number AS current, v.run_id, d.name AS definition,
       d.version AS definition_version, v.promoted_by, v.promoted_at,
       (SELECT max(x.number) FROM rara_releases x
        WHERE x.namespace = c.namespace AND x.name = c.name) AS newest,
       m.action AS last_action, m.moved_by AS last_moved_by, m.moved_at AS last_moved_at
FROM rara_release_current c
JOIN rara_releases v ON v.namespace = c.namespace AND v.name = c.name AND v.number = c.number
JOIN rara_definition_versions d ON d.id = v.definition_version_id
LEFT JOIN LATERAL (
    SELECT mm.action, mm.moved_by, mm.moved_at FROM rara_release_moves mm
    WHERE mm.namespace = c.namespace AND mm.name = c.name
    ORDER BY mm.id DESC LIMIT 1) m ON true
WHERE (CAST(:after AS text) IS NULL OR (c.namespace, c.name) > (:after_namespace, :after))
  AND (CAST(:namespace AS text) IS NULL OR c.namespace = :namespace)
ORDER BY c.namespace, c.name
LIMIT :limit;

-- name: ui_run_release_list
-- The releases run :run_id became (its page says "promoted as NAME@N"), oldest first. Releases
-- are few (a person promotes each), so this reads them without an index on run_id.
SELECT v.namespace, v.name, v.number, c.number IS NOT DISTINCT FROM v.number AS current
FROM rara_releases v
LEFT JOIN rara_release_current c ON c.namespace = v.namespace AND c.name = v.name
WHERE v.run_id = :run_id
ORDER BY v.id;

-- name: ui_release_run^
-- The run a release was promoted from, while it exists (retention may prune a released run:
-- its release keeps its own copy of the results and artifacts).
SELECT r.id, r.status::text AS status FROM rara_runs r WHERE r.id = :run_id;
