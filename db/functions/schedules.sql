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

CREATE OR REPLACE FUNCTION rara_schedule_apply(
    p_name text, p_definition text, p_version integer, p_cron text, p_time_zone text,
    p_input jsonb, p_concurrency_policy text, p_starting_deadline_seconds integer,
    p_suspended boolean, p_successful_runs_kept integer, p_failed_runs_kept integer,
    p_spec jsonb, p_next_tick timestamptz, p_namespace text DEFAULT 'default')
RETURNS TABLE (created boolean, changed boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    old record;
BEGIN
    PERFORM rara_namespace_check(p_namespace);
    -- Create or change a schedule (of p_namespace, starting runs of p_definition there).
    -- p_next_tick is the first tick after now of p_cron in
    -- p_time_zone; it replaces the stored one only when the timing changed (cron, zone), so
    -- re-applying the same document neither skips nor repeats a tick. A resumed schedule's
    -- ticks start again after now (the suspended ones are neither fired nor missed).
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
        changed := old.spec IS DISTINCT FROM p_spec;
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
                                 THEN old.next_tick ELSE p_next_tick END,
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
    -- last_run_ended: whether the run of the last tick has ended (NULL: none), for Forbid.
    RETURN QUERY
    SELECT s.namespace, s.name, s.definition, s.version, s.cron, s.time_zone, s.input,
           s.concurrency_policy, s.starting_deadline_seconds, s.next_tick, s.last_run_id,
           (SELECT r.status NOT IN ('pending', 'running') FROM rara_runs r
            WHERE r.id = s.last_run_id),
           now()
    FROM rara_schedules s
    WHERE NOT s.suspended AND s.next_tick <= now()
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
    PERFORM rara_namespace_check(p_namespace);
    SELECT * INTO s FROM rara_schedules
    WHERE namespace = p_namespace AND name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no schedule % in namespace %', p_name, p_namespace
            USING ERRCODE = 'no_data_found';
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
