-- The lease protocol, as the worker's store (rara.worker.store) calls it: every statement an
-- attempt runs, from its lease to its one end, and the reaper that ends attempts whose worker
-- vanished. Each is a call of the function of db/functions/lease.sql that does the work and
-- checks the caller's right to it (the lease token; docs/least-privilege.md);
-- docs/lease-protocol.md tells the protocol.
-- Loaded by rara.pg.queries with every other file of this folder: one name space, each name
-- object first, then verb (`step_lease`, `run_cancel`); `_many` takes arrays.
-- aiosql suffixes: ^ one row, $ one value, ! no result; none: all rows. No literal percent
-- signs: statements go to psycopg's %-style placeholders.

-- name: step_lease
-- Up to :limit ready steps of the served (capability, executor) pairs, shared between
-- namespaces by weight, each lane (a pair's namespace) from its cursor: a pair appears once per
-- lane cursor (:after_namespaces names the lane), or once with NULLs; :except_namespaces'
-- lanes give nothing (NULL: none).
SELECT * FROM rara_step_lease(
    p_worker => :worker, p_capabilities => CAST(:capabilities AS text[]),
    p_executors => CAST(:executors AS text[]), p_after_ranks => CAST(:after_ranks AS integer[]),
    p_after_ats => CAST(:after_ats AS timestamptz[]), p_after_ids => CAST(:after_ids AS bigint[]),
    p_limit => :limit, p_lease_seconds => :lease_seconds,
    p_after_namespaces => CAST(:after_namespaces AS text[]),
    p_except_namespaces => CAST(:except_namespaces AS text[]));

-- name: step_heartbeat
-- The worker's row and every lease it still holds; the answer carries the cancel requests.
SELECT * FROM rara_step_heartbeat(
    p_worker => :worker, p_capabilities => CAST(:capabilities AS text[]),
    p_lease_seconds => :lease_seconds, p_step_ids => CAST(:step_ids AS bigint[]),
    p_tokens => CAST(:tokens AS uuid[]));

-- name: step_progress_many
-- The latest progress of many attempts; returns the steps still owned.
SELECT * FROM rara_step_progress_many(
    p_worker => :worker, p_step_ids => CAST(:step_ids AS bigint[]),
    p_tokens => CAST(:tokens AS uuid[]), p_seqs => CAST(:seqs AS integer[]),
    p_fractions => CAST(:fractions AS double precision[]),
    p_messages => CAST(:messages AS text[]), p_metrics => CAST(:metrics AS jsonb[]));

-- name: step_checkpoint$
-- True: written or already there; false: the lease is lost.
SELECT rara_step_checkpoint(
    p_worker => :worker, p_step_id => :step_id, p_token => CAST(:token AS uuid),
    p_seq => :seq, p_state => CAST(:state AS jsonb), p_digest => CAST(:digest AS text),
    p_size => CAST(:size AS bigint));

-- name: step_end_many
-- Many ends of one worker's attempts: :successes ({id, token, result, manifest} each) and
-- :others (failures and cancels: {id, token, outcome, error, retryable, jitter}), JSON arrays.
-- Returns (id, status) of the steps whose fence matched.
SELECT * FROM rara_step_end_many(
    p_worker => :worker, p_successes => CAST(:successes AS jsonb),
    p_others => CAST(:others AS jsonb));

-- name: step_release_many
-- Graceful shutdown: the leases given back.
SELECT * FROM rara_step_release_many(
    p_worker => :worker, p_step_ids => CAST(:step_ids AS bigint[]),
    p_tokens => CAST(:tokens AS uuid[]));

-- name: step_release_unheld
-- After a lease whose answer was lost: the leases in the worker's name it does not hold, given
-- back (their ids).
SELECT * FROM rara_step_release_unheld(p_worker => :worker,
                                       p_held => CAST(:held AS bigint[]));

-- name: step_reap_expired
-- Up to :limit expired leases recovered: (id, status) of each.
SELECT * FROM rara_step_reap_expired(p_worker => :worker, p_limit => :limit,
                                     p_jitter => :jitter);
