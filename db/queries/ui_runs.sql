-- The run page's links between runs (rara.ui.run_links; docs/ui.md, "A run"): a resumed run
-- and the run it resumes, both ways. Read as the viewer: row-level security hides a run of
-- another namespace as it hides it everywhere.
-- Loaded by rara.pg.queries with every other file of this folder: one name space, each name
-- object first, then verb; aiosql suffixes: ^ one row, $ one value, ! no result; none: all
-- rows. No literal percent signs: statements go to psycopg's %-style placeholders.

-- name: ui_run_resumes_get^
-- The run :run_id resumes (null: it was started, not resumed), the step it re-ran from (null:
-- a resume from failure), and whether that run is still there (`rara runs prune`).
SELECT r.resumes, r.rerun_from,
       EXISTS (SELECT FROM rara_runs o WHERE o.id = r.resumes) AS resumes_kept
FROM rara_runs r WHERE r.id = :run_id;

-- name: ui_run_resumed_by_list
-- The runs that resumed run :run_id, oldest first, with their status and the step each re-ran
-- from: the partial index rara_runs_resumes.
SELECT r.id, r.status::text AS status, r.rerun_from
FROM rara_runs r WHERE r.resumes = :run_id
ORDER BY r.id
LIMIT :limit;
