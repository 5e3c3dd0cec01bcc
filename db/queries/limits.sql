-- Concurrency limits per capability (rara_capability_limits, migration 0009): set through
-- db/functions/limits.sql, read by `rara limits`. Typed: rara.pg.limits.
-- Loaded by rara.pg.queries with every other file of this folder: one name space, each name
-- object first, then verb (`step_lease`, `run_cancel`); `_many` takes arrays.
-- aiosql suffixes: ^ one row, $ one value, ! no result; none: all rows. No literal percent
-- signs: statements go to psycopg's %-style placeholders.

-- name: capability_limit_set!
-- :max_running null: no limit.
SELECT rara_capability_limit_set(p_capability => :capability,
                                 p_max_running => CAST(:max_running AS integer));

-- name: capability_limit_list
-- Each limit with the attempts of its capability running now.
SELECT l.capability, l.max_running, l.updated_at,
       (SELECT count(*) FROM rara_steps s
        WHERE s.status = 'running' AND s.capability = l.capability)::integer AS running
FROM rara_capability_limits l ORDER BY l.capability;
