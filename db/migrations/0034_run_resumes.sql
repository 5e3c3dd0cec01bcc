-- rara 0034: a resumed run names the run it resumes (rara_runs.resumes), and a re-run from a
-- step names that step (rara_runs.rerun_from); docs/step-cache.md, "Resume"; docs/ui.md.
--
-- The run page links a failed run forward to the runs that resumed it ("resumed by run M"):
-- read by the resumed run's own column, under the runs' namespace policies, through the
-- partial index (only resumed runs are in it). Until now a resumed run was known only by
-- its reused steps' reused_from, which a resume that reused nothing lacks. Existing resumed
-- runs are filled in from those steps: one pass over the reused steps (a reused step is
-- rare beside the steps that ran). rara_run_resume takes the step to re-run from as a third
-- argument: the two-argument function is dropped (the function file makes the new one).
-- Needs no owner's right beyond the tables'.
ALTER TABLE rara_runs ADD COLUMN resumes bigint;      -- the run it resumes (NULL: a start)
ALTER TABLE rara_runs ADD COLUMN rerun_from text;     -- the step it re-ran from (NULL: all failed)
CREATE INDEX rara_runs_resumes ON rara_runs (resumes) WHERE resumes IS NOT NULL;

UPDATE rara_runs r SET resumes = s.old_run
FROM (SELECT DISTINCT ON (run_id) run_id, (reused_from ->> 'run')::bigint AS old_run
      FROM rara_steps
      WHERE reused_from ->> 'via' = 'resume'
      ORDER BY run_id) s
WHERE r.id = s.run_id;

DROP FUNCTION IF EXISTS rara_run_resume(bigint, text);
