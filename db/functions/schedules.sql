-- Schedules (migration 0014, docs/schedules.md): applied, paused and deleted by the roles that
-- manage workflows (rara_client: `rara schedules`; rara_operator: WorkflowSchedule resources),
-- and fired by the same roles (rara.schedules.firing: the operator, `rara schedules run`). The
-- tick arithmetic (cron, time zone, daylight saving) is Python's (rara.schedules.ticks); these
-- functions store what it decided and keep the one rule of exactly once: a tick is decided in
-- the transaction that holds its schedule's row and starts its run. Called through
-- db/queries/schedules.sql (rara.pg.schedules). Repeatable (rara.pg.migrate): edit in place.

CREATE OR REPLACE FUNCTION rara_schedule_changed(p_name text, p_changed boolean)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    -- The tail of every change to a schedule (apply, pause, resume, delete): p_changed, after
    -- waking the firing loops when it is true (they sleep to the earliest next tick, which
    -- the change may have moved). No role calls it: a NOTIFY alone changes nothing. No
    -- payload: any login may LISTEN, and another namespace's schedule names are not its to
    -- read; a loop woken reads the next due tick again (docs/least-privilege.md).
    IF p_changed THEN
        PERFORM pg_notify('rara_schedules', '');
    END IF;
    RETURN p_changed;
END $$;
SELECT rara_grant('rara_schedule_changed');  -- only through the functions below

CREATE OR REPLACE FUNCTION rara_schedule_cron_value(p_field integer, p_term text)
RETURNS integer
LANGUAGE sql IMMUTABLE AS $$
    -- One value of a cron field (cronsim's Field.int): a month's or a weekday's English name,
    -- or digits within the field's range; NULL: neither. Fields: 0 second, 1 minute, 2 hour,
    -- 3 day of month, 4 month, 5 day of week.
    SELECT CASE
        WHEN p_field = 4 AND array_position(months, p_term) IS NOT NULL
            THEN array_position(months, p_term)
        WHEN p_field = 5 AND array_position(days, p_term) IS NOT NULL
            THEN array_position(days, p_term) - 1
        WHEN p_term ~ '^[0-9]+$'
             AND p_term::numeric BETWEEN (ARRAY[0, 0, 0, 1, 1, 0])[p_field + 1]
                                     AND (ARRAY[59, 59, 23, 31, 12, 7])[p_field + 1]
            THEN p_term::integer
    END
    FROM (SELECT '{JAN,FEB,MAR,APR,MAY,JUN,JUL,AUG,SEP,OCT,NOV,DEC}'::text[] AS months,
                 '{SUN,MON,TUE,WED,THU,FRI,SAT}'::text[] AS days) AS names
$$;
SELECT rara_grant('rara_schedule_cron_value');  -- only through rara_schedule_cron_field

CREATE OR REPLACE FUNCTION rara_schedule_cron_field(p_field integer, p_term text)
RETURNS integer[]
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    -- The field's values as cronsim's Field.parse makes them, or NULL where it raises:
    -- cronsim is what fires (rara.schedules.ticks), so this accepts exactly what it accepts,
    -- term by term and in its order of checks. p_term is upper case ASCII. -1000 is the day's
    -- L, -1001 its LW, -2 a weekday's L or #n (whether those parse is all that matters).
    hi integer := (ARRAY[59, 59, 23, 31, 12, 7])[p_field + 1];
    result integer[] := '{}';
    part integer[];
    term text;
    rest text;
    first integer;
    last integer;
BEGIN
    IF p_term = '*' THEN
        RETURN ARRAY(SELECT generate_series((ARRAY[0, 0, 0, 1, 1, 0])[p_field + 1], hi));
    END IF;
    IF position(',' IN p_term) > 0 THEN
        FOREACH term IN ARRAY string_to_array(p_term, ',') LOOP
            part := rara_schedule_cron_field(p_field, term);
            IF part IS NULL THEN
                RETURN NULL;
            END IF;
            result := result || part;
        END LOOP;
        RETURN ARRAY(SELECT DISTINCT v FROM unnest(result) v ORDER BY v);
    END IF;
    IF p_field = 5 AND position('L' IN p_term) > 0 THEN
        term := left(p_term, -1);
        IF term !~ '^[0-9]+$' OR rara_schedule_cron_value(p_field, term) IS NULL THEN
            RETURN NULL;
        END IF;
        RETURN ARRAY[-2];
    END IF;
    IF p_field = 5 AND position('#' IN p_term) > 0 THEN
        term := split_part(p_term, '#', 1);
        rest := substr(p_term, position('#' IN p_term) + 1);
        IF rest !~ '^[0-9]+$' OR rest::numeric NOT BETWEEN 1 AND 5
           OR rara_schedule_cron_value(p_field, term) IS NULL THEN
            RETURN NULL;
        END IF;
        RETURN ARRAY[-2];
    END IF;
    IF position('/' IN p_term) > 0 THEN
        term := split_part(p_term, '/', 1);
        rest := substr(p_term, position('/' IN p_term) + 1);
        IF rest !~ '^[0-9]+$' OR rest::numeric = 0 THEN
            RETURN NULL;
        END IF;
        part := rara_schedule_cron_field(p_field, term);
        IF part IS NULL OR part IN (ARRAY[-1000], ARRAY[-1001]) THEN
            RETURN part;
        END IF;
        -- Every step-th value: from the one value to the field's end, or of the sorted
        -- values (a step wider than any field leaves the first alone).
        IF cardinality(part) = 1 THEN
            RETURN ARRAY(SELECT generate_series(part[1], hi,
                                                least(rest::numeric, 100)::integer));
        END IF;
        RETURN ARRAY(SELECT part[i] FROM generate_series(1, cardinality(part),
                                                         least(rest::numeric, 100)::integer) i);
    END IF;
    IF position('-' IN p_term) > 0 THEN
        first := rara_schedule_cron_value(p_field, split_part(p_term, '-', 1));
        last := rara_schedule_cron_value(p_field, substr(p_term, position('-' IN p_term) + 1));
        IF first IS NULL OR last IS NULL OR last < first THEN
            RETURN NULL;
        END IF;
        RETURN ARRAY(SELECT generate_series(first, last));
    END IF;
    IF p_field = 3 AND p_term = 'LW' THEN
        RETURN ARRAY[-1001];
    END IF;
    IF p_field = 3 AND p_term = 'L' THEN
        RETURN ARRAY[-1000];
    END IF;
    first := rara_schedule_cron_value(p_field, p_term);
    RETURN CASE WHEN first IS NULL THEN NULL ELSE ARRAY[first] END;
END $$;
SELECT rara_grant('rara_schedule_cron_field');  -- only through rara_schedule_cron_problem

CREATE OR REPLACE FUNCTION rara_schedule_cron_problem(p_cron text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    -- What cronsim says of p_cron (CronSimError's words: 'Wrong number of fields', 'Bad
    -- minute', ...); NULL: it parses. Its steps: upper case, split on whitespace, a seconds
    -- field of 0 put first when there are five, each field parsed in order, then a day of
    -- month that no month of the expression has when day of month and day of week must both
    -- match. Text outside ASCII is refused (rara.schedules.ticks.cron_problem too: Python's
    -- upper() turns some of it into names).
    parts text[];
    names text[] := '{second,minute,hour,day-of-month,month,day-of-week}';
    days integer[];
    months integer[];
    got integer[];
BEGIN
    IF p_cron ~ '[^\x01-\x7f]' THEN
        RETURN 'only ASCII characters';
    END IF;
    parts := regexp_split_to_array(
        btrim(upper(p_cron COLLATE "C"), E' \t\n\x0b\f\r\x1c\x1d\x1e\x1f'),
        E'[ \t\n\x0b\f\r\x1c\x1d\x1e\x1f]+');
    IF parts = ARRAY[''] THEN
        parts := '{}';
    END IF;
    IF cardinality(parts) = 5 THEN
        parts := '0'::text || parts;
    END IF;
    IF cardinality(parts) <> 6 THEN
        RETURN 'Wrong number of fields';
    END IF;
    FOR i IN 0 .. 5 LOOP
        got := rara_schedule_cron_field(i, parts[i + 1]);
        IF got IS NULL THEN
            RETURN 'Bad ' || names[i + 1];
        END IF;
        IF i = 3 THEN
            days := got;
        ELSIF i = 4 THEN
            months := got;
        END IF;
    END LOOP;
    IF (parts[4] LIKE '*%' OR parts[6] LIKE '*%')
       AND (SELECT min(d) FROM unnest(days) d) > (
            SELECT greatest(29, max((ARRAY[31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])[m]))
            FROM unnest(months) m) THEN
        RETURN 'Bad day-of-month';
    END IF;
    RETURN NULL;
END $$;
SELECT rara_grant('rara_schedule_cron_problem');  -- only through rara_schedule_timing_problem

CREATE OR REPLACE FUNCTION rara_schedule_quoted(p_value text)
RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    -- A value quoted as Python's repr() quotes a plain string (the document check's words),
    -- its first 200 characters.
    SELECT CASE WHEN position('''' IN v) > 0 AND position('"' IN v) = 0
                THEN '"' || v || '"'
                ELSE '''' || replace(v, '''', '\''') || '''' END
    FROM (SELECT replace(replace(replace(replace(left(p_value, 200), '\', '\\'),
                 E'\n', '\n'), E'\t', '\t'), E'\r', '\r') AS v) AS escaped
$$;
SELECT rara_grant('rara_schedule_quoted');  -- only through rara_schedule_timing_problem

CREATE OR REPLACE FUNCTION rara_schedule_timing_problem(p_cron text, p_time_zone text)
RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    -- The problems of a schedule's timing, one line each in the words of the document's
    -- check (rara.schedules.model, which `rara schedules apply` prints); NULL: none. The
    -- database checks them itself, so that a schedule stored by any caller is one the firing
    -- can plan: the cron expression as cronsim parses it, a zone PostgreSQL knows by name.
    cron_problem text := rara_schedule_cron_problem(p_cron);
    problems text[] := '{}';
BEGIN
    IF char_length(p_cron) > 200 THEN
        problems := problems || 'spec.schedule: String should have at most 200 characters'::text;
    ELSIF cron_problem IS NOT NULL THEN
        problems := problems || format('spec.schedule: %s is not a cron expression: %s',
                                       rara_schedule_quoted(p_cron), cron_problem);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_timezone_names WHERE name = p_time_zone) THEN
        problems := problems || format(
            'spec.timeZone: %s is not an IANA time zone (e.g. ''UTC'', ''Europe/Berlin'')',
            rara_schedule_quoted(p_time_zone));
    END IF;
    RETURN nullif(array_to_string(problems, E'\n  '), '');
END $$;
SELECT rara_grant('rara_schedule_timing_problem');  -- only through rara_schedule_apply

CREATE OR REPLACE FUNCTION rara_schedule_run_key(p_name text, p_tick timestamptz)
RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    -- The idempotency key of the run of schedule p_name at p_tick, as rara.schedules.firing
    -- (idempotency_key) builds it: a firing pass and a backfill start a tick under it, a
    -- trigger under it with ':trigger' after it (p_tick: when).
    SELECT 'schedule:'
        || CASE WHEN char_length(p_name) <= 160 THEN p_name
                ELSE 'sha256-' || left(encode(sha256(convert_to(p_name, 'UTF8')), 'hex'), 32)
           END
        || ':' || to_char(p_tick AT TIME ZONE 'UTC', 'YYYYMMDD"T"HH24MISS"Z"')
$$;
SELECT rara_grant('rara_schedule_run_key');  -- only through the functions below

CREATE OR REPLACE FUNCTION rara_schedule_owns_run(
    p_namespace text, p_name text, p_tick timestamptz, p_run_id bigint)
RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    -- Whether run p_run_id is the run of tick p_tick of schedule p_namespace/p_name: of that
    -- namespace, under that tick's key (or that trigger's). A schedule records, reads and
    -- cancels no other run: the firing may act in every namespace, and a run id is a number
    -- any caller can write. (PL/pgSQL: its body names a table, which a dump of the schema
    -- creates after its functions.)
    RETURN EXISTS (
        SELECT 1 FROM rara_runs r
        WHERE r.id = p_run_id AND r.namespace = p_namespace
          AND r.idempotency_key IN (rara_schedule_run_key(p_name, p_tick),
                                    rara_schedule_run_key(p_name, p_tick) || ':trigger'));
END $$;
SELECT rara_grant('rara_schedule_owns_run');  -- only through the functions below

CREATE OR REPLACE FUNCTION rara_schedule_apply(
    p_name text, p_definition text, p_version integer, p_cron text, p_time_zone text,
    p_input jsonb, p_concurrency_policy text, p_starting_deadline_seconds integer,
    p_suspended boolean, p_successful_runs_kept integer, p_failed_runs_kept integer,
    p_spec jsonb, p_next_tick timestamptz, p_namespace text DEFAULT 'default')
RETURNS TABLE (created boolean, changed boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    old record;
    problem text;
BEGIN
    -- The input every tick's run will start with is a run input: its limit first, here where
    -- it enters, not at each firing (where a tick refused for it would be the team's
    -- discovery). The document, a spec of its own, is held to a spec's size.
    PERFORM rara_limit_check('spec.input', octet_length(p_input::text), 'bytes',
                             'run_input_bytes');
    PERFORM rara_limit_check('the schedule document', octet_length(p_spec::text), 'bytes',
                             'spec_bytes');
    PERFORM rara_namespace_check(p_namespace);
    -- Create or change a schedule (of p_namespace, starting runs of p_definition there).
    -- p_next_tick is the first tick after now of p_cron in
    -- p_time_zone; it replaces the stored one only when the timing changed (cron, zone), so
    -- re-applying the same document neither skips nor repeats a tick. A resumed schedule's
    -- ticks start again after now (the suspended ones are neither fired nor missed), and so do
    -- a refused one's: applying it again is what lifts the refusal (rara_schedule_refuse).
    -- A cron expression or zone the firing could not plan is refused here, whoever calls.
    problem := rara_schedule_timing_problem(p_cron, p_time_zone);
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'invalid workflow schedule:%', E'\n  ' || problem
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO old FROM rara_schedules
    WHERE namespace = p_namespace AND name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO rara_schedules (namespace, name, definition, version, cron, time_zone,
                                    input, concurrency_policy, starting_deadline_seconds,
                                    suspended, successful_runs_kept, failed_runs_kept, spec,
                                    next_tick)
        VALUES (p_namespace, p_name, p_definition, p_version, p_cron, p_time_zone, p_input,
                p_concurrency_policy, p_starting_deadline_seconds, p_suspended,
                p_successful_runs_kept, p_failed_runs_kept, p_spec, p_next_tick);
        created := true;
        changed := true;
    ELSE
        created := false;
        changed := old.spec IS DISTINCT FROM p_spec OR old.refused_at IS NOT NULL;
        IF changed THEN
            UPDATE rara_schedules SET
                definition = p_definition, version = p_version, cron = p_cron,
                time_zone = p_time_zone, input = p_input,
                concurrency_policy = p_concurrency_policy,
                starting_deadline_seconds = p_starting_deadline_seconds,
                suspended = p_suspended, successful_runs_kept = p_successful_runs_kept,
                failed_runs_kept = p_failed_runs_kept, spec = p_spec,
                next_tick = CASE WHEN old.cron = p_cron AND old.time_zone = p_time_zone
                                      AND NOT (old.suspended AND NOT p_suspended)
                                      AND old.refused_at IS NULL
                                 THEN old.next_tick ELSE p_next_tick END,
                refused_reason = NULL, refused_at = NULL,
                updated_at = now()
            WHERE namespace = p_namespace AND name = p_name;
        END IF;
    END IF;
    PERFORM rara_schedule_changed(p_name, changed);
    RETURN NEXT;
END $$;
SELECT rara_grant('rara_schedule_apply', 'rara_client', 'rara_operator');

CREATE OR REPLACE FUNCTION rara_schedule_suspend(
    p_name text, p_suspended boolean, p_next_tick timestamptz,
    p_namespace text DEFAULT 'default')
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    -- Pause (p_suspended) or resume a schedule; a resumed one starts again at p_next_tick, its
    -- first tick after now. The spec keeps `suspend` in step, so `show` and a re-apply agree.
    -- NULL: no such schedule; false: it already was.
    PERFORM rara_namespace_check(p_namespace);
    PERFORM 1 FROM rara_schedules WHERE namespace = p_namespace AND name = p_name;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    UPDATE rara_schedules SET
        suspended = p_suspended,
        spec = jsonb_set(spec, '{suspend}', to_jsonb(p_suspended)),
        next_tick = CASE WHEN p_suspended THEN next_tick ELSE p_next_tick END,
        updated_at = now()
    WHERE namespace = p_namespace AND name = p_name AND suspended <> p_suspended;
    RETURN rara_schedule_changed(p_name, FOUND);
END $$;
SELECT rara_grant('rara_schedule_suspend', 'rara_client', 'rara_operator');

CREATE OR REPLACE FUNCTION rara_schedule_delete(
    p_name text, p_namespace text DEFAULT 'default')
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM rara_namespace_check(p_namespace);
    -- The schedule and its tick history go; the runs it started stay. False: none was.
    DELETE FROM rara_schedules WHERE namespace = p_namespace AND name = p_name;
    RETURN rara_schedule_changed(p_name, FOUND);
END $$;
SELECT rara_grant('rara_schedule_delete', 'rara_client', 'rara_operator');

CREATE OR REPLACE FUNCTION rara_schedule_claim(p_limit integer)
RETURNS TABLE (namespace text, name text, definition text, version integer, cron text,
               time_zone text,
               input jsonb, concurrency_policy text, starting_deadline_seconds integer,
               next_tick timestamptz, last_run_id bigint, last_run_ended boolean,
               db_now timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
BEGIN
    -- Up to p_limit due schedules of every namespace, their rows locked until the caller's commit: SKIP LOCKED,
    -- so firing processes never wait on each other and never take one schedule twice at once.
    -- The caller decides their ticks (rara_schedule_decide) in the same transaction. db_now is
    -- the clock every firing process uses (the database's: one clock, however many hosts).
    -- last_run_ended: whether the run of the last tick has ended (NULL: none, or a run that
    -- is not that tick's: of another namespace or key, a schedule learns nothing of), for
    -- Forbid and Replace. A refused schedule (rara_schedule_refuse) is not taken.
    RETURN QUERY
    SELECT s.namespace, s.name, s.definition, s.version, s.cron, s.time_zone, s.input,
           s.concurrency_policy, s.starting_deadline_seconds, s.next_tick, s.last_run_id,
           (SELECT r.status NOT IN ('pending', 'running') FROM rara_runs r
            WHERE r.id = s.last_run_id
              AND rara_schedule_owns_run(s.namespace, s.name, s.last_tick, s.last_run_id)),
           now()
    FROM rara_schedules s
    WHERE NOT s.suspended AND s.refused_at IS NULL AND s.next_tick <= now()
      -- a team's own firing process fires its own (the caller's namespaces read once)
      AND (SELECT rara_caller_namespaces()) && ARRAY['*', s.namespace]
    ORDER BY s.next_tick
    LIMIT p_limit
    FOR UPDATE OF s SKIP LOCKED;
END $$;
SELECT rara_grant('rara_schedule_claim', 'rara_client', 'rara_operator');

CREATE OR REPLACE FUNCTION rara_schedule_decide(
    p_name text, p_ticks jsonb, p_missed integer, p_next_tick timestamptz,
    p_namespace text DEFAULT 'default')
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    s record;
    newest record;
BEGIN
    -- Record decided ticks, p_ticks: [{tick, outcome, run_id, reason}], and move the schedule
    -- on: next_tick to p_next_tick (never back), p_missed more missed ticks. A tick decided
    -- before keeps its first record (ON CONFLICT): with the runs' idempotency key that makes
    -- a tick one run even if two callers decided it. Then the history limits: of the ticks
    -- whose run ended, the newest successful_runs_kept succeeded and failed_runs_kept failed
    -- or cancelled stay; runs are not deleted here (`rara runs prune` is the owner's).
    -- Each run id must be its tick's run (rara_schedule_owns_run): the last run is what the
    -- firing cancels under Replace, in whatever namespace it runs.
    PERFORM rara_namespace_check(p_namespace);
    IF p_missed IS NULL OR p_missed < 0 THEN
        RAISE EXCEPTION 'missed ticks % of schedule % is not a count (0 or more)',
            coalesce(p_missed::text, 'null'), p_name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO s FROM rara_schedules
    WHERE namespace = p_namespace AND name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no schedule % in namespace %', p_name, p_namespace
            USING ERRCODE = 'no_data_found';
    END IF;
    SELECT t.tick, t.run_id INTO newest
    FROM jsonb_to_recordset(p_ticks) AS t(tick timestamptz, run_id bigint)
    WHERE t.run_id IS NOT NULL
      AND (t.tick IS NULL OR NOT rara_schedule_owns_run(p_namespace, p_name, t.tick, t.run_id))
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'run % is not the run of schedule % of namespace % at %',
            newest.run_id, p_name, p_namespace, coalesce(newest.tick::text, 'no tick')
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'a schedule records only the run it started for the tick, under '
                         'the tick''s idempotency key, in its own namespace';
    END IF;
    INSERT INTO rara_schedule_ticks (namespace, schedule, tick, outcome, run_id, reason)
    SELECT p_namespace, p_name, t.tick, t.outcome, t.run_id, t.reason
    FROM jsonb_to_recordset(p_ticks) AS t(tick timestamptz, outcome text, run_id bigint,
                                          reason text)
    ON CONFLICT (namespace, schedule, tick) DO NOTHING;
    SELECT t.tick, t.run_id INTO newest
    FROM jsonb_to_recordset(p_ticks) AS t(tick timestamptz, run_id bigint)
    WHERE t.run_id IS NOT NULL ORDER BY t.tick DESC LIMIT 1;
    UPDATE rara_schedules SET
        next_tick = greatest(next_tick, coalesce(p_next_tick, next_tick)),
        missed_ticks = missed_ticks + p_missed,
        -- The last run is the newest tick's (a backfill of older ticks leaves it).
        last_tick = CASE WHEN newest.tick >= coalesce(last_tick, '-infinity')
                         THEN newest.tick ELSE last_tick END,
        last_run_id = CASE WHEN newest.tick >= coalesce(last_tick, '-infinity')
                           THEN newest.run_id ELSE last_run_id END,
        updated_at = now()
    WHERE namespace = p_namespace AND name = p_name;
    WITH ended AS (
        SELECT t.tick, r.status = 'succeeded' AS ok,
               row_number() OVER (PARTITION BY r.status = 'succeeded'
                                  ORDER BY t.tick DESC) AS newest
        FROM rara_schedule_ticks t JOIN rara_runs r ON r.id = t.run_id
        WHERE t.namespace = p_namespace AND t.schedule = p_name
          AND r.status NOT IN ('pending', 'running')
    )
    DELETE FROM rara_schedule_ticks t USING ended e
    WHERE t.namespace = p_namespace AND t.schedule = p_name AND t.tick = e.tick
      AND e.newest > CASE WHEN e.ok THEN s.successful_runs_kept ELSE s.failed_runs_kept END;
    -- Ticks that started nothing (skipped, refused): the newest 100 say enough.
    DELETE FROM rara_schedule_ticks t
    WHERE t.namespace = p_namespace AND t.schedule = p_name AND t.run_id IS NULL
      AND t.tick < (
        SELECT u.tick FROM rara_schedule_ticks u
        WHERE u.namespace = p_namespace AND u.schedule = p_name AND u.run_id IS NULL
        ORDER BY u.tick DESC OFFSET 99 LIMIT 1);
END $$;
SELECT rara_grant('rara_schedule_decide', 'rara_client', 'rara_operator');

CREATE OR REPLACE FUNCTION rara_schedule_cancel_run(
    p_name text, p_run_id bigint, p_namespace text DEFAULT 'default')
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    -- Replace's cancel: run p_run_id, when it is the last run of schedule p_namespace/p_name
    -- (its last tick's run, rara_schedule_owns_run), by the cancel path of `rara runs cancel`
    -- (rara_run_cancel). Any other run is refused, whichever namespaces the caller may act in:
    -- the firing acts in every one, for each schedule in its own. False: it had ended.
    PERFORM rara_namespace_check(p_namespace);
    PERFORM 1 FROM rara_schedules s
    WHERE s.namespace = p_namespace AND s.name = p_name AND s.last_run_id = p_run_id
      AND rara_schedule_owns_run(s.namespace, s.name, s.last_tick, p_run_id);
    IF NOT FOUND THEN
        RAISE EXCEPTION 'run % is not the last run of schedule % of namespace %',
            p_run_id, p_name, p_namespace
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN rara_run_cancel(p_run_id);
END $$;
SELECT rara_grant('rara_schedule_cancel_run', 'rara_client', 'rara_operator');

CREATE OR REPLACE FUNCTION rara_schedule_refuse(
    p_name text, p_reason text, p_namespace text DEFAULT 'default')
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    -- A schedule the firing cannot fire (its ticks cannot be planned, or its pass failed):
    -- marked with why and when, and taken by no pass until it is applied again
    -- (rara_schedule_apply lifts it). The other schedules fire on. False: no such schedule.
    PERFORM rara_namespace_check(p_namespace);
    IF coalesce(btrim(p_reason), '') = '' THEN
        RAISE EXCEPTION 'a refused schedule needs a reason' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE rara_schedules SET refused_reason = left(p_reason, 500), refused_at = now(),
                              updated_at = now()
    WHERE namespace = p_namespace AND name = p_name;
    RETURN FOUND;
END $$;
SELECT rara_grant('rara_schedule_refuse', 'rara_client', 'rara_operator');
