-- rara 0013: the step cache (issue 33, item 1; docs/step-cache.md, docs/decisions/0008).
--
-- A step that opts in (`cache:` in its definition) ends by writing an entry under its cache
-- key: a digest over what went in (capability, spec, resolved input, upstream artifacts),
-- computed by the worker that ran it (rara.cache). A later step with the same key reuses the
-- entry's result and artifact manifest instead of running, once a worker has checked that
-- every blob of the manifest is in the store and has the digest it is named by.
--
-- The entry keeps its own copy of the result and the manifest, not a reference to the step
-- rows it came from: `rara runs prune` may delete the run that made it without breaking the
-- entry, and `rara artifacts gc` keeps every blob a live entry names (artifact_list_referenced).
-- source_* say where it came from, for `rara runs show` and `rara cache list`; they are not
-- foreign keys, for the same reason.
--
-- rara_steps.cache: the key a step with `cache:` was looked up under ({key, parts}), for
-- `rara cache explain`; rara_steps.reused_from: where a reused step's result came from
-- ({via: cache, cache_key, run, step, key, attempt}); null for a step that ran. No role writes either table but the owner's
-- functions (db/functions/lease.sql, db/functions/cache.sql). Needs nothing of the owner
-- beyond what earlier migrations did.

CREATE TABLE rara_step_cache (
    key            text PRIMARY KEY CHECK (key ~ '^sha256:[0-9a-f]{64}$'),
    capability     text NOT NULL,
    step_key       text NOT NULL,
    -- The digest of each part of the key, by name: what `rara cache explain` compares.
    parts          jsonb NOT NULL CHECK (jsonb_typeof(parts) = 'object'),
    result         jsonb,
    manifest       jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(manifest) = 'array'),
    source_run     bigint NOT NULL,
    source_step    bigint NOT NULL,
    source_attempt integer NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    expires_at     timestamptz
);
-- `rara cache explain`: the entries of one capability and step key, newest first.
CREATE INDEX rara_step_cache_by_step ON rara_step_cache (capability, step_key, created_at);

ALTER TABLE rara_steps ADD COLUMN cache jsonb, ADD COLUMN reused_from jsonb;
-- Single flight (rara_step_cache_claim): the running steps computing a key, found by it.
CREATE INDEX rara_steps_running_cache_key ON rara_steps ((cache ->> 'key'))
    WHERE status = 'running' AND cache IS NOT NULL;
