-- Artifacts: the manifests of succeeded steps (rara_step_artifacts) and the blobs they and the
-- checkpoints reference (rara_artifacts); manifests are written by step_end_many
-- (lease.sql). Typed: rara.pg.artifacts.
-- Loaded by rara.pg.queries with every other file of this folder: one name space, each name
-- object first, then verb (`step_lease`, `run_cancel`); `_many` takes arrays.
-- aiosql suffixes: ^ one row, $ one value, ! no result; none: all rows. No literal percent
-- signs: statements go to psycopg's %-style placeholders.

-- name: artifact_list
-- The artifacts of each succeeded step of a run (its succeeded attempt's manifest).
SELECT s.key, a.name, a.digest, a.size, a.media_type
FROM rara_steps s
JOIN rara_step_artifacts a ON a.step_id = s.id AND a.attempt = s.attempt
WHERE s.run_id = :run_id AND s.status = 'succeeded'
ORDER BY s.id, a.name;

-- name: artifact_list_referenced
-- Every digest a manifest, a checkpoint, a live cache entry (migration 0013) or a release
-- (0022: it outlives its run) still points at: GC keeps these blobs.
SELECT digest FROM rara_step_artifacts
UNION
SELECT digest FROM rara_release_artifacts
UNION
SELECT digest FROM rara_checkpoints WHERE digest IS NOT NULL
UNION
SELECT m.digest FROM rara_step_cache c
CROSS JOIN LATERAL jsonb_to_recordset(c.manifest) AS m(digest text)
WHERE c.expires_at IS NULL OR c.expires_at > now();

-- name: artifact_forget_many!
-- Forget blobs nothing references any more (rows only; the bytes are deleted by GC).
DELETE FROM rara_artifacts a
WHERE a.digest = ANY (CAST(:digests AS text[]))
  AND NOT EXISTS (SELECT 1 FROM rara_step_artifacts m WHERE m.digest = a.digest)
  AND NOT EXISTS (SELECT 1 FROM rara_checkpoints c WHERE c.digest = a.digest)
  AND NOT EXISTS (SELECT 1 FROM rara_release_artifacts r WHERE r.digest = a.digest)
  AND NOT EXISTS (SELECT 1 FROM rara_step_cache e
                  WHERE e.manifest @> jsonb_build_array(jsonb_build_object('digest', a.digest)));

-- name: artifact_find_by_prefix
-- Digests that start with :prefix (`rara artifacts get` takes unique prefixes, as git does);
-- at most :limit, so an ambiguous prefix costs no more than a look at a few rows.
SELECT digest FROM rara_artifacts
WHERE left(digest, length(:prefix)) = :prefix
ORDER BY digest LIMIT :limit;
