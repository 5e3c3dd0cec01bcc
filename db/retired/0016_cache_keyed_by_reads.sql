-- rara 0016: cache entries found by what their step read (issue 33; docs/step-cache.md).
--
-- An entry was stored under one key over everything its step was given, its upstream
-- artifacts included: a map child given all four shards of a list missed when any shard
-- changed, though it reads one. Now an entry has a base (the key's parts known before a step
-- runs: capability, spec, input, the rule's version) and the upstream artifacts its step read,
-- {"<step>/<name>": digest}; a step reuses it when the bases are equal and every one of those
-- artifacts is given to it with the same digest (reads <@ given, rara.pg.cache.find). `key` is
-- now the digest of the base's parts and the reads', so two entries of one base that read
-- different bytes are two entries.
--
-- The entries of the old rule are deleted: their keys are of rule 1, which no step computes
-- any more, so no step could reuse them, and their blobs were kept from `rara artifacts gc`
-- for nothing. What they saved is computed again once, by the next run of each step.
--
-- Needs no owner privilege beyond the table's.

DELETE FROM rara_step_cache;
ALTER TABLE rara_step_cache
    ADD COLUMN base  text NOT NULL CHECK (base ~ '^sha256:[0-9a-f]{64}$'),
    ADD COLUMN reads jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(reads) = 'object');
-- A step's look-up: the live entries of its base, newest first, then the reads checked.
CREATE INDEX rara_step_cache_by_base ON rara_step_cache (base, created_at);
