-- rara 0004: the hot path (issue 9; bench/run.py measures it). Fewer index writes per step,
-- a lease index a cursor can start in, a reaper index no fenced write can be planned onto, no
-- JIT, no per-attempt foreign key check, run notifications for ends only.
--
-- A step is written twice per attempt (lease, end) and its run once or twice; every one of
-- those updates changes `status`, so none of them can be HOT while an index mentions `status`,
-- and each non-HOT update inserts an entry into every index of the table.
--
-- rara_steps_run duplicated the leading column of the (run_id, key) unique index, which
-- already serves every look-up by run: two index inserts per step saved.
DROP INDEX rara_steps_run;

-- rara_runs_active (status in its predicate) made every run status change non-HOT. Nothing
-- needs it: listing runs by status walks the primary key backwards under a LIMIT. Without it
-- the run's updates (started, then finished) stay on their page, which fillfactor leaves room
-- for (applies to pages written from now on).
DROP INDEX rara_runs_active;
ALTER TABLE rara_runs SET (fillfactor = 80);

-- The lease index, keyed so that "after the last step this worker leased" is one row
-- comparison, (-priority, available_at, id) > cursor, which the index can start its range
-- at. The lease resumes there instead of walking again over the entries of the steps it
-- already leased: while an old snapshot holds the xmin horizon back, those entries stay in
-- the index as dead ones that no vacuum may remove, and a scan from the start of the range
-- visits every one of them (see the lease statement and docs/lease-protocol.md). The range
-- check makes -priority safe from overflow (the definition model allows -1000..1000).
ALTER TABLE rara_steps ADD CONSTRAINT rara_steps_priority_range
    CHECK (priority BETWEEN -1000 AND 1000);
DROP INDEX rara_steps_ready;
CREATE INDEX rara_steps_ready ON rara_steps (capability, (-priority), available_at, id)
    WHERE status = 'ready';

-- The reaper's index, with a predicate no fenced write implies. With `status = 'running'` as
-- its predicate, the planner matched it to the fenced batch statements (completion, heartbeat:
-- `... AND s.status = 'running'`) and scanned every running step for the ids given instead of
-- probing the primary key — and while a held xmin horizon keeps the dead entries of finished
-- attempts in it, that scan grew to thousands of pages per completion batch (measured: 8 ms
-- of a 10 ms batch). `lease_expires_at IS NOT NULL` holds for exactly the same rows (CHECK
-- rara_steps_lease_iff_running) and is implied by the reaper's `lease_expires_at < now()`.
DROP INDEX rara_steps_running_expiry;
CREATE INDEX rara_steps_running_expiry ON rara_steps (lease_expires_at)
    WHERE lease_expires_at IS NOT NULL;

-- No JIT, and PostgreSQL's own plan choice again instead of 0003's forced custom plans.
-- 0003 forced custom plans after a generic plan of the batched progress write measured 8x
-- slower. The time was JIT compilation, not the plan: a generic plan's row estimates (10% of
-- the table for a LIMIT it cannot see) cross jit_above_cost, and compiling the lease's generic
-- plan took 53 of its 58 ms at a million ready steps; the plan itself ran in 1.0 ms against
-- 2.0 ms custom (planned each time). Without JIT the progress write of 100 attempts does
-- 19.0k events/s generic against 13.9k custom. Every rara statement is a short OLTP one: JIT
-- cannot pay for itself here. The worker's lease and completion connections ask for generic
-- plans (rara.worker.store); other sessions get `auto`. Per database, as 0003.
DO $$
BEGIN
    EXECUTE format('ALTER DATABASE %I SET jit = off', current_database());
    EXECUTE format('ALTER DATABASE %I RESET plan_cache_mode', current_database());
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'rara: cannot set jit on %; set jit = off for rara''s roles instead',
        current_database();
END $$;

-- The attempt history without a foreign key check on every lease: the only writer of
-- rara_attempts is the lease statement, inserting for the step rows it has just updated, so
-- the check (a key-share lock of that row for each attempt: 1.0 of 6.9 ms leasing 100 steps)
-- could never fail. What the key also did — attempts go when their step is deleted — a
-- statement-level trigger keeps, at no cost to any write but a DELETE of steps.
ALTER TABLE rara_attempts DROP CONSTRAINT rara_attempts_step_id_fkey;

-- (SECURITY DEFINER: like the cascade it replaces, it is not limited by the deleter's grants.)
CREATE FUNCTION rara_delete_attempts_of_deleted_steps() RETURNS trigger LANGUAGE plpgsql
    SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM rara_attempts a USING gone WHERE a.step_id = gone.id;
    RETURN NULL;
END $$;

CREATE TRIGGER rara_steps_delete_attempts AFTER DELETE ON rara_steps
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION rara_delete_attempts_of_deleted_steps();

-- Run notifications for ends only. Who listens on rara_run waits for a run to end (the client's
-- wait, `rara runs watch`, which also polls what is running every half second); a `running`
-- notification per run woke them for nothing and doubled the notification traffic of a drain
-- (every listening backend reads every notification of its database).
DROP TRIGGER rara_runs_notify ON rara_runs;
CREATE TRIGGER rara_runs_notify AFTER UPDATE OF status ON rara_runs
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status
                       AND NEW.status IN ('succeeded', 'failed', 'cancelled'))
    EXECUTE FUNCTION rara_notify_run();

-- Starting a run checked its definition version's foreign key: a key-share lock of the
-- version row per start (0.12 of 0.74 ms of run_start; and under many concurrent starts of one
-- definition, a MultiXact per start on that one row). A version can never go away — the
-- triggers of 0001 refuse UPDATE, DELETE and TRUNCATE of rara_definition_versions — and
-- run_start inserts the id it has just resolved, so the check could never fail.
ALTER TABLE rara_runs DROP CONSTRAINT rara_runs_definition_version_id_fkey;
