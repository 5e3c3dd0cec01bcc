-- The step cache (migrations 0013, 0016, 0026; docs/step-cache.md): an entry found by its base, listed,
-- explained and dropped. Entries are written by step_end_many (lease.sql) and dropped through
-- rara_step_cache_drop (db/functions/cache.sql). Typed: rara.pg.cache.
-- Loaded by rara.pg.queries with every other file of this folder: one name space, each name
-- object first, then verb (`step_lease`, `run_cancel`); `_many` takes arrays.
-- aiosql suffixes: ^ one row, $ one value, ! no result; none: all rows. No literal percent
-- signs: statements go to psycopg's %-style placeholders.

-- name: cache_find^
-- The newest live entry of :base, written by a step of :namespace and :capability (migration
-- 0026), whose step read nothing that :upstream ({"<step>/<name>": digest}, what a step is
-- given) does not give with the same digest, or none.
SELECT key, namespace, base, reads, capability, step_key, parts, result, manifest, source_run,
       source_step, source_attempt, created_at, expires_at
FROM rara_step_cache
WHERE base = :base AND namespace = :namespace AND capability = :capability
  AND reads <@ CAST(:upstream AS jsonb)
  AND (expires_at IS NULL OR expires_at > now())
ORDER BY created_at DESC LIMIT 1;

-- name: cache_list
-- Entries, newest first, at most :limit; :capability narrows them when not null.
SELECT key, namespace, base, reads, capability, step_key, parts, result, manifest, source_run,
       source_step, source_attempt, created_at, expires_at
FROM rara_step_cache
WHERE CAST(:capability AS text) IS NULL OR capability = :capability
ORDER BY created_at DESC, key LIMIT :limit;

-- name: cache_candidates_list
-- The newest :limit live entries of one capability and step key but :except_key (the entry a
-- hit reused, or a miss wrote), with the input fields' digests of the step that wrote each
-- (null once its run is pruned): what `rara cache explain` ranks to find the entry that
-- matches a step best (rara.cache.best_match).
SELECT c.key, c.source_run, c.parts, c.reads, c.created_at, s.cache -> 'fields' AS fields
FROM rara_step_cache c LEFT JOIN rara_steps s ON s.id = c.source_step
WHERE c.capability = :capability AND c.step_key = :step_key AND c.key <> :except_key
  AND (c.expires_at IS NULL OR c.expires_at > now())
ORDER BY c.created_at DESC LIMIT :limit;

-- name: cache_step_get^
-- A step of a run as the cache saw it: its capability, the key it was looked up under
-- ({key, parts}; null for a step without `cache:` or not leased yet), where it was reused
-- from, and whether its inputSchema names the run input fields it reads (`input_keys`,
-- rara_spec_input_rows: else the whole run input is in its key).
SELECT s.id, s.key, s.capability, s.status::text AS status, s.cache, s.reused_from,
       s.payload -> 'input_keys' IS NOT NULL AS input_declared
FROM rara_steps s WHERE s.run_id = :run_id AND s.key = :key;

-- name: cache_claim$
-- Single flight for a step that missed: true, compute; false, another running step computes
-- the key and the lease was given back; null, the lease is lost (rara_step_cache_claim).
SELECT rara_step_cache_claim(p_worker => :worker, p_step_id => :step_id,
                             p_token => CAST(:token AS uuid), p_cache => CAST(:cache AS jsonb));

-- name: cache_drop_many
-- Entries removed by key; returns the keys that were there.
SELECT * FROM rara_step_cache_drop(p_keys => CAST(:keys AS text[]));
