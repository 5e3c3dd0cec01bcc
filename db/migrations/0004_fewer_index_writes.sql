-- rara 0004: fewer index writes on the hot path (bench/run.py measures it).
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
-- visits every one of them (see step_lease_routed and docs/lease-protocol.md). The range
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
