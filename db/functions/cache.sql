-- The step cache (migrations 0013, 0026; docs/step-cache.md): the entries' settings given to a
-- run's steps, and their removal. Entries are written by the success of a step with `cache:`
-- (rara_step_end_many, lease.sql), in its namespace and capability, and reused by a worker that
-- verified their blobs; nothing else writes them.
-- Called through db/queries/cache.sql (rara.pg.cache). Repeatable (rara.pg.migrate): edit in
-- place.

CREATE OR REPLACE FUNCTION rara_spec_caches(p_spec jsonb, p_namespace text)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    caches jsonb := '{}';
    s jsonb;
BEGIN
    -- The `cache:` of each step that has one, by step key, as each step's payload carries it
    -- ({"cache": {"ttl_ms": …, "namespace": …}}; rara_run_start): what the worker that leases
    -- the step reads. The namespace is the run's, never the spec's word: the worker makes it
    -- part of the key, so a team reuses only its own entries (decision 0011).
    -- Most specs have none: an empty object, and the run start adds nothing to its payloads.
    FOR s IN SELECT st FROM jsonb_array_elements(p_spec -> 'steps') AS st
             WHERE jsonb_typeof(st -> 'cache') = 'object'
    LOOP
        caches := caches || jsonb_build_object(s ->> 'key', jsonb_build_object(
            'cache', jsonb_build_object(
                'ttl_ms', rara_duration_ms(s -> 'cache' -> 'ttl',
                                           'spec.steps.' || (s ->> 'key') || '.cache.ttl'),
            'namespace', p_namespace)));
    END LOOP;
    RETURN caches;
END $$;
SELECT rara_grant('rara_spec_caches');  -- only through rara_run_start

CREATE OR REPLACE FUNCTION rara_step_cache_claim(p_worker text, p_step_id bigint,
                                                 p_token uuid, p_cache jsonb)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT SET enable_seqscan = off AS $$
DECLARE
    claimed record;
BEGIN
    -- Single flight for a step that missed (docs/step-cache.md, "Concurrent misses"), fenced by
    -- its lease: true, compute it — the step row now says it computes p_cache's key; false,
    -- another running step computes that key: the lease is given back (released, out of the
    -- retry budget) until a backoff that doubles with each deferral (250 ms up to the step's
    -- retryMaxDelay), after which the step finds the entry (a hit) or, if the other failed,
    -- computes; null, the lease is lost. Claims of one key are serialized by a transaction
    -- advisory lock on it, so of two steps that miss at once the second sees the first's
    -- claim. A claim is the step's status: it ends when the step stops running, however.
    -- Only a step with `cache:` claims, and it defers only to a step of its own namespace and
    -- capability (the entry it waits for is found by them: cache_find): a worker cannot hold
    -- back another namespace's steps by claiming their key.
    PERFORM pg_advisory_xact_lock(hashtextextended(p_cache ->> 'key', 33));
    UPDATE rara_steps s SET cache = p_cache - 'ttl_ms'
    WHERE s.id = p_step_id AND s.leased_by = p_worker AND s.lease_token = p_token
      AND s.status = 'running' AND jsonb_typeof(s.payload -> 'cache') = 'object'
    RETURNING s.id, s.namespace, s.capability INTO claimed;
    IF claimed.id IS NULL THEN
        RETURN NULL;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM rara_steps o
                   WHERE (o.cache ->> 'key') = p_cache ->> 'key' AND o.status = 'running'
                     AND o.cache IS NOT NULL AND o.id <> p_step_id
                     AND o.namespace = claimed.namespace
                     AND o.capability = claimed.capability) THEN
        RETURN true;
    END IF;
    WITH released AS (
        UPDATE rara_steps s SET status = 'ready',
            available_at = now() + make_interval(secs => least(
                s.retry_max_ms, 250 * 2 ^ least(s.releases, 10)) / 1000.0),
            releases = s.releases + 1, leased_by = NULL, lease_token = NULL,
            lease_expires_at = NULL
        WHERE s.id = p_step_id
        RETURNING s.id, s.attempt
    )
    UPDATE rara_attempts a
    SET outcome = 'released', ended_at = clock_timestamp(), ended_by = p_worker
    FROM released r WHERE a.step_id = r.id AND a.attempt = r.attempt;
    -- What it held may let a waiting step start (its limit, quota or key).
    PERFORM rara_admission_freed(ARRAY[s.capability], ARRAY[s.namespace],
                                 ARRAY[s.concurrency_key], ARRAY[s.concurrency_max])
    FROM rara_steps s WHERE s.id = p_step_id;
    RETURN false;
END $$;
SELECT rara_grant('rara_step_cache_claim', 'rara_worker');

CREATE OR REPLACE FUNCTION rara_step_cache_drop(p_keys text[])
RETURNS SETOF text
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    -- Entries removed: by `rara cache drop`, and by a worker that found one of an entry's
    -- blobs missing or corrupt (the step then runs, and its success writes a new entry).
    -- The blobs stay until `rara artifacts gc` finds nothing else names them. A team drops
    -- only the entries its own steps wrote (the entry's namespace, migration 0026), also
    -- after their run was pruned. A key is one per namespace and capability: each of the
    -- caller's is dropped.
    RETURN QUERY WITH dropped AS (
        DELETE FROM rara_step_cache c
        WHERE c.key = ANY (p_keys) AND rara_namespace_allowed(c.namespace)
        RETURNING c.key
    )
    SELECT DISTINCT d.key FROM dropped d;
END $$;
SELECT rara_grant('rara_step_cache_drop', 'rara_worker', 'rara_client');
