-- Definitions: registering a version and retiring a name, by the roles that register them
-- (rara_client: `rara definitions apply`, applications; rara_operator: WorkflowDefinition
-- resources). Versions are immutable (a trigger refuses changes) and no role writes the
-- tables directly (migration 0007). Called through db/queries/definitions.sql
-- (rara.pg.definitions). Repeatable (rara.pg.migrate): edit in place.

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
    IF steps > (rara_limits() ->> 'spec_steps')::integer THEN
        PERFORM rara_limit_refuse('spec.steps', steps, 'steps', 'spec_steps');
    END IF;
    spec_bytes := octet_length(p_spec::text);
    IF spec_bytes > (rara_limits() ->> 'spec_bytes')::integer THEN
        PERFORM rara_limit_refuse('the spec', spec_bytes, 'bytes', 'spec_bytes');
    END IF;
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
