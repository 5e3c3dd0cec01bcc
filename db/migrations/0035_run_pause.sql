-- rara 0035: pausing a run (rara_run_set_paused; docs/state-machines.md, "Paused runs").
--
-- A paused run keeps its status (its running steps go on and end as usual); what it holds are
-- its steps that could be leased: a held step stays `ready` with available_at 'infinity', which
-- the lease's `available_at <= now()` never takes, and its own available_at kept beside it to
-- be put back on resume (its place in the queue). So the lease is unchanged, and costs the
-- same while no run is paused. Every path that makes a step ready passes one trigger that
-- holds it when its run is paused: an end's unblocking, a retry after a failure, a lease
-- reaped or released, a cache deferral, a map's slice inserted. The trigger's condition reads
-- the step's own run_paused, which the pause sets on every open step of the run (and a map's
-- child takes from its map), so a step of a run that is not paused costs no read of its run.
-- Needs no owner's right beyond the tables'; on a large rara_steps the ADD COLUMNs are catalog
-- changes only (no default, or a constant one), the triggers' re-creation a short lock.
ALTER TABLE rara_runs ADD COLUMN paused_at timestamptz;  -- set while the run is paused
-- A held step's own available_at, while available_at is 'infinity' (NULL: not held).
ALTER TABLE rara_steps ADD COLUMN held_available_at timestamptz;
-- The step's run is paused: made ready, it is held (set and cleared with the run's paused_at,
-- on its open steps; a map's child inserted meanwhile takes its map's).
ALTER TABLE rara_steps ADD COLUMN run_paused boolean NOT NULL DEFAULT false;

-- The trigger's function is db/functions/states.sql's, which replaces this stand-in in the same
-- transaction, after the migrations (as the baseline's stand-ins are).
CREATE FUNCTION rara_hold_if_paused() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'rara: trigger % of % runs a stand-in (db/functions/ not applied)',
        TG_NAME, TG_TABLE_NAME;
END $$;

-- A step of a paused run becoming ready (the lease's UPDATE never matches the condition; nor
-- does any step of a run that is not paused).
CREATE TRIGGER rara_steps_hold_ready BEFORE UPDATE OF status ON rara_steps
    FOR EACH ROW
    WHEN (new.status = 'ready' AND old.status IS DISTINCT FROM new.status AND new.run_paused)
    EXECUTE FUNCTION rara_hold_if_paused();
-- A map's slice of a paused run (its children are inserted ready as the map goes; a run's
-- start inserts the steps of a run that cannot be paused yet).
CREATE TRIGGER rara_steps_hold_inserted BEFORE INSERT ON rara_steps
    FOR EACH ROW
    WHEN (new.status = 'ready' AND new.run_paused)
    EXECUTE FUNCTION rara_hold_if_paused();

-- A held step wakes no worker: it is not leasable.
DROP TRIGGER rara_steps_notify_ready_update ON rara_steps;
CREATE TRIGGER rara_steps_notify_ready_update AFTER UPDATE OF status ON rara_steps
    FOR EACH ROW
    WHEN (new.status = 'ready' AND old.status IS DISTINCT FROM new.status
          AND new.available_at <> 'infinity')
    EXECUTE FUNCTION rara_notify_ready();
DROP TRIGGER rara_steps_notify_ready_insert ON rara_steps;
CREATE TRIGGER rara_steps_notify_ready_insert AFTER INSERT ON rara_steps
    FOR EACH ROW
    WHEN (new.status = 'ready' AND new.available_at <> 'infinity')
    EXECUTE FUNCTION rara_notify_ready();
