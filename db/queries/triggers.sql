-- Triggers (rara_triggers, rara_trigger_events; migration 0035): written through
-- db/functions/triggers.sql, fired by rara.triggers.webhook, read by `rara triggers`.
-- Typed: rara.pg.triggers.
-- Loaded by rara.pg.queries with every other file of this folder: one name space, each name
-- object first, then verb (`step_lease`, `run_cancel`); `_many` takes arrays.
-- aiosql suffixes: ^ one row, $ one value, ! no result; none: all rows. No literal percent
-- signs: statements go to psycopg's %-style placeholders.

-- name: trigger_apply^
SELECT * FROM rara_trigger_apply(
    p_name => :name, p_kind => :kind, p_definition => :definition,
    p_version => CAST(:version AS integer), p_input => CAST(:input AS jsonb),
    p_config => CAST(:config AS jsonb), p_suspended => :suspended,
    p_spec => CAST(:spec AS jsonb), p_namespace => :namespace);

-- name: trigger_suspend$
-- True: changed; false: it already was; null: no such trigger.
SELECT rara_trigger_suspend(p_name => :name, p_suspended => :suspended,
                            p_namespace => :namespace);

-- name: trigger_delete$
SELECT rara_trigger_delete(p_name => :name, p_namespace => :namespace);

-- name: trigger_take^
-- The trigger an event is for, held until the caller's commit (no row: no such trigger), and
-- the run an earlier delivery of the same event started.
SELECT * FROM rara_trigger_take(p_name => :name, p_event_key => :event_key,
                                p_namespace => :namespace);

-- name: trigger_event_record^
SELECT * FROM rara_trigger_event_record(
    p_name => :name, p_event_key => :event_key, p_run_id => CAST(:run_id AS bigint),
    p_reason => CAST(:reason AS text), p_namespace => :namespace);

-- name: trigger_get^
SELECT t.namespace, t.name, t.kind, t.definition, t.version, t.input, t.config, t.suspended,
       t.spec, t.created_at, t.updated_at, t.next_poll, t.watch_error, t.watch_error_at,
       (SELECT count(*) FROM rara_trigger_objects o
        WHERE o.namespace = t.namespace AND o.trigger = t.name) AS objects
FROM rara_triggers t
WHERE t.namespace = :namespace AND t.name = :name;

-- name: trigger_list
-- The triggers of :namespace (of every namespace when null), each with its newest event;
-- only the one named :name when it is not null.
SELECT t.namespace, t.name, t.kind, t.definition, t.version, t.suspended,
       e.last_at AS last_event_at, e.outcome AS last_outcome, e.run_id AS last_run_id,
       r.status AS last_run_status,
       (SELECT count(*) FROM rara_trigger_events c
        WHERE c.namespace = t.namespace AND c.trigger = t.name) AS events
FROM rara_triggers t
LEFT JOIN LATERAL (
    SELECT x.last_at, x.outcome, x.run_id FROM rara_trigger_events x
    WHERE x.namespace = t.namespace AND x.trigger = t.name
    ORDER BY x.last_at DESC LIMIT 1) e ON true
LEFT JOIN rara_runs r ON r.id = e.run_id
WHERE (CAST(:namespace AS text) IS NULL OR t.namespace = :namespace)
  AND (CAST(:name AS text) IS NULL OR t.name = :name)
ORDER BY t.namespace, t.name;

-- name: trigger_event_list
-- A trigger's events, newest first, with each run's status now.
SELECT e.event_key, e.outcome, e.run_id, e.reason, e.seen, e.first_at, e.last_at,
       r.status AS run_status
FROM rara_trigger_events e LEFT JOIN rara_runs r ON r.id = e.run_id
WHERE e.namespace = :namespace AND e.trigger = :name
ORDER BY e.last_at DESC LIMIT :limit;

-- name: trigger_watch_claim
-- The watched triggers (objects, release, run) due for a pass, locked until the caller's commit (SKIP
-- LOCKED), with the database's now.
SELECT * FROM rara_trigger_watch_claim(p_limit => :limit);

-- name: trigger_watch_decide!
SELECT rara_trigger_watch_decide(
    p_name => :name, p_objects => CAST(:objects AS jsonb), p_changed => :changed,
    p_next_poll => CAST(:next_poll AS timestamptz), p_error => CAST(:error AS text),
    p_namespace => :namespace);

-- name: trigger_objects_seen
-- What an objects trigger last saw of each object.
SELECT key, digest, size, fingerprint FROM rara_trigger_objects
WHERE namespace = :namespace AND trigger = :name;

-- name: trigger_watch_next_due^
-- When a watching loop must wake: the earliest due pass of a watched trigger or due burst of
-- a debounced one (null: none), and the database's now to measure the sleep by. Two reads of
-- partial indexes.
SELECT least((SELECT min(next_poll) FROM rara_triggers WHERE NOT suspended),
             (SELECT min(due_at) FROM rara_trigger_batches WHERE closed_at IS NULL))
           AS next_poll,
       now() AS db_now;

-- name: trigger_upstream
-- A release or run trigger's events no pass has recorded yet, oldest first.
SELECT * FROM rara_trigger_upstream(p_name => :name, p_limit => :limit,
                                    p_namespace => :namespace);

-- name: trigger_batch_add^
SELECT * FROM rara_trigger_batch_add(
    p_name => :name, p_event_key => :event_key, p_batch_key => :batch_key,
    p_input => CAST(:input AS jsonb), p_window_seconds => :window_seconds,
    p_max_delay_seconds => :max_delay_seconds, p_namespace => :namespace);

-- name: trigger_batch_claim
-- The due bursts of debounced triggers, locked until the caller's commit (SKIP LOCKED).
SELECT * FROM rara_trigger_batch_claim(p_limit => :limit);

-- name: trigger_batch_close!
SELECT rara_trigger_batch_close(p_batch_id => :batch_id, p_run_id => CAST(:run_id AS bigint),
                                p_reason => CAST(:reason AS text));

-- name: trigger_event_seen$
-- Whether the trigger has recorded this event (a stale trigger's episode, say).
SELECT EXISTS (SELECT FROM rara_trigger_events
               WHERE namespace = :namespace AND trigger = :name AND event_key = :event_key);
