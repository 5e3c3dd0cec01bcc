-- The step cache (migration 0013, docs/step-cache.md): the entries' settings given to a run's
-- steps, and their removal. Entries are written by a step's success (rara_step_end_many,
-- lease.sql) and reused by a worker that verified their blobs; nothing else writes them.
-- Called through db/queries/cache.sql (rara.pg.cache). Repeatable (rara.pg.migrate): edit in
-- place.

CREATE OR REPLACE FUNCTION rara_spec_caches(p_spec jsonb)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    caches jsonb := '{}';
    s jsonb;
BEGIN
    -- The `cache:` of each step that has one, by step key, as each step's payload carries it
    -- ({"cache": {"ttl_ms": …}}; rara_run_start): what the worker that leases the step reads.
    -- Most specs have none: an empty object, and the run start adds nothing to its payloads.
    FOR s IN SELECT st FROM jsonb_array_elements(p_spec -> 'steps') AS st
             WHERE jsonb_typeof(st -> 'cache') = 'object'
    LOOP
        caches := caches || jsonb_build_object(s ->> 'key', jsonb_build_object(
            'cache', jsonb_build_object(
                'ttl_ms', rara_duration_ms(s -> 'cache' -> 'ttl',
                                           'spec.steps.' || (s ->> 'key') || '.cache.ttl'))));
    END LOOP;
    RETURN caches;
END $$;
SELECT rara_grant('rara_spec_caches');  -- only through rara_run_start

CREATE OR REPLACE FUNCTION rara_step_cache_drop(p_keys text[])
RETURNS SETOF text
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    -- Entries removed: by `rara cache drop`, and by a worker that found one of an entry's
    -- blobs missing or corrupt (the step then runs, and its success writes a new entry).
    -- The blobs stay until `rara artifacts gc` finds nothing else names them.
    RETURN QUERY DELETE FROM rara_step_cache c WHERE c.key = ANY (p_keys) RETURNING c.key;
END $$;
SELECT rara_grant('rara_step_cache_drop', 'rara_worker', 'rara_client');
