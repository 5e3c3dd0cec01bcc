-- rara 0028: a schedule that cannot be fired is refused, not retried (security issue "Trust
-- on the new surfaces", item 3; docs/schedules.md, "A schedule that cannot fire").
--
-- A schedule's cron and zone are checked by the database at apply now (db/functions/
-- schedules.sql), but a row stored before this release, or written by the owner, may still
-- hold one the firing cannot plan. Such a row made every firing pass fail, so no schedule of
-- any namespace fired. A pass now fires each schedule in a savepoint of its own; one that
-- cannot be planned is marked here (when and why) and skipped, and no pass takes it again
-- until it is applied again. `rara schedules list` and `show` say so.
--
-- The due index leaves refused rows out, as the firing's reads do. Needs no owner rights
-- beyond changing the table.

ALTER TABLE rara_schedules
    ADD COLUMN refused_reason text,
    ADD COLUMN refused_at     timestamptz,
    ADD CONSTRAINT rara_schedules_refused_both
        CHECK ((refused_reason IS NULL) = (refused_at IS NULL));

DROP INDEX rara_schedules_due;
CREATE INDEX rara_schedules_due ON rara_schedules (next_tick)
    WHERE NOT suspended AND refused_at IS NULL;
