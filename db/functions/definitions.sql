-- Definitions: registering a version and retiring a name, by the roles that register them
-- (rara_client: `rara definitions apply`, applications; rara_operator: WorkflowDefinition
-- resources). Versions are immutable (a trigger refuses changes: rara_refuse_version_change)
-- and no role writes the tables directly (migration 0007). Then the checks of a spec that
-- registration runs (rara_spec_steps: the step rows of every run of the version). Called
-- through db/queries/definitions.sql (rara.pg.definitions). Repeatable (rara.pg.migrate):
-- edit in place.

CREATE OR REPLACE FUNCTION rara_definition_register(
    p_name text, p_spec jsonb, p_namespace text DEFAULT 'default')
RETURNS TABLE (id bigint, name text, version integer, digest text, created_at timestamptz,
               created boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    spec_digest text;
    step_rows jsonb;
    steps integer := CASE WHEN jsonb_typeof(p_spec -> 'steps') = 'array'
                          THEN jsonb_array_length(p_spec -> 'steps') END;
    spec_bytes integer;
BEGIN
    -- The size limits first (rara_limits), before any work that grows with the spec — its
    -- digest, its step rows (a walk quadratic in its steps), the namespace check: what a
    -- caller sends costs at most what the limits allow, whoever the caller is.
    PERFORM rara_limit_check('spec.steps', steps, 'steps', 'spec_steps');
    spec_bytes := octet_length(p_spec::text);
    PERFORM rara_limit_check('the spec', spec_bytes, 'bytes', 'spec_bytes');
    PERFORM rara_namespace_check(p_namespace);
    spec_digest := rara_spec_digest(p_spec);
    -- Refuses a spec no run could follow. Each step row's payload also names the run input
    -- fields the step may read (rara_spec_input_keys): its lease carries only those.
    step_rows := rara_spec_input_rows(p_spec, rara_spec_steps(p_spec));
    PERFORM rara_spec_concurrency(p_spec, p_namespace, p_name);  -- refuses a bad concurrency:
    -- The version of p_spec under p_name in p_namespace: the existing one with its digest,
    -- or the next number (each namespace's history its own: migration 0017). The digest and the step rows are the database's own (migration 0012), never the
    -- caller's word. Two registrars of one name must not both pick version N+1: the advisory
    -- lock (released at commit) orders them, and the second one finds the first one's row by
    -- digest. Registering a retired name brings it back.
    PERFORM pg_advisory_xact_lock(hashtext('rara_definition:' || p_namespace || '/' || p_name));
    INSERT INTO rara_definitions (namespace, name) VALUES (p_namespace, p_name)
    ON CONFLICT ON CONSTRAINT rara_definitions_pkey DO UPDATE SET retired_at = NULL;
    RETURN QUERY
    SELECT v.id, v.name, v.version, v.digest, v.created_at, false
    FROM rara_definition_versions v
    WHERE v.namespace = p_namespace AND v.name = p_name AND v.digest = spec_digest;
    IF NOT FOUND THEN
        RETURN QUERY
        INSERT INTO rara_definition_versions AS v (namespace, name, version, digest, spec, steps)
        SELECT p_namespace, p_name, coalesce(max(w.version), 0) + 1, spec_digest, p_spec,
               step_rows
        FROM rara_definition_versions w WHERE w.namespace = p_namespace AND w.name = p_name
        RETURNING v.id, v.name, v.version, v.digest, v.created_at, true;
    END IF;
END $$;
SELECT rara_grant('rara_definition_register', 'rara_client', 'rara_operator');

CREATE OR REPLACE FUNCTION rara_spec_input_keys(p_schema jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    -- The run input fields a step's inputSchema declares (its top-level `properties`), when
    -- they are all the schema lets the step read: no other top-level keyword than these
    -- (allOf, patternProperties, $ref … may admit fields it does not name) and
    -- additionalProperties absent or false. NULL otherwise: the step is given the whole input.
    SELECT CASE
        WHEN jsonb_typeof(p_schema -> 'properties') = 'object'
             AND coalesce(p_schema -> 'additionalProperties', 'false') = 'false'
             AND NOT EXISTS (
                 SELECT FROM jsonb_object_keys(p_schema) AS k(word)
                 WHERE k.word NOT IN ('type', 'properties', 'required', 'additionalProperties',
                                      'title', 'description', '$schema', '$id', '$comment',
                                      '$defs', 'examples', 'default'))
        THEN coalesce((SELECT jsonb_agg(k.name ORDER BY k.name)
                       FROM jsonb_object_keys(p_schema -> 'properties') AS k(name)), '[]')
    END
$$;
SELECT rara_grant('rara_spec_input_keys');  -- only through rara_definition_register

CREATE OR REPLACE FUNCTION rara_spec_input_rows(p_spec jsonb, p_rows jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    -- p_rows (rara_spec_steps of p_spec) with `input_keys` in the payload of each step whose
    -- inputSchema declares the fields it reads (rara_spec_input_keys): the lease gives that
    -- step only those fields of the run input (rara_step_lease, docs/limits.md).
    WITH declared AS (
        SELECT s.step ->> 'key' AS key, rara_spec_input_keys(s.step -> 'inputSchema') AS keys
        FROM jsonb_array_elements(p_spec -> 'steps') AS s(step)
        WHERE jsonb_typeof(s.step -> 'inputSchema') = 'object'
    )
    SELECT jsonb_agg(CASE WHEN d.keys IS NULL THEN r.row
                          ELSE jsonb_set(r.row, '{payload,input_keys}', d.keys) END
                     ORDER BY r.n)
    FROM jsonb_array_elements(p_rows) WITH ORDINALITY AS r(row, n)
    LEFT JOIN declared d ON d.key = r.row ->> 'key'
$$;
SELECT rara_grant('rara_spec_input_rows');  -- only through rara_definition_register

CREATE OR REPLACE FUNCTION rara_definition_retire(
    p_name text, p_namespace text DEFAULT 'default')
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    retired text;
BEGIN
    PERFORM rara_namespace_check(p_namespace);
    -- No new run starts from a retired name without an explicit version; its versions stay.
    -- NULL: no such name in p_namespace (a name elsewhere is another definition).
    UPDATE rara_definitions SET retired_at = coalesce(retired_at, now())
    WHERE namespace = p_namespace AND name = p_name
    RETURNING name INTO retired;
    RETURN retired;
END $$;
SELECT rara_grant('rara_definition_retire', 'rara_client', 'rara_operator');

-- BEFORE UPDATE OR DELETE (each row) and BEFORE TRUNCATE on rara_definition_versions: a
-- version, once registered, never changes (runs name it; its digest names its spec).
CREATE OR REPLACE FUNCTION rara_refuse_version_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'definition versions are immutable (% refused on %@%)',
        TG_OP, OLD.name, OLD.version
        USING ERRCODE = 'integrity_constraint_violation';
END $$;
SELECT rara_grant('rara_refuse_version_change');  -- a trigger

-- The one digest rule: over jsonb's own text form, which is canonical (keys sorted, one
-- spelling of whitespace), so equal specs have one digest whoever sends them.
CREATE OR REPLACE FUNCTION rara_spec_digest(p_spec jsonb) RETURNS text
LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT 'sha256:' || encode(sha256(convert_to(p_spec::text, 'UTF8')), 'hex')
$$;
SELECT rara_grant('rara_spec_digest');  -- only through rara_definition_register

-- An integer field of a spec within bounds, or its default when absent.
CREATE OR REPLACE FUNCTION rara_spec_int(p_value jsonb, p_default integer, p_low integer,
                                         p_high integer, p_what text) RETURNS integer
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
SELECT rara_grant('rara_spec_int');  -- only through rara_spec_run_steps

-- The step rows of every run of a spec, as rara_run_start inserts them: one object per step,
-- in spec order, `dependants` the inverse of `dependsOn`. Checks what the rows rely on, with
-- the rules of rara.definitions.model (which tells a person the same earlier, with more words):
-- a spec that would make a run wait forever — an unknown dependency, a cycle, no steps — or
-- that a worker would misroute is refused, naming the step and the field. (Migration 0012 made
-- it as rara_spec_steps; 0021 renamed it, and rara_spec_steps below checks around it.)
CREATE OR REPLACE FUNCTION rara_spec_run_steps(p_spec jsonb) RETURNS jsonb
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
SELECT rara_grant('rara_spec_run_steps');  -- only through rara_spec_steps

-- The step rows of rara_spec_run_steps, with the wait and approval fields checked around them
-- (rara_spec_wait, waits.sql): such a step gets the database's own capability (a wait step names
-- none: rara.wait@1, rara.approval@1, which no worker may serve), and each row its `wait` rule.
CREATE OR REPLACE FUNCTION rara_spec_steps(p_spec jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    steps jsonb := p_spec -> 'steps';
    s jsonb;
    what text;
    own text;
    rules jsonb := '[]';
    rule jsonb;
    rows jsonb;
    signals jsonb := '{}';
BEGIN
    -- The step rows of 0012 (rara_spec_run_steps: keys, graph, retries, maps), with each wait
    -- or approval step checked here first and given its capability, and each row's rule.
    IF jsonb_typeof(steps) = 'array' THEN
        FOR i IN 0 .. jsonb_array_length(steps) - 1 LOOP
            s := steps -> i;
            IF jsonb_typeof(s) IS DISTINCT FROM 'object' THEN
                rules := rules || 'null'::jsonb;
                CONTINUE;
            END IF;
            what := format('spec.steps[%s] (step %L)', i, s ->> 'key');
            rule := rara_spec_wait(s, what);
            rules := rules || coalesce(rule, 'null');
            IF rule IS NOT NULL THEN
                own := CASE rule ->> 'kind' WHEN 'approval' THEN 'rara.approval@1'
                                            ELSE 'rara.wait@1' END;
                IF s ? 'capability' AND s -> 'capability' <> to_jsonb(own) THEN
                    RAISE EXCEPTION '%.capability: a % step runs no capability (remove it)',
                        what, CASE WHEN s ? 'wait' THEN 'wait' ELSE 'approval' END
                        USING ERRCODE = 'invalid_parameter_value';
                END IF;
                steps := jsonb_set(steps, ARRAY[i::text], s || jsonb_build_object('capability', own));
                IF rule ? 'signal' THEN
                    IF signals ? (rule ->> 'signal') THEN
                        RAISE EXCEPTION '%.wait.signal: step % waits for signal % already',
                            what, signals ->> (rule ->> 'signal'), rule ->> 'signal'
                            USING ERRCODE = 'invalid_parameter_value';
                    END IF;
                    signals := signals || jsonb_build_object(rule ->> 'signal', s ->> 'key');
                END IF;
            END IF;
        END LOOP;
    END IF;
    rows := rara_spec_run_steps(jsonb_set(p_spec, '{steps}', coalesce(steps, 'null')));
    RETURN (SELECT jsonb_agg(r.row || jsonb_build_object('wait', rules -> (r.n - 1)::integer)
                             ORDER BY r.n)
            FROM jsonb_array_elements(rows) WITH ORDINALITY AS r(row, n));
END $$;
SELECT rara_grant('rara_spec_steps');  -- only through rara_definition_register
