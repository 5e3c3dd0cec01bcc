-- What every change of a step or a run passes through: the triggers of rara_steps and rara_runs
-- (the migrations create the triggers; these are their functions). The state machines, refused
-- in the database so that a bug in a client cannot corrupt a run, mirror rara/states.py (one
-- table in code; tests/db/test_state_machines.py tries every pair against both); the
-- notifications that wake workers and watchers; the attempts a deleted step takes with it.
-- No role calls any of these: only the triggers do (rara_grant with no role).
-- Repeatable (rara.pg.migrate): edit in place.

-- The legal transitions of a step's status and of a run's (rara/states.py).
CREATE OR REPLACE FUNCTION rara_step_transition_allowed(old rara_step_status, new rara_step_status)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT (old, new) IN (
        ('blocked', 'ready'), ('blocked', 'cancelled'),
        ('ready', 'running'), ('ready', 'cancelled'),
        ('running', 'succeeded'), ('running', 'failed'), ('running', 'cancelled'),
        ('running', 'ready')
    )
$$;
SELECT rara_grant('rara_step_transition_allowed');  -- only through the trigger below

CREATE OR REPLACE FUNCTION rara_run_transition_allowed(old rara_run_status, new rara_run_status)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT (old, new) IN (
        ('pending', 'running'), ('pending', 'cancelled'),
        ('running', 'succeeded'), ('running', 'failed'), ('running', 'cancelled')
    )
$$;
SELECT rara_grant('rara_run_transition_allowed');  -- only through the trigger below

-- BEFORE UPDATE OF status, on a change of status (rara_steps_transition): a blocked map or
-- wait step may also end at once (migrations 0008, 0021: an empty map, a wait decided early).
-- And the one home of a paused run's hold (docs/state-machines.md, "Paused runs"): a step of
-- a paused run (its own run_paused, set by rara_run_set_paused on the run's open steps) that
-- becomes ready — an end's unblocking, a retry, a lease reaped or released, a cache deferral
-- — is held: still `ready`, but with available_at 'infinity', which the lease never takes,
-- its own kept in held_available_at for the resume. Here, in the trigger every change of
-- status already runs, and not in a trigger of its own: a second one costs every leased step
-- (migration 0033). A map's child inserted in a paused run is held by its insert (maps.sql).
CREATE OR REPLACE FUNCTION rara_check_step_transition() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT (rara_step_transition_allowed(OLD.status, NEW.status)
            OR ((NEW.map_over IS NOT NULL OR NEW.wait IS NOT NULL) AND OLD.status = 'blocked'
                AND NEW.status IN ('succeeded', 'failed'))) THEN
        RAISE EXCEPTION 'illegal step transition % -> % (step %)', OLD.status, NEW.status, OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'rara_step_transition';
    END IF;
    IF NEW.run_paused AND NEW.status = 'ready' THEN
        NEW.held_available_at := NEW.available_at;
        NEW.available_at := 'infinity';
    END IF;
    RETURN NEW;
END $$;
SELECT rara_grant('rara_check_step_transition');  -- a trigger

-- BEFORE UPDATE OF status, on a change of status (rara_runs_transition).
CREATE OR REPLACE FUNCTION rara_check_run_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT rara_run_transition_allowed(OLD.status, NEW.status) THEN
        RAISE EXCEPTION 'illegal run transition % -> % (run %)', OLD.status, NEW.status, OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'rara_run_transition';
    END IF;
    RETURN NEW;
END $$;
SELECT rara_grant('rara_check_run_transition');  -- a trigger

-- The attempt history without a foreign key check on every lease (migration 0004): attempts go
-- when their step is deleted, one statement per DELETE. SECURITY DEFINER: like the cascade it
-- replaces, it is not limited by the deleter's grants.
CREATE OR REPLACE FUNCTION rara_delete_attempts_of_deleted_steps() RETURNS trigger LANGUAGE plpgsql
    SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM rara_attempts a USING gone WHERE a.step_id = gone.id;
    RETURN NULL;
END $$;
SELECT rara_grant('rara_delete_attempts_of_deleted_steps');  -- a trigger

-- Wake idle workers: a step became ready (NOTIFY is a hint; workers also poll). Identical
-- payloads in one transaction are folded into one notification by PostgreSQL.
CREATE OR REPLACE FUNCTION rara_notify_ready() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('rara_ready', NEW.capability);
    RETURN NULL;
END $$;
SELECT rara_grant('rara_notify_ready');  -- a trigger

-- NOTIFY rara_queued, payload a capability, once per INSERT statement that queued ready steps
-- of it (migration 0024: a run's start or resume, a map's slice), for the held-back slots. A
-- wake-up, never an authority (docs/least-privilege.md).
CREATE OR REPLACE FUNCTION rara_notify_queued() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('rara_queued', q.capability)
    FROM (SELECT DISTINCT i.capability FROM inserted i WHERE i.status = 'ready') AS q;
    RETURN NULL;
END $$;
SELECT rara_grant('rara_notify_queued');  -- a trigger

-- Tell watchers (clients waiting on a run, `rara runs watch`) that a run ended: succeeded,
-- failed or cancelled. The payload names nothing (migration 0029): a listener may be any role,
-- in any namespace; it reads what it may see.
CREATE OR REPLACE FUNCTION rara_notify_run() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('rara_run', '');
    RETURN NULL;
END $$;
SELECT rara_grant('rara_notify_run');  -- a trigger

