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
    spec_digest text := rara_spec_digest(p_spec);
    step_rows jsonb := rara_spec_steps(p_spec);  -- refuses a spec no run could follow
BEGIN
    PERFORM rara_namespace_check(p_namespace);
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
