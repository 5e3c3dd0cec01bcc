-- Releases (rara_releases, rara_release_artifacts, rara_release_current, rara_release_moves;
-- migration 0022): promoted and rolled back through db/functions/releases.sql, read by
-- `rara releases` and applications under the namespaces' read policies. Typed:
-- rara.pg.releases.
-- Loaded by rara.pg.queries with every other file of this folder: one name space, each name
-- object first, then verb (`step_lease`, `run_cancel`); `_many` takes arrays.
-- aiosql suffixes: ^ one row, $ one value, ! no result; none: all rows. No literal percent
-- signs: statements go to psycopg's %-style placeholders.

-- name: release_promote$
-- The new release's number (it is current now).
SELECT rara_release_promote(p_name => :name, p_run_id => :run_id,
                            p_artifacts => CAST(:artifacts AS text[]),
                            p_results => CAST(:results AS text[]), p_note => :note,
                            p_namespace => :namespace);

-- name: release_rollback^
SELECT * FROM rara_release_rollback(p_name => :name, p_to => CAST(:to_number AS integer),
                                    p_reason => :reason, p_namespace => :namespace);

-- name: release_get^
-- Release :number of :name in :namespace, or the current one when :number is null.
SELECT v.id, v.namespace, v.name, v.number, v.run_id, d.name AS definition,
       d.version AS definition_version, v.definition_version_id, v.results, v.promoted_by,
       v.promoted_at, v.note, c.number IS NOT DISTINCT FROM v.number AS current
FROM rara_releases v
JOIN rara_definition_versions d ON d.id = v.definition_version_id
LEFT JOIN rara_release_current c ON c.namespace = v.namespace AND c.name = v.name
WHERE v.namespace = :namespace AND v.name = :name
  AND v.number = coalesce(CAST(:number AS integer), c.number);

-- name: release_artifact_list
-- The artifacts of release :release_id.
SELECT a.step_key, a.name, a.digest, a.size, a.media_type
FROM rara_release_artifacts a
WHERE a.release_id = :release_id
ORDER BY a.step_key, a.name;

-- name: release_list
-- The releases of :namespace (of every namespace when null), of :name only unless null,
-- newest first per name.
SELECT v.namespace, v.name, v.number, v.run_id, v.promoted_by, v.promoted_at, v.note,
       c.number IS NOT DISTINCT FROM v.number AS current,
       (SELECT count(*) FROM rara_release_artifacts a WHERE a.release_id = v.id) AS artifacts
FROM rara_releases v
LEFT JOIN rara_release_current c ON c.namespace = v.namespace AND c.name = v.name
WHERE (CAST(:namespace AS text) IS NULL OR v.namespace = :namespace)
  AND (CAST(:name AS text) IS NULL OR v.name = :name)
ORDER BY v.namespace, v.name, v.number DESC;

-- name: release_move_list
-- Every move of :name's current pointer in :namespace, oldest first.
SELECT m.action, m.from_number, m.to_number, m.moved_by, m.moved_at, m.reason
FROM rara_release_moves m
WHERE m.namespace = :namespace AND m.name = :name
ORDER BY m.id;
