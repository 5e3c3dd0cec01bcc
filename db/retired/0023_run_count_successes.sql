-- rara 0023: rara_run_count takes a batch's successes as an array of run ids beside its JSON
-- deltas (db/functions/runs.sql): rara_step_end_many built and then parsed a JSON object per
-- success (docs/performance.md, "Fixed cost per call"). The one-argument version goes; the
-- functions (repeatable) create the new one.
DROP FUNCTION IF EXISTS rara_run_count(jsonb);
