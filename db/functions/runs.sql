-- Runs: their start (with the run's steps), their cancel and resume; the parent aggregation by
-- counters that follows every step end is steps.sql's (rara_run_count). Start and cancel are
-- what rara_client (people, tools, the UI) and rara_operator may do to runs, and all they may
-- do: no role writes rara_runs or rara_steps directly (migration 0007). Called through
-- db/queries/runs.sql (rara.pg.runs).
-- Repeatable (rara.pg.migrate): edit in place.

CREATE OR REPLACE FUNCTION rara_spec_step_rows(p_steps jsonb)
RETURNS TABLE (key text, depends_on text[], dependants text[], capability text,
               executor text, priority integer, payload jsonb, max_attempts integer,
               retry_initial_ms integer, retry_max_ms integer,
               retry_coefficient double precision, timeout_ms integer,
               heartbeat_timeout_ms integer, map_over text[], map_max_parallel integer,
               wait jsonb)
LANGUAGE sql STABLE AS $$
    -- A version's step rows (rara_definition_versions.steps, built by rara_spec_steps at
    -- registration) as columns: what rara_run_start and rara_run_resume insert. One SELECT,
    -- no SECURITY DEFINER, no SET and not STRICT, so PostgreSQL inlines it into their
    -- statements (the start is the hot path: no function call per start). STABLE as
    -- jsonb_to_recordset is; a volatility it does not have would stop the inlining. It reads
    -- no table, and no role may call it (rara_grant): only the owner's functions do.
    SELECT * FROM jsonb_to_recordset(p_steps) AS s(
        key text, depends_on text[], dependants text[], capability text, executor text,
        priority integer, payload jsonb, max_attempts integer, retry_initial_ms integer,
        retry_max_ms integer, retry_coefficient double precision, timeout_ms integer,
        heartbeat_timeout_ms integer, map_over text[], map_max_parallel integer, wait jsonb)
$$;
SELECT rara_grant('rara_spec_step_rows');  -- only through rara_run_start, rara_run_resume

CREATE OR REPLACE FUNCTION rara_spec_concurrency(p_spec jsonb, p_namespace text,
                                                 p_definition text)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    rules jsonb := '{}';
    s jsonb;
    c jsonb;
    what text;
BEGIN
    -- The `concurrency:` of each step that has one, by step key (migration 0020): the prefix
    -- of its keys (namespace/group, the group being the step's own unless named), the path of
    -- the key's value in the run input, and the max. Checked here, with the rules of
    -- rara.definitions.model (ConcurrencySpec), naming the step and the field: registration
    -- calls it too, so a spec no run could start is refused when applied.
    FOR s IN SELECT st FROM jsonb_array_elements(p_spec -> 'steps') AS st
             WHERE st -> 'concurrency' IS NOT NULL AND st -> 'concurrency' <> 'null'
    LOOP
        c := s -> 'concurrency';
        what := format('spec.steps (step %L).concurrency', s ->> 'key');
        IF jsonb_typeof(c) <> 'object' THEN
            RAISE EXCEPTION '%: must be a mapping with key and max', what
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF jsonb_typeof(c -> 'key') IS DISTINCT FROM 'string'
           OR NOT (c ->> 'key') ~ '^input(\.[A-Za-z0-9_-]+)+$' THEN
            RAISE EXCEPTION '%.key: must be a path into the run input, like input.customer',
                what USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF jsonb_typeof(c -> 'max') IS DISTINCT FROM 'number'
           OR (c ->> 'max')::numeric <> trunc((c ->> 'max')::numeric)
           OR (c ->> 'max')::numeric NOT BETWEEN 1 AND 10000 THEN
            RAISE EXCEPTION '%.max: must be a whole number from 1 to 10000', what
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF c -> 'group' IS NOT NULL AND c -> 'group' <> 'null'
           AND (jsonb_typeof(c -> 'group') <> 'string'
                OR NOT (c ->> 'group') ~ '^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$') THEN
            RAISE EXCEPTION '%.group: must be a name (a-z, 0-9, ., _ and -)', what
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        rules := rules || jsonb_build_object(s ->> 'key', jsonb_build_object(
            'prefix', p_namespace || '/'
                      || coalesce(nullif(c ->> 'group', ''), p_definition || '.' || (s ->> 'key')),
            'path', to_jsonb(string_to_array(substr(c ->> 'key', 7), '.')),
            'max', (c ->> 'max')::integer));
    END LOOP;
    RETURN rules;
END $$;
SELECT rara_grant('rara_spec_concurrency');  -- only through the registration and the starts

CREATE OR REPLACE FUNCTION rara_concurrency_key(p_rule jsonb, p_input jsonb, p_step text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    value jsonb := p_input #> ARRAY(SELECT jsonb_array_elements_text(p_rule -> 'path'));
BEGIN
    -- A step's concurrency key in a run of p_input (its rule: rara_spec_concurrency): the
    -- prefix and the value, which must be there and be a string, a number or a boolean.
    IF p_rule IS NULL THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(value) IS NULL OR jsonb_typeof(value) NOT IN ('string', 'number', 'boolean')
    THEN
        RAISE EXCEPTION 'step %: concurrency.key input.% is %, not a string, number or boolean',
            p_step, array_to_string(ARRAY(SELECT jsonb_array_elements_text(p_rule -> 'path')),
                                    '.'),
            coalesce(jsonb_typeof(value), 'missing from the run input')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN (p_rule ->> 'prefix') || '=' || (value #>> '{}');
END $$;
SELECT rara_grant('rara_concurrency_key');  -- only through the starts

CREATE OR REPLACE FUNCTION rara_wait_resolve(p_rule jsonb, p_input jsonb, p_step text)
RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
    value jsonb;
    at timestamptz;
BEGIN
    -- A wait step's rule in a run of p_input (migration 0021): `until: input.<path>` becomes
    -- the time it names, which must be there and be an ISO 8601 time with its offset; every
    -- other rule is kept as it is. Refused, naming the step and the path, with nothing written.
    IF p_rule IS NULL OR NOT p_rule ? 'until' THEN
        RETURN p_rule;
    END IF;
    value := p_input #> ARRAY(SELECT jsonb_array_elements_text(p_rule -> 'until'));
    BEGIN
        IF jsonb_typeof(value) IS DISTINCT FROM 'string'
           OR NOT (value #>> '{}') ~ '^\d{4}-\d\d-\d\d[T ][0-9:.]+(Z|[+-]\d\d(:?\d\d)?)$' THEN
            RAISE invalid_datetime_format;
        END IF;
        at := (value #>> '{}')::timestamptz;
    EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow THEN
        RAISE EXCEPTION 'step %: wait.until input.% is %, not a time with its offset '
            '(2026-12-01T02:00:00Z)', p_step,
            array_to_string(ARRAY(SELECT jsonb_array_elements_text(p_rule -> 'until')), '.'),
            coalesce(value::text, 'missing from the run input')
            USING ERRCODE = 'invalid_parameter_value';
    END;
    RETURN jsonb_build_object('kind', 'timer', 'at', at);
END $$;
SELECT rara_grant('rara_wait_resolve');  -- only through the starts

CREATE OR REPLACE FUNCTION rara_run_start(
    p_name text, p_version integer, p_digest text, p_input jsonb,
    p_idempotency_key text, p_check_capabilities boolean, p_alive_seconds double precision,
    p_namespace text DEFAULT 'default')
RETURNS TABLE (id bigint, digest text, retired_at timestamptz, spec jsonb, missing text[],
               run_id bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    answer record;
    deltas jsonb := '[]';
    map bigint;
BEGIN
    -- A run and its steps in one round trip (rara.runs.start_run). Resolves the version as
    -- definition_version_get does (p_version of p_name in p_namespace, or the latest when
    -- null); the run is in that namespace, and its idempotency key unique there. Inserts the step
    -- rows that the database built from that version's spec when it was registered
    -- (rara_spec_steps, migration 0012: a caller names a version, never its steps). Inserts
    -- only when the version's digest is p_digest — the spec whose input schemas the caller
    -- checked p_input against — and nothing refuses the start: a retired definition without
    -- an explicit p_version, or with p_check_capabilities a step capability that no live
    -- worker serves (heartbeat within p_alive_seconds, as worker_capabilities). The spec
    -- comes back only when the digest differs, so a stale or empty cache costs one more call
    -- and no extra fetch. No row: no such definition. run_id is null when nothing
    -- was inserted; ON CONFLICT makes racing clients with one idempotency key create one run:
    -- the loser waits for the winner's commit, inserts nothing, and reads the winner's row
    -- with run_get_by_key. Map steps without upstream expand at once (rara_map_expand).
    -- The input's size first (rara_limits), before any other work: every leased step of the
    -- run carries (some of) it, and every page that shows the run.
    PERFORM rara_limit_check('run input', octet_length(p_input::text), 'bytes',
                             'run_input_bytes');
    PERFORM rara_namespace_check(p_namespace);
    WITH resolved AS (
        SELECT v.id, v.digest, v.spec, v.steps, d.retired_at,
               coalesce(v.digest = p_digest, false) AS matched,
               -- the steps' `cache:` settings, added to their payloads (rara_spec_caches)
               rara_spec_caches(v.spec, p_namespace) AS caches,
               -- and their `concurrency:` rules (rara_spec_concurrency)
               rara_spec_concurrency(v.spec, p_namespace, p_name) AS concurrency
        FROM rara_definition_versions v JOIN rara_definitions d USING (namespace, name)
        WHERE v.namespace = p_namespace AND v.name = p_name
          AND (p_version IS NULL OR v.version = p_version)
        ORDER BY v.version DESC LIMIT 1
    ), step_rows AS (
        SELECT s.* FROM resolved, rara_spec_step_rows(resolved.steps) AS s
        WHERE resolved.matched
    ), missing AS (
        -- One row always (an aggregate): null when nothing is missing or nothing was checked.
        SELECT array_agg(DISTINCT s.capability ORDER BY s.capability) AS capabilities
        FROM step_rows s
        WHERE p_check_capabilities AND s.wait IS NULL AND NOT EXISTS (
            SELECT FROM rara_workers w
            WHERE s.capability = ANY (w.capabilities) AND w.stopped_at IS NULL
              AND w.heartbeat_at > now() - make_interval(secs => p_alive_seconds))
    ), run AS (
        INSERT INTO rara_runs (namespace, definition_version_id, input, idempotency_key,
                               steps_total, started_by)
        SELECT p_namespace, resolved.id, p_input, p_idempotency_key,
               jsonb_array_length(resolved.steps),
               rara_caller_starter()  -- who starts it, for an approval's four-eyes
        FROM resolved, missing
        WHERE resolved.matched AND missing.capabilities IS NULL
          AND (resolved.retired_at IS NULL OR p_version IS NOT NULL)
        ON CONFLICT (namespace, idempotency_key) DO NOTHING
        RETURNING rara_runs.id
    ), steps AS (
        INSERT INTO rara_steps (run_id, namespace, key, depends_on, dependants, pending_deps,
                                capability, executor, priority, payload, max_attempts,
                                retry_initial_ms, retry_max_ms, retry_coefficient, timeout_ms,
                                heartbeat_timeout_ms, status, map_over, map_max_parallel,
                                concurrency_key, concurrency_max, wait)
        SELECT run.id, p_namespace, s.key, s.depends_on, s.dependants, cardinality(s.depends_on),
               s.capability, s.executor, s.priority,
               s.payload || coalesce(resolved.caches -> s.key, '{}'), s.max_attempts,
               s.retry_initial_ms, s.retry_max_ms, s.retry_coefficient, s.timeout_ms,
               s.heartbeat_timeout_ms,
               CASE WHEN cardinality(s.depends_on) = 0 AND s.map_over IS NULL AND s.wait IS NULL
                    THEN 'ready'
                    ELSE 'blocked' END::rara_step_status,
               s.map_over, s.map_max_parallel,
               rara_concurrency_key(resolved.concurrency -> s.key, p_input, s.key),
               (resolved.concurrency -> s.key ->> 'max')::integer,
               -- (a call only for `until:`: the start of steps that run calls nothing)
               CASE WHEN s.wait ? 'until' THEN rara_wait_resolve(s.wait, p_input, s.key)
                    ELSE s.wait END
        FROM run, resolved, step_rows s
        RETURNING rara_steps.id, rara_steps.map_over IS NOT NULL
                  AND cardinality(rara_steps.depends_on) = 0 AS expands
    )
    SELECT resolved.id, resolved.digest, resolved.retired_at,
           CASE WHEN resolved.matched THEN NULL ELSE resolved.spec END AS spec,
           missing.capabilities, (SELECT run.id FROM run) AS run_id,
           (SELECT coalesce(array_agg(steps.id ORDER BY steps.id)
                            FILTER (WHERE steps.expands), '{}') FROM steps) AS maps
    INTO answer
    FROM resolved, missing;
    IF NOT FOUND THEN
        RETURN;  -- no such definition (version)
    END IF;
    FOREACH map IN ARRAY answer.maps LOOP
        deltas := deltas || rara_map_expand(map);
    END LOOP;
    IF deltas <> '[]' THEN
        PERFORM rara_run_count(deltas);
    END IF;
    id := answer.id;
    digest := answer.digest;
    retired_at := answer.retired_at;
    spec := answer.spec;
    missing := answer.capabilities;
    run_id := answer.run_id;
    RETURN NEXT;
END $$;
SELECT rara_grant('rara_run_start', 'rara_client', 'rara_operator');

CREATE OR REPLACE FUNCTION rara_run_cancel(p_run_id bigint)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    cancelled integer;
    flagged bigint[];
    reason text;
BEGIN
    -- Cancel a run, and nothing else: waiting steps are cancelled now, running ones flagged
    -- (their worker learns it through NOTIFY now and its next heartbeat otherwise, and ends
    -- the attempt itself, fenced). NULL: no such run (or one of a namespace the caller may not act in: what it
    -- cannot read it cannot name); false: the run had already ended.
    PERFORM 1 FROM rara_runs WHERE id = p_run_id AND rara_namespace_allowed(namespace);
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- The run's step rows first, in id order, then the run row: the order a step end takes
    -- them (its step, then the run in rara_run_count), so the two cannot wait on each other
    -- in a cycle.
    PERFORM 1 FROM rara_steps WHERE run_id = p_run_id ORDER BY id FOR UPDATE;
    -- Who cancelled and why, when the caller says why (rara.cancel_reason, set for its
    -- transaction: the dashboard requires one): the run's error, read by `rara runs show` and
    -- the run's page. Who: the caller's role, or the person a vouching login names.
    reason := left(nullif(btrim(current_setting('rara.cancel_reason', true)), ''), 2000);
    UPDATE rara_runs SET cancel_requested = true,
           error = CASE WHEN reason IS NULL THEN error ELSE jsonb_build_object(
               'code', 'CANCELLED', 'message', 'cancelled by ' || rara_caller_starter() || ': '
               || reason, 'cancelled_by', rara_caller_starter(), 'reason', reason) END
    WHERE id = p_run_id AND status IN ('pending', 'running');
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- A map step cancelled mid-way also cancels the children it had not inserted yet (past
    -- map_next: elements of its list, rara_map_lists, dropped here): they count in the run.
    WITH waiting AS (
        UPDATE rara_steps SET status = 'cancelled', finished_at = now(),
               error = jsonb_build_object('code', 'CANCELLED', 'message', 'run cancelled')
        WHERE run_id = p_run_id AND status IN ('blocked', 'ready')
        RETURNING id, coalesce(map_total - map_next, 0) AS unborn
    ), dropped AS (
        DELETE FROM rara_map_lists l
        WHERE l.map_id = ANY (ARRAY(SELECT w.id FROM waiting w WHERE w.unborn > 0))
    )
    SELECT count(*) + coalesce(sum(w.unborn), 0) INTO cancelled FROM waiting w;
    DELETE FROM rara_waits WHERE run_id = p_run_id;  -- its waits, ended with their steps
    WITH running AS (
        UPDATE rara_steps SET cancel_requested = true
        WHERE run_id = p_run_id AND status = 'running'
        RETURNING id
    )
    SELECT coalesce(array_agg(id), '{}') INTO flagged FROM running;
    IF cardinality(flagged) > 0 THEN
        -- A wake-up without a word: any login may LISTEN (docs/least-privilege.md). A worker
        -- holding attempts heartbeats now; the fenced answer says which were asked to stop.
        PERFORM pg_notify('rara_cancel', '');
    END IF;
    -- Counted in the run (ending it when no step runs).
    PERFORM rara_run_count(jsonb_build_array(jsonb_build_object(
        'run_id', p_run_id, 'succeeded', 0, 'failed', 0, 'cancelled', cancelled)));
    RETURN true;
END $$;
SELECT rara_grant('rara_run_cancel', 'rara_client', 'rara_operator');

CREATE OR REPLACE FUNCTION rara_run_resume(p_run_id bigint, p_idempotency_key text,
                                           p_rerun_from text DEFAULT NULL)
RETURNS TABLE (run_id bigint, reused integer, created boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    old record;
    new_id bigint;
    total integer;
    done integer;
    map bigint;
    deltas jsonb := '[]';
BEGIN
    -- Resume from failure (`rara runs retry N --from-failure`; docs/step-cache.md,
    -- "Resume"): a new run of run p_run_id's version and input, in which every step that
    -- succeeded in it is inserted `succeeded` with its result and artifact manifest, and
    -- reused_from naming it ({via: resume, run, step, key, attempt}); the other steps are
    -- inserted as a start inserts them, ready once every dependency is reused. No attempt and
    -- no lease for a reused step: it never ran in this run (attempt 0, its manifest under
    -- attempt 0). A reused map step brings its children. A map step that did not succeed
    -- runs whole: its children that did are not kept (a `cache:` on it reuses them).
    -- Only a failed or cancelled run resumes. The new run is in the old one's namespace, and
    -- a repeated p_idempotency_key (unique there) finds the run it made (created false).
    -- Re-run from a step (p_rerun_from, `rara runs retry N --from-step KEY`): that step and
    -- every step downstream of it (its dependants, transitively) run again even where they
    -- succeeded, every other step that succeeded is reused; any finished run re-runs. The
    -- new run names the run it resumes (resumes) and the step (rerun_from).
    SELECT r.id, r.namespace, r.status, r.definition_version_id, r.input INTO old
    FROM rara_runs r WHERE r.id = p_run_id AND rara_namespace_allowed(r.namespace);
    IF NOT FOUND THEN  -- or not the caller's to resume: what it cannot read it cannot name
        RAISE EXCEPTION 'no run %', p_run_id USING ERRCODE = 'no_data_found';
    END IF;
    IF p_rerun_from IS NULL AND old.status NOT IN ('failed', 'cancelled') THEN
        RAISE EXCEPTION 'run % is %: only a failed or cancelled run resumes', p_run_id,
            old.status USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_rerun_from IS NOT NULL AND old.status NOT IN ('succeeded', 'failed', 'cancelled') THEN
        RAISE EXCEPTION 'run % is %: only a finished run re-runs from a step', p_run_id,
            old.status USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_rerun_from IS NOT NULL AND NOT EXISTS (
        SELECT FROM rara_definition_versions v, rara_spec_step_rows(v.steps) AS s
        WHERE v.id = old.definition_version_id AND s.key = p_rerun_from) THEN
        RAISE EXCEPTION 'run % has no step "%" to re-run from', p_run_id, p_rerun_from
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- (a run started before the input was limited in the database may hold more)
    PERFORM rara_limit_check(format('run %s''s input', p_run_id),
                             octet_length(old.input::text), 'bytes', 'run_input_bytes');
    INSERT INTO rara_runs (namespace, definition_version_id, input, idempotency_key,
                           started_by, resumes, rerun_from)  -- (who resumes it: as for a start)
    VALUES (old.namespace, old.definition_version_id, old.input, p_idempotency_key,
            rara_caller_starter(), p_run_id, p_rerun_from)
    ON CONFLICT (namespace, idempotency_key) DO NOTHING
    RETURNING rara_runs.id INTO new_id;
    IF new_id IS NULL THEN
        run_id := (SELECT r.id FROM rara_runs r
                   WHERE r.namespace = old.namespace AND r.idempotency_key = p_idempotency_key);
        -- Qualified: under use_column a bare run_id is s.run_id, and counted every run's.
        reused := (SELECT count(*) FROM rara_steps s
                   WHERE s.run_id = rara_run_resume.run_id AND s.reused_from IS NOT NULL);
        created := false;
        RETURN NEXT;
        RETURN;
    END IF;
    WITH RECURSIVE version AS (
        SELECT v.spec, v.steps, rara_spec_caches(v.spec, old.namespace) AS caches,
               rara_spec_concurrency(v.spec, old.namespace, v.name) AS concurrency
        FROM rara_definition_versions v WHERE v.id = old.definition_version_id
    ), step_rows AS (
        SELECT s.* FROM version, rara_spec_step_rows(version.steps) AS s
    ), again (key) AS (  -- the step re-run from and its dependants (none: a plain resume)
        SELECT p_rerun_from WHERE p_rerun_from IS NOT NULL
        UNION
        SELECT d.key FROM again a JOIN step_rows s ON s.key = a.key,
                          unnest(s.dependants) AS d(key)
    ), kept AS MATERIALIZED (
        SELECT o.* FROM rara_steps o
        WHERE o.run_id = p_run_id AND o.map_parent IS NULL AND o.status = 'succeeded'
          AND o.key NOT IN (SELECT a.key FROM again a)
    ), planned AS (
        SELECT s.*, k.id AS old_id, k.attempt AS old_attempt, k.result AS old_result,
               k.cache AS old_cache, k.map_input, k.map_total, k.map_succeeded, k.map_failed,
               (SELECT count(*) FROM unnest(s.depends_on) AS d(key)
                WHERE d.key NOT IN (SELECT k2.key FROM kept k2))::integer AS pending,
               version.caches, version.concurrency -> s.key AS concurrency
        FROM version, step_rows s LEFT JOIN kept k ON k.key = s.key
    ), inserted AS (
        INSERT INTO rara_steps (run_id, namespace, key, depends_on, dependants, pending_deps,
                                capability, executor, priority, payload, max_attempts,
                                retry_initial_ms, retry_max_ms, retry_coefficient, timeout_ms,
                                heartbeat_timeout_ms, status, map_over, map_max_parallel,
                                map_input, map_total, map_next, map_succeeded, map_failed,
                                result, finished_at, cache, reused_from, concurrency_key,
                                concurrency_max, wait)
        SELECT new_id, old.namespace, p.key, p.depends_on, p.dependants, p.pending,
               p.capability, p.executor, p.priority, p.payload || coalesce(p.caches -> p.key, '{}'), p.max_attempts,
               p.retry_initial_ms, p.retry_max_ms, p.retry_coefficient, p.timeout_ms,
               p.heartbeat_timeout_ms,
               CASE WHEN p.old_id IS NOT NULL THEN 'succeeded'
                    WHEN p.pending = 0 AND p.map_over IS NULL AND p.wait IS NULL THEN 'ready'
                    ELSE 'blocked' END::rara_step_status,
               p.map_over, p.map_max_parallel,
               p.map_input, p.map_total, p.map_total, coalesce(p.map_succeeded, 0),
               coalesce(p.map_failed, 0),
               p.old_result, CASE WHEN p.old_id IS NOT NULL THEN now() END, p.old_cache,
               CASE WHEN p.old_id IS NOT NULL THEN jsonb_build_object(
                   'via', 'resume', 'run', p_run_id, 'step', p.old_id, 'key', p.key,
                   'attempt', p.old_attempt) END,
               rara_concurrency_key(p.concurrency, old.input, p.key),
               (p.concurrency ->> 'max')::integer,
               CASE WHEN p.wait ? 'until' THEN rara_wait_resolve(p.wait, old.input, p.key)
                    ELSE p.wait END
        FROM planned p
        RETURNING rara_steps.id, rara_steps.key, rara_steps.status
    )
    SELECT count(*), count(*) FILTER (WHERE i.status = 'succeeded') INTO total, done
    FROM inserted i;
    -- The children of a reused map step, as they succeeded (their own reused_from).
    WITH children AS (
        INSERT INTO rara_steps (run_id, namespace, key, depends_on, dependants, pending_deps,
                                capability, executor, priority, payload, max_attempts,
                                retry_initial_ms, retry_max_ms, retry_coefficient, timeout_ms,
                                heartbeat_timeout_ms, status, map_parent, map_index, result,
                                finished_at, cache, reused_from)
        SELECT new_id, old.namespace, c.key, c.depends_on, c.dependants, 0, c.capability,
               c.executor, c.priority, c.payload, c.max_attempts, c.retry_initial_ms, c.retry_max_ms,
               c.retry_coefficient, c.timeout_ms, c.heartbeat_timeout_ms, 'succeeded', n.id,
               c.map_index, c.result, now(), c.cache,
               jsonb_build_object('via', 'resume', 'run', p_run_id, 'step', c.id, 'key', c.key,
                                  'attempt', c.attempt)
        FROM rara_steps n
        JOIN rara_steps m ON m.run_id = p_run_id AND m.key = n.key AND m.map_parent IS NULL
        JOIN rara_steps c ON c.map_parent = m.id
        WHERE n.run_id = new_id AND n.map_over IS NOT NULL AND n.status = 'succeeded'
        RETURNING rara_steps.id
    )
    SELECT total + count(*), done + count(*) INTO total, done FROM children;
    -- Every reused step's manifest, under its new row (attempt 0: it ran in no attempt here).
    INSERT INTO rara_step_artifacts (step_id, attempt, name, digest, size, media_type)
    SELECT n.id, 0, a.name, a.digest, a.size, a.media_type
    FROM rara_steps n
    JOIN rara_steps o ON o.id = (n.reused_from ->> 'step')::bigint
    JOIN rara_step_artifacts a ON a.step_id = o.id AND a.attempt = o.attempt
    WHERE n.run_id = new_id AND n.reused_from IS NOT NULL;
    IF done = total THEN
        RAISE EXCEPTION 'run %: every step succeeded, nothing to resume', p_run_id
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE rara_runs r SET steps_total = total, steps_succeeded = done WHERE r.id = new_id;
    -- Map steps whose upstream is all reused expand now, as a start expands them.
    FOR map IN
        SELECT s.id FROM rara_steps s
        WHERE s.run_id = new_id AND s.map_over IS NOT NULL AND s.status = 'blocked'
          AND s.pending_deps = 0
        ORDER BY s.id
    LOOP
        deltas := deltas || rara_map_expand(map);
    END LOOP;
    IF deltas <> '[]' THEN
        PERFORM rara_run_count(deltas);
    END IF;
    run_id := new_id;
    reused := done;
    created := true;
    RETURN NEXT;
END $$;
SELECT rara_grant('rara_run_resume', 'rara_client', 'rara_operator');
