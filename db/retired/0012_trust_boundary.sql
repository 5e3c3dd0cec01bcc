-- rara 0012: the database is the trust boundary (issue 29; docs/least-privilege.md, "Threat
-- model").
--
-- 1. Owner code runs only where the owner means it to. A SECURITY DEFINER function runs as the
--    owner; 0004's trigger function was executable by PUBLIC (made before 0007's default
--    privileges) and resolved names through the search_path of its migration, which searches
--    pg_temp first: a login with no rara role attached it to a temporary table of its own
--    named like ours, whose own trigger then ran as the owner. Now no function of the schema
--    is executable by PUBLIC (db/functions/ grants each to the roles that call it), and every
--    SECURITY DEFINER function resolves names in this schema, then pg_temp last.
--    tests/security/test_definer_functions.py walks pg_proc so that no later migration reopens
--    it. Nobody may create objects in this schema but its owner.
-- 2. The database derives what it can. A version's digest is the sha256 of its spec as the
--    database stores it (rara_spec_digest), and the step rows of its runs are built here from
--    that spec (rara_spec_steps), once, when the version is registered: no caller can store a
--    spec under another spec's digest or start a run whose steps are not its spec's. Existing
--    versions get both (their digests change from the client's hash of its canonical JSON to
--    the database's; the same spec applied again still finds its version).
-- 3. A worker id belongs to the login that registered it (rara_workers.login): another login
--    may not register, heartbeat, lease as or stop it. Rows from before are unbound: the next
--    registration binds them.
-- 4. A manifest's media type is a media type (a CR/LF in one broke every download of it).

-- 1 ---------------------------------------------------------------------------------------
DO $$
DECLARE
    fn regprocedure;
BEGIN
    FOR fn IN
        SELECT p.oid::regprocedure FROM pg_proc p
        WHERE p.pronamespace = current_schema()::regnamespace
    LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', fn);
    END LOOP;
    FOR fn IN
        SELECT p.oid::regprocedure FROM pg_proc p
        WHERE p.pronamespace = current_schema()::regnamespace AND p.prosecdef
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', fn, current_schema());
    END LOOP;
    -- (Only the schema's owner can revoke; elsewhere, e.g. PostgreSQL 15's public schema owned
    -- by pg_database_owner, the default already gives PUBLIC no CREATE.)
    IF EXISTS (SELECT FROM pg_namespace n WHERE n.oid = current_schema()::regnamespace
               AND pg_has_role(n.nspowner, 'USAGE')) THEN
        EXECUTE format('REVOKE CREATE ON SCHEMA %I FROM PUBLIC', current_schema());
    END IF;
END $$;

-- 2 ---------------------------------------------------------------------------------------
-- The one digest rule: over jsonb's own text form, which is canonical (keys sorted, one
-- spelling of whitespace), so equal specs have one digest whoever sends them.
CREATE FUNCTION rara_spec_digest(p_spec jsonb) RETURNS text
LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT 'sha256:' || encode(sha256(convert_to(p_spec::text, 'UTF8')), 'hex')
$$;

-- Milliseconds of a definition's duration (`500ms`, `30s`, `1h30m`; rara.definitions.durations
-- is the same grammar); NULL stays NULL. `what` names the field in the error.
CREATE FUNCTION rara_duration_ms(p_value jsonb, p_what text) RETURNS integer
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

-- An integer field of a spec within bounds, or its default when absent.
CREATE FUNCTION rara_spec_int(p_value jsonb, p_default integer, p_low integer, p_high integer,
                              p_what text) RETURNS integer
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_value IS NULL OR p_value = 'null' THEN
        RETURN p_default;
    END IF;
    IF jsonb_typeof(p_value) <> 'number' OR (p_value #>> '{}')::numeric % 1 <> 0
       OR (p_value #>> '{}')::numeric NOT BETWEEN p_low AND p_high THEN
        RAISE EXCEPTION '%: must be an integer from % to %, got %', p_what, p_low, p_high,
            p_value USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN (p_value #>> '{}')::integer;
END $$;

-- The step rows of every run of a spec, as rara_run_start inserts them: one object per step,
-- in spec order, `dependants` the inverse of `dependsOn`. Checks what the rows rely on, with
-- the rules of rara.definitions.model (which tells a person the same earlier, with more words):
-- a spec that would make a run wait forever — an unknown dependency, a cycle, no steps — or
-- that a worker would misroute is refused, naming the step and the field.
CREATE FUNCTION rara_spec_steps(p_spec jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    steps jsonb := p_spec -> 'steps';
    n integer;
    s jsonb;
    what text;
    step_key text;
    position jsonb := '{}';      -- key -> its index (1-based)
    dependants jsonb := '{}';    -- key -> the keys that depend on it, in spec order
    waiting integer[] := '{}';   -- per index: dependencies not yet placed (Kahn's algorithm)
    queue text[] := '{}';
    head integer := 1;
    dep text;
    retry jsonb;
    map jsonb;
    over text;
    source text;
    rows jsonb := '[]';
    initial_ms integer;
    max_ms integer;
    coefficient double precision;
BEGIN
    IF jsonb_typeof(p_spec) IS DISTINCT FROM 'object'
       OR jsonb_typeof(steps) IS DISTINCT FROM 'array'
       OR jsonb_array_length(steps) NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'spec.steps: must be a list of 1 to 1000 steps'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    n := jsonb_array_length(steps);
    FOR i IN 1..n LOOP
        s := steps -> (i - 1);
        step_key := s ->> 'key';
        IF jsonb_typeof(s) IS DISTINCT FROM 'object' OR jsonb_typeof(s -> 'key') <> 'string'
           OR NOT step_key ~ '^[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?$' THEN
            RAISE EXCEPTION 'spec.steps[%].key: must be a step key (a-z, 0-9, _ and -)', i - 1
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF position ? step_key THEN
            RAISE EXCEPTION 'spec.steps[%]: duplicate step key %', i - 1, step_key
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        position := position || jsonb_build_object(step_key, i);
        dependants := dependants || jsonb_build_object(step_key, '[]'::jsonb);
    END LOOP;
    FOR i IN 1..n LOOP
        s := steps -> (i - 1);
        step_key := s ->> 'key';
        what := format('spec.steps[%s] (step %L)', i - 1, step_key);
        IF s -> 'dependsOn' IS NOT NULL AND s -> 'dependsOn' <> 'null'
           AND jsonb_typeof(s -> 'dependsOn') <> 'array' THEN
            RAISE EXCEPTION '%.dependsOn: must be a list of step keys', what
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        waiting := waiting || 0;
        FOR dep IN SELECT jsonb_array_elements(coalesce(nullif(s -> 'dependsOn', 'null'), '[]'))
                          #>> '{}' LOOP
            IF NOT position ? dep OR dep = step_key OR dependants -> dep ? step_key THEN
                RAISE EXCEPTION '%.dependsOn: % is not another step of the spec, or is listed '
                    'twice', what, dep USING ERRCODE = 'invalid_parameter_value';
            END IF;
            dependants := jsonb_set(dependants, ARRAY[dep], dependants -> dep || to_jsonb(step_key));
            waiting[i] := waiting[i] + 1;
        END LOOP;
        IF waiting[i] = 0 THEN
            queue := queue || step_key;
        END IF;
    END LOOP;
    -- Kahn's algorithm: a spec whose steps cannot all be placed in dependency order has a cycle.
    WHILE head <= cardinality(queue) LOOP
        FOR dep IN SELECT jsonb_array_elements_text(dependants -> queue[head]) LOOP
            waiting[(position ->> dep)::integer] := waiting[(position ->> dep)::integer] - 1;
            IF waiting[(position ->> dep)::integer] = 0 THEN
                queue := queue || dep;
            END IF;
        END LOOP;
        head := head + 1;
    END LOOP;
    IF cardinality(queue) < n THEN
        RAISE EXCEPTION 'spec.steps: dependency cycle among %', (
            SELECT string_agg(k, ', ' ORDER BY (position ->> k)::integer)
            FROM jsonb_object_keys(position) AS k WHERE NOT k = ANY (queue))
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR i IN 1..n LOOP
        s := steps -> (i - 1);
        step_key := s ->> 'key';
        what := format('spec.steps[%s] (step %L)', i - 1, step_key);
        IF jsonb_typeof(s -> 'capability') IS DISTINCT FROM 'string'
           OR NOT (s ->> 'capability') ~ '^[a-z][a-z0-9._-]*@(0|[1-9][0-9]*)$' THEN
            RAISE EXCEPTION '%.capability: must be name@major', what
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF coalesce(s ->> 'executor', 'inprocess') NOT IN ('inprocess', 'grpc') THEN
            RAISE EXCEPTION '%.executor: must be inprocess or grpc', what
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF coalesce(jsonb_typeof(nullif(s -> 'input', 'null')), 'object') <> 'object'
           OR coalesce(jsonb_typeof(nullif(s -> 'secrets', 'null')), 'object') <> 'object' THEN
            RAISE EXCEPTION '%.input and .secrets: must be mappings', what
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        retry := coalesce(nullif(s -> 'retry', 'null'), '{}');
        initial_ms := coalesce(rara_duration_ms(retry -> 'initialDelay',
                                                what || '.retry.initialDelay'), 1000);
        max_ms := coalesce(rara_duration_ms(retry -> 'maxDelay', what || '.retry.maxDelay'), 60000);
        IF max_ms < initial_ms THEN
            RAISE EXCEPTION '%.retry: maxDelay must be >= initialDelay', what
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF retry -> 'backoffCoefficient' IS NOT NULL AND retry -> 'backoffCoefficient' <> 'null'
           AND (jsonb_typeof(retry -> 'backoffCoefficient') <> 'number'
                OR (retry ->> 'backoffCoefficient')::double precision NOT BETWEEN 1 AND 100) THEN
            RAISE EXCEPTION '%.retry.backoffCoefficient: must be a number from 1 to 100', what
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        coefficient := coalesce((retry ->> 'backoffCoefficient')::double precision, 2.0);
        map := nullif(s -> 'map', 'null');
        IF map IS NOT NULL THEN
            over := map ->> 'over';
            IF jsonb_typeof(map -> 'over') IS DISTINCT FROM 'string' OR NOT over ~
                '^(input|[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?\.result)(\.[A-Za-z0-9_-]+)*$' THEN
                RAISE EXCEPTION '%.map.over: must be input or <step>.result, then a path', what
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            source := CASE WHEN over ~ '^input(\.|$)' THEN NULL ELSE split_part(over, '.', 1) END;
            IF source IS NOT NULL
               AND NOT coalesce(nullif(s -> 'dependsOn', 'null'), '[]') ? source THEN
                RAISE EXCEPTION '%.map.over: reads step %, which is not in its dependsOn',
                    what, source USING ERRCODE = 'invalid_parameter_value';
            END IF;
        END IF;
        rows := rows || jsonb_build_object(
            'key', step_key,
            'depends_on', coalesce(nullif(s -> 'dependsOn', 'null'), '[]'),
            'dependants', dependants -> step_key,
            'capability', s -> 'capability',
            'executor', coalesce(s ->> 'executor', 'inprocess'),
            'priority', rara_spec_int(s -> 'priority', 0, -1000, 1000, what || '.priority'),
            'payload', jsonb_build_object(
                'input', coalesce(nullif(s -> 'input', 'null'), '{}'),
                'secrets', coalesce(nullif(s -> 'secrets', 'null'), '{}')),
            'max_attempts', rara_spec_int(retry -> 'maxAttempts', 3, 1, 1000,
                                          what || '.retry.maxAttempts'),
            'retry_initial_ms', initial_ms,
            'retry_max_ms', max_ms,
            'retry_coefficient', coefficient,
            'timeout_ms', rara_duration_ms(s -> 'timeout', what || '.timeout'),
            'heartbeat_timeout_ms', rara_duration_ms(s -> 'heartbeatTimeout',
                                                     what || '.heartbeatTimeout'),
            'map_over', CASE WHEN map IS NULL THEN NULL
                             ELSE to_jsonb(ARRAY[coalesce(source, '$input')]
                                           || (string_to_array(over, '.'))[
                                                  CASE WHEN source IS NULL THEN 2 ELSE 3 END:])
                        END,
            'map_max_parallel', CASE WHEN map IS NULL THEN NULL
                                     ELSE rara_spec_int(map -> 'maxParallel', NULL, 1, 100000,
                                                        what || '.map.maxParallel') END);
    END LOOP;
    RETURN rows;
END $$;

-- The old signatures took the digest and the step rows from the caller (db/functions/ makes
-- the new ones after the migrations; a database migrated from scratch has neither yet).
DROP FUNCTION IF EXISTS rara_definition_register(text, text, jsonb);
DROP FUNCTION IF EXISTS rara_run_start(text, integer, text, jsonb, jsonb, text, boolean,
                                      double precision);

ALTER TABLE rara_definition_versions ADD COLUMN steps jsonb;
ALTER TABLE rara_definition_versions DISABLE TRIGGER rara_definition_versions_immutable;
-- Every version registered through rara passed rara.definitions.model, whose rules include
-- these; one made by hand that does not is named, and the migration stops for a person.
DO $$
DECLARE
    v record;
BEGIN
    FOR v IN SELECT id, name, version, spec FROM rara_definition_versions ORDER BY id LOOP
        BEGIN
            UPDATE rara_definition_versions
            SET digest = rara_spec_digest(v.spec), steps = rara_spec_steps(v.spec)
            WHERE id = v.id;
        EXCEPTION WHEN invalid_parameter_value THEN
            RAISE EXCEPTION 'definition % version %: %', v.name, v.version, SQLERRM
                USING ERRCODE = 'invalid_parameter_value';
        END;
    END LOOP;
END $$;
ALTER TABLE rara_definition_versions ENABLE TRIGGER rara_definition_versions_immutable;
ALTER TABLE rara_definition_versions ALTER COLUMN steps SET NOT NULL;

-- 3 ---------------------------------------------------------------------------------------
-- The login that registered the worker id (session_user, whatever role a function runs as);
-- NULL: registered before this migration, bound by its next registration.
ALTER TABLE rara_workers ADD COLUMN login name;

-- 4 ---------------------------------------------------------------------------------------
-- type/subtype with optional parameters, printable ASCII (rara.artifacts.media_type is the
-- same rule; a test runs both on the same values). NOT VALID: rows written before are not rewritten; readers serve a bad one as
-- application/octet-stream.
ALTER TABLE rara_step_artifacts ADD CONSTRAINT rara_step_artifacts_media_type_check CHECK (
    char_length(media_type) <= 255 AND media_type ~ '^[ -~]*$' AND media_type ~
    '^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}( *; *[A-Za-z0-9!#$&^_.+-]+=([A-Za-z0-9!#$&^_.+-]+|"[^"\\[:cntrl:]]*"))*$'
) NOT VALID;
