-- Releases (migration 0022, docs/releases.md): promoted and rolled back by the role people use
-- (rara_client: `rara releases`, applications); read by every role under the namespaces' read
-- policies (db/queries/releases.sql). Not the operator's: no resource of it promotes.
-- Called through db/queries/releases.sql (rara.pg.releases). Repeatable (rara.pg.migrate):
-- edit in place.

CREATE OR REPLACE FUNCTION rara_release_lock(p_namespace text, p_name text)
RETURNS void
LANGUAGE sql AS $$
    -- One name's promotes and rollbacks, one at a time (released at commit): each promote
    -- numbers after the last committed one, so numbers go 1, 2, 3… without gaps or twins
    -- however many promote at once, and a rollback reads the pointer no one else is moving.
    SELECT pg_advisory_xact_lock(hashtext('rara_release:' || p_namespace || '/' || p_name))
$$;
SELECT rara_grant('rara_release_lock');  -- only through the functions below

CREATE OR REPLACE FUNCTION rara_release_move(
    p_namespace text, p_name text, p_action text, p_to integer, p_reason text)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    was integer;
BEGIN
    -- Point p_name at release p_to and record the move; returns the number it pointed at
    -- (NULL: none). The caller holds the name's lock.
    SELECT c.number INTO was FROM rara_release_current c
    WHERE c.namespace = p_namespace AND c.name = p_name;
    INSERT INTO rara_release_current AS c (namespace, name, number)
    VALUES (p_namespace, p_name, p_to)
    ON CONFLICT (namespace, name) DO UPDATE SET number = p_to, updated_at = now();
    -- rara_caller(): the role acted as (a user's, under the UI's --user-roles), not only the
    -- login (session_user, the columns' default).
    INSERT INTO rara_release_moves (namespace, name, action, from_number, to_number, reason,
                                    moved_by)
    VALUES (p_namespace, p_name, p_action, was, p_to, p_reason, rara_caller());
    RETURN was;
END $$;
SELECT rara_grant('rara_release_move');  -- only through the functions below

CREATE OR REPLACE FUNCTION rara_release_promote(
    p_name text, p_run_id bigint, p_artifacts text[] DEFAULT NULL,
    p_results text[] DEFAULT NULL, p_note text DEFAULT NULL,
    p_namespace text DEFAULT 'default')
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    run record;
    missing text;
    release_id bigint;
    next_number integer;
    bound text;
BEGIN
    -- Release p_run_id (a succeeded run of p_namespace) as the next number of p_name and make
    -- it current; returns the number. p_artifacts: `step/name` selectors of the run's
    -- artifacts (the manifests of its steps' succeeded attempts); p_results: step keys whose
    -- results it carries. NULL (not an empty array): every artifact, every succeeded step's
    -- result. Anything the run does not have is refused, named, and nothing is written.
    -- A name is bound to one definition, by its first promote: later promotes take only runs
    -- of that definition. Once any version of the definition has an approval gate, only a run
    -- whose every gate was approved is released (a version without the gate is no way round).
    PERFORM rara_namespace_check(p_namespace);
    IF p_name IS NULL OR p_name !~ '^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$' THEN
        RAISE EXCEPTION 'release name % is not a name: lower-case letters, digits, ''.'' and '
                        '''-'', starting and ending with a letter or digit', quote_nullable(p_name)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF char_length(p_note) > 4000 THEN
        RAISE EXCEPTION 'a release note takes at most 4000 characters, not %',
            char_length(p_note) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- A run of another namespace is no run here, as for a cancel (rara_namespace_check).
    SELECT r.id, r.status, r.definition_version_id, dv.name AS definition, dv.version
    INTO run FROM rara_runs r
    JOIN rara_definition_versions dv ON dv.id = r.definition_version_id
    WHERE r.id = p_run_id AND r.namespace = p_namespace;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no run % in namespace %', p_run_id, p_namespace
            USING ERRCODE = 'no_data_found';
    END IF;
    IF run.status <> 'succeeded' THEN
        RAISE EXCEPTION 'run % is %: only a succeeded run can be released', p_run_id, run.status
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT string_agg(quote_literal(w.sel), ', ' ORDER BY w.sel) INTO missing
    FROM unnest(p_artifacts) AS w(sel)
    WHERE NOT EXISTS (
        SELECT FROM rara_steps s
        JOIN rara_step_artifacts a ON a.step_id = s.id AND a.attempt = s.attempt
        WHERE s.run_id = p_run_id AND s.status = 'succeeded'
          AND s.key || '/' || a.name = w.sel);
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'run % has no artifact %', p_run_id, missing
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'an artifact is STEP/NAME: rara runs show RUN --artifacts lists them';
    END IF;
    SELECT string_agg(quote_literal(w.key), ', ' ORDER BY w.key) INTO missing
    FROM unnest(p_results) AS w(key)
    WHERE NOT EXISTS (SELECT FROM rara_steps s
                      WHERE s.run_id = p_run_id AND s.status = 'succeeded' AND s.key = w.key);
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'run % has no succeeded step %', p_run_id, missing
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- Under the name's lock: two first promotes of one name bind it once.
    PERFORM rara_release_lock(p_namespace, p_name);
    SELECT dv.name INTO bound FROM rara_releases v
    JOIN rara_definition_versions dv ON dv.id = v.definition_version_id
    WHERE v.namespace = p_namespace AND v.name = p_name AND v.number = 1;
    IF bound IS NOT NULL AND bound <> run.definition THEN
        RAISE EXCEPTION 'release % is of definition %: run % is of definition %', p_name, bound,
            p_run_id, run.definition
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'a release name is bound to the definition of its first release: '
                         'promote this run under another name';
    END IF;
    IF EXISTS (SELECT FROM rara_definition_versions dv
               WHERE dv.namespace = p_namespace AND dv.name = run.definition
                 AND jsonb_path_exists(dv.steps, '$[*] ? (@.wait.kind == "approval")')) THEN
        SELECT string_agg(format('%s (%s)', s.key, coalesce(a.decision, 'undecided')), ', '
                          ORDER BY s.key) INTO missing
        FROM rara_steps s LEFT JOIN rara_approvals a ON a.step_id = s.id
        WHERE s.run_id = p_run_id AND s.wait ->> 'kind' = 'approval'
          AND a.decision IS DISTINCT FROM 'approved';
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION 'run % was not approved at gate %: only a run whose approval gate '
                            'was approved can be released', p_run_id, missing
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF NOT EXISTS (SELECT FROM rara_steps s
                       WHERE s.run_id = p_run_id AND s.wait ->> 'kind' = 'approval') THEN
            RAISE EXCEPTION 'definition % has an approval gate and run % (version %) has none: '
                            'only a run whose approval gate was approved can be released',
                run.definition, p_run_id, run.version
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;
    SELECT coalesce(max(v.number), 0) + 1 INTO next_number FROM rara_releases v
    WHERE v.namespace = p_namespace AND v.name = p_name;
    INSERT INTO rara_releases (namespace, name, number, run_id, definition_version_id, results,
                               note, promoted_by)
    SELECT p_namespace, p_name, next_number, p_run_id, run.definition_version_id,
           coalesce(jsonb_object_agg(s.key, coalesce(s.result, 'null'::jsonb)), '{}'),
           p_note, rara_caller()
    FROM rara_steps s
    WHERE s.run_id = p_run_id AND s.status = 'succeeded'
      AND (p_results IS NULL OR s.key = ANY (p_results))
    RETURNING id INTO release_id;
    INSERT INTO rara_release_artifacts (release_id, step_key, name, digest, size, media_type)
    SELECT release_id, s.key, a.name, a.digest, a.size, a.media_type
    FROM rara_steps s
    JOIN rara_step_artifacts a ON a.step_id = s.id AND a.attempt = s.attempt
    WHERE s.run_id = p_run_id AND s.status = 'succeeded'
      AND (p_artifacts IS NULL OR s.key || '/' || a.name = ANY (p_artifacts));
    PERFORM rara_release_move(p_namespace, p_name, 'promote', next_number, NULL);
    RETURN next_number;
END $$;
SELECT rara_grant('rara_release_promote', 'rara_client');

CREATE OR REPLACE FUNCTION rara_release_rollback(
    p_name text, p_to integer DEFAULT NULL, p_reason text DEFAULT NULL,
    p_namespace text DEFAULT 'default')
RETURNS TABLE (from_number integer, to_number integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    now_current integer;
    target integer := p_to;
BEGIN
    -- Point p_name back at release p_to, or (NULL) at the release that was current when the
    -- current one was promoted: rolling back again goes further back, never to and fro.
    PERFORM rara_namespace_check(p_namespace);
    IF char_length(p_reason) > 4000 THEN
        RAISE EXCEPTION 'a rollback reason takes at most 4000 characters, not %',
            char_length(p_reason) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM rara_release_lock(p_namespace, p_name);
    SELECT c.number INTO now_current FROM rara_release_current c
    WHERE c.namespace = p_namespace AND c.name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no release % in namespace %', p_name, p_namespace
            USING ERRCODE = 'no_data_found';
    END IF;
    IF target IS NULL THEN
        SELECT m.from_number INTO target FROM rara_release_moves m
        WHERE m.namespace = p_namespace AND m.name = p_name AND m.action = 'promote'
          AND m.to_number = now_current;
        IF target IS NULL THEN
            RAISE EXCEPTION '%@% was the first release of %: there is none before it to roll '
                            'back to', p_name, now_current, p_name
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    ELSIF NOT EXISTS (SELECT FROM rara_releases v
                      WHERE v.namespace = p_namespace AND v.name = p_name
                        AND v.number = target) THEN
        RAISE EXCEPTION 'no release %@% in namespace % (the newest is %@%)', p_name, target,
            p_namespace, p_name,
            (SELECT max(v.number) FROM rara_releases v
             WHERE v.namespace = p_namespace AND v.name = p_name)
            USING ERRCODE = 'no_data_found';
    ELSIF target = now_current THEN
        RAISE EXCEPTION '%@% is current already', p_name, target
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    from_number := rara_release_move(p_namespace, p_name, 'rollback', target, p_reason);
    to_number := target;
    RETURN NEXT;
END $$;
SELECT rara_grant('rara_release_rollback', 'rara_client');

-- BEFORE UPDATE OR DELETE and BEFORE TRUNCATE on the append-only tables of releases (migration
-- 0022): a release, its artifacts and its moves are never changed, only added to.
CREATE OR REPLACE FUNCTION rara_refuse_release_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only (% refused)', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'integrity_constraint_violation',
              HINT = 'a release is never changed: promote a new one, or roll back to one';
END $$;
SELECT rara_grant('rara_refuse_release_change');  -- a trigger
