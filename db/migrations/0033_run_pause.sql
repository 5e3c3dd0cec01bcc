-- rara 0033: pausing a run (rara_run_set_paused; docs/state-machines.md, "Paused runs").
--
-- A paused run keeps its status (its running steps go on and end as usual); what it holds are
-- its steps that could be leased: a held step stays `ready` with available_at 'infinity', which
-- the lease's `available_at <= now()` never takes, and its own available_at kept beside it to
-- be put back on resume (its place in the queue). So the lease is unchanged, and costs the
-- same while no run is paused. Every path that makes a step ready changes its status, which
-- passes the step's transition trigger (rara_check_step_transition, db/functions/states.sql):
-- that function holds the step when its own run_paused is set — which the pause sets on every
-- open step of the run (and a map's child takes from its map) — so no step reads its run, and
-- no new trigger runs at the lease (a second BEFORE trigger on the status, even one whose
-- condition is false, measured ~3 µs per leased step). Needs no owner's right beyond the
-- tables'; on a large rara_steps the ADD COLUMNs are catalog changes only (no default, or a
-- constant one), the triggers' re-creation a short lock.
ALTER TABLE rara_runs ADD COLUMN paused_at timestamptz;  -- set while the run is paused
-- A held step's own available_at, while available_at is 'infinity' (NULL: not held).
ALTER TABLE rara_steps ADD COLUMN held_available_at timestamptz;
-- The step's run is paused: made ready, it is held (set and cleared with the run's paused_at,
-- on its open steps; a map's child inserted meanwhile takes its map's).
ALTER TABLE rara_steps ADD COLUMN run_paused boolean NOT NULL DEFAULT false;

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
