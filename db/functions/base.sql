-- The ground floor: helpers that every other file of db/functions/ may call and that call none
-- (db/functions/ORDER lists the floors; .ci/check-sql-floors.py keeps every file calling only
-- the files below it). Repeatable (rara.pg.migrate): edit in place.

-- EXECUTE on every function named `routine` (all its signatures) for those of `roles` that
-- exist, and for nobody else: the roles are cluster-wide and may be missing where the migrating
-- user could not create them (migration 0002), and then only the owner runs anything. Every
-- function file names, after each function, the roles that may call it this way; none may call
-- this one. (Migration 0007 made it; migrations after it call it.)
CREATE OR REPLACE FUNCTION rara_grant(routine text, VARIADIC roles text[] DEFAULT '{}') RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    signature regprocedure;
    grantee text;
BEGIN
    FOR signature IN
        SELECT p.oid::regprocedure FROM pg_proc p
        WHERE p.proname = routine AND p.pronamespace = current_schema()::regnamespace
    LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', signature);
        FOREACH grantee IN ARRAY roles LOOP
            IF EXISTS (SELECT FROM pg_roles WHERE rolname = grantee) THEN
                EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', signature, grantee);
            END IF;
        END LOOP;
    END LOOP;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'rara_grant: no function named %', routine;
    END IF;
END $$;
SELECT rara_grant('rara_grant');

-- Milliseconds of a definition's duration (`500ms`, `30s`, `1h30m`; rara.definitions.durations
-- is the same grammar); NULL stays NULL. `what` names the field in the error. For the checks of
-- a spec at registration (rara_spec_run_steps, rara_spec_wait, rara_spec_caches).
CREATE OR REPLACE FUNCTION rara_duration_ms(p_value jsonb, p_what text) RETURNS integer
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    total numeric;
BEGIN
    IF p_value IS NULL OR p_value = 'null' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(p_value) <> 'string'
       OR NOT (p_value #>> '{}') ~ '^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$' THEN
        RAISE EXCEPTION '%: % is not a duration (use units ms, s, m, h: ''30s'', ''5m'')',
            p_what, p_value USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT sum(m[1]::numeric * CASE m[2] WHEN 'ms' THEN 1 WHEN 's' THEN 1000
                                         WHEN 'm' THEN 60000 ELSE 3600000 END)
    INTO total
    FROM regexp_matches(p_value #>> '{}', '([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)', 'g') AS m;
    IF total <= 0 OR total > 2147483647 THEN
        RAISE EXCEPTION '%: duration % out of range', p_what, p_value
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN round(total)::integer;
END $$;
SELECT rara_grant('rara_duration_ms');  -- only through the owner's functions
