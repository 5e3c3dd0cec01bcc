-- rara 0026: a cache entry belongs to the namespace and capability of the step that wrote it
-- (docs/step-cache.md, "Where it lives"; docs/least-privilege.md).
--
-- An entry was written from what the ending worker sent, for any step it ended, `cache:` or
-- not, and a step looked entries up by their base alone: a worker could end one of its steps
-- with an entry under the base another namespace's step (or another capability's) would look
-- up, and that step reused the forged result. Now the end writes an entry only for a step
-- whose definition has `cache:` (its payload's `cache`, rara_spec_caches), with the step row's
-- namespace, capability, step key and ttl (rara_step_end_many, db/functions/lease.sql), and a
-- look-up matches the namespace and the capability as well as the base (cache_find). A key is
-- unique per namespace and capability, so such an entry replaces none of another's. A team's
-- entries are the ones its steps wrote, also after `rara runs prune` deleted their run: the
-- read policy and rara_step_cache_drop compare the entry's namespace.
--
-- Existing entries take the namespace of the step that wrote them. An entry that cannot be
-- attributed is deleted: its step is gone (its run was pruned), had no `cache:`, or has another
-- capability or key than the entry says. What a deleted entry saved is computed again once;
-- its blobs are no longer kept from `rara artifacts gc` by it.
--
-- Needs no owner privilege beyond the table's.

ALTER TABLE rara_step_cache ADD COLUMN namespace text;
UPDATE rara_step_cache c SET namespace = s.namespace
FROM rara_steps s
WHERE s.id = c.source_step AND s.run_id = c.source_run AND s.capability = c.capability
  AND s.key = c.step_key AND jsonb_typeof(s.payload -> 'cache') = 'object';
DELETE FROM rara_step_cache WHERE namespace IS NULL;
ALTER TABLE rara_step_cache ALTER COLUMN namespace SET NOT NULL;

-- A key is unique within a namespace and capability: a worker that ends its step with an entry
-- under a key another namespace's step computes replaces nothing of that namespace (the key
-- first: `rara cache drop KEY`, reused_from's cache_key).
ALTER TABLE rara_step_cache DROP CONSTRAINT rara_step_cache_pkey,
    ADD PRIMARY KEY (key, namespace, capability);

-- A step's look-up: the live entries of its namespace, capability and base, newest first,
-- then the reads checked.
DROP INDEX rara_step_cache_by_base;
CREATE INDEX rara_step_cache_by_base
    ON rara_step_cache (base, namespace, capability, created_at);

-- A team reads the entries of its namespaces (migration 0018's policy compared the namespace
-- of the entry's run, which a prune deletes).
DROP POLICY rara_step_cache_read ON rara_step_cache;
CREATE POLICY rara_step_cache_read ON rara_step_cache FOR SELECT
    USING ((SELECT rara_caller_namespaces()) @> '{*}'
           OR namespace = ANY ((SELECT rara_caller_namespaces())::text[]));
