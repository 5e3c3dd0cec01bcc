-- Schedules (rara_schedules, rara_schedule_ticks; migration 0014): written through
-- db/functions/schedules.sql, fired by rara.schedules.firing, read by `rara schedules` and the
-- operator. Typed: rara.pg.schedules.
-- Loaded by rara.pg.queries with every other file of this folder: one name space, each name
-- object first, then verb (`step_lease`, `run_cancel`); `_many` takes arrays.
-- aiosql suffixes: ^ one row, $ one value, ! no result; none: all rows. No literal percent
-- signs: statements go to psycopg's %-style placeholders.

-- name: schedule_apply^
SELECT * FROM rara_schedule_apply(
    p_name => :name, p_definition => :definition, p_version => CAST(:version AS integer),
    p_cron => :cron, p_time_zone => :time_zone, p_input => CAST(:input AS jsonb),
    p_concurrency_policy => :concurrency_policy,
    p_starting_deadline_seconds => :starting_deadline_seconds, p_suspended => :suspended,
    p_successful_runs_kept => :successful_runs_kept, p_failed_runs_kept => :failed_runs_kept,
    p_spec => CAST(:spec AS jsonb), p_next_tick => CAST(:next_tick AS timestamptz),
    p_namespace => :namespace);

-- name: schedule_suspend$
-- True: changed; false: it already was; null: no such schedule.
SELECT rara_schedule_suspend(p_name => :name, p_suspended => :suspended,
                             p_next_tick => CAST(:next_tick AS timestamptz),
                             p_namespace => :namespace);

-- name: schedule_delete$
SELECT rara_schedule_delete(p_name => :name, p_namespace => :namespace);

-- name: schedule_claim
-- The due schedules of every namespace, locked until the caller's commit (SKIP LOCKED); with
-- the database's now.
SELECT * FROM rara_schedule_claim(p_limit => :limit);

-- name: schedule_decide!
SELECT rara_schedule_decide(p_name => :name, p_ticks => CAST(:ticks AS jsonb),
                            p_missed => :missed, p_next_tick => CAST(:next_tick AS timestamptz),
                            p_namespace => :namespace);

-- name: schedule_cancel_run$
-- Replace's cancel of the schedule's last run (refused for any other run). True: cancelled
-- now; false: it had ended.
SELECT rara_schedule_cancel_run(p_name => :name, p_run_id => :run_id,
                                p_namespace => :namespace);

-- name: schedule_refuse$
-- A schedule the firing cannot fire: marked, and taken by no pass until applied again.
SELECT rara_schedule_refuse(p_name => :name, p_reason => :reason, p_namespace => :namespace);

-- name: schedule_next_due^
-- When the firing loop must wake: the earliest next tick of a live schedule (null: none), and
-- the database's now to measure the sleep by. One read of the partial index, however many
-- schedules there are.
SELECT (SELECT min(next_tick) FROM rara_schedules
        WHERE NOT suspended AND refused_at IS NULL) AS next_tick,
       now() AS db_now;

-- name: schedule_get^
SELECT s.namespace, s.name, s.definition, s.version, s.cron, s.time_zone, s.input, s.concurrency_policy,
       s.starting_deadline_seconds, s.suspended, s.successful_runs_kept, s.failed_runs_kept,
       s.spec, s.next_tick, s.last_tick, s.last_run_id, s.missed_ticks, s.created_at,
       s.updated_at, r.status AS last_run_status, s.refused_reason, s.refused_at
FROM rara_schedules s LEFT JOIN rara_runs r ON r.id = s.last_run_id
WHERE s.namespace = :namespace AND s.name = :name;

-- name: schedule_list
-- The schedules of :namespace (of every namespace when null).
SELECT s.namespace, s.name, s.definition, s.version, s.cron, s.time_zone, s.concurrency_policy,
       s.suspended, s.next_tick, s.last_tick, s.last_run_id, s.missed_ticks,
       r.status AS last_run_status, s.refused_reason
FROM rara_schedules s LEFT JOIN rara_runs r ON r.id = s.last_run_id
WHERE CAST(:namespace AS text) IS NULL OR s.namespace = :namespace
ORDER BY s.namespace, s.name;

-- name: schedule_tick_list
-- A schedule's decided ticks, newest first, with each run's status now.
SELECT t.tick, t.outcome, t.run_id, t.reason, t.decided_at, r.status AS run_status
FROM rara_schedule_ticks t LEFT JOIN rara_runs r ON r.id = t.run_id
WHERE t.namespace = :namespace AND t.schedule = :name
ORDER BY t.tick DESC LIMIT :limit;

-- name: schedule_firing_seen^
-- Whether anything fires schedules (rara.pg.schedules.FiringSeen): the firing processes
-- connected now — rara.schedules.firing names its connection "<process> :suffix", and
-- pg_stat_activity shows every role every session's application name — and when a firing pass
-- last decided a tick of :namespace's schedules (of every visible namespace when null; a
-- trigger or a backfill is not a firing pass). The ticks kept are each schedule's history
-- limits' worth (rara_schedule_decide prunes the rest): a short scan.
SELECT ARRAY(SELECT a.application_name FROM pg_stat_activity a
             WHERE a.datname = current_database()
               AND right(a.application_name, length(:suffix)) = :suffix
             ORDER BY a.application_name) AS processes,
       (SELECT max(t.decided_at) FROM rara_schedule_ticks t
        WHERE (CAST(:namespace AS text) IS NULL OR t.namespace = :namespace)
          AND t.outcome IN ('started', 'skipped', 'refused')) AS last_fired,
       now() AS db_now;
