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

-- name: namespace_share_set!
-- :weight null: back to 1.
SELECT rara_namespace_share_set(p_namespace => :namespace,
                                p_weight => CAST(:weight AS integer));

-- name: namespace_quota_set!
-- :capability '*': all of the namespace's; :max_running null: no quota.
SELECT rara_namespace_quota_set(p_namespace => :namespace, p_capability => :capability,
                                p_max_running => CAST(:max_running AS integer));

-- name: namespace_share_list
-- Each weight set (every other namespace's is 1), with its namespace's attempts running now.
SELECT w.namespace, w.weight, w.updated_at,
       (SELECT count(*) FROM rara_steps s
        WHERE s.lease_expires_at IS NOT NULL AND s.status = 'running'
          AND s.namespace = w.namespace)::integer AS running
FROM rara_namespace_shares w ORDER BY w.namespace;

-- name: namespace_quota_list
-- Each quota with the attempts it counts running now.
SELECT q.namespace, q.capability, q.max_running, q.updated_at,
       (SELECT count(*) FROM rara_steps s
        WHERE s.lease_expires_at IS NOT NULL AND s.status = 'running'
          AND s.namespace = q.namespace
          AND (q.capability = '*' OR s.capability = q.capability))::integer AS running
FROM rara_namespace_quotas q ORDER BY q.namespace, q.capability;
