-- The lease protocol: every statement an attempt runs, from its lease to its one end, and the
-- reaper that ends attempts whose worker vanished. Every write after the lease is fenced by
-- (id, leased_by, lease_token, status = 'running'): zero rows means the lease is lost and the
-- caller writes nothing more for the attempt. Run by the worker's store (rara.worker.store),
-- the one home of these writes; docs/lease-protocol.md tells the protocol.
-- Loaded by rara.pg.queries with every other file of this folder: one name space, each name
-- object first, then verb (`step_lease`, `run_cancel_request`); `_many` takes arrays.
-- aiosql suffixes: ^ one row, $ one value, ! no result; none: all rows. No literal percent
-- signs: statements go to psycopg's %-style placeholders.

-- name: step_lease
-- The lease, routed: the worker serves (capability, executor kind) pairs — a worker without a
-- gRPC executor must not lease `executor: grpc` steps of a capability its registry also has.
-- Per pair an optional cursor (:after_ranks, :after_ats, :after_ids; NULL: from the start) —
-- the lease key (-priority, available_at, id) of the last step the worker leased of that pair:
-- the scan starts after it, so the entries of steps already leased are not walked over again
-- (dead ones that a held xmin horizon keeps in the index). What it skips — a higher priority
-- or an earlier available_at that arrived behind the cursor — the worker's periodic scan from
-- the start finds (rara.worker.lease_cursor).
WITH candidates AS (
    -- One index range scan per served pair (rara_steps_ready is ordered by capability then
    -- lease order; the executor kind is a filter on the same rows), SKIP LOCKED so concurrent
    -- workers never wait on each other, then the global lease order across pairs.
    SELECT c.id
    FROM unnest(CAST(:capabilities AS text[]), CAST(:executors AS text[]),
                CAST(:after_ranks AS integer[]), CAST(:after_ats AS timestamptz[]),
                CAST(:after_ids AS bigint[]))
        AS cap(name, executor, after_rank, after_at, after_id)
    CROSS JOIN LATERAL (
        SELECT id, -priority AS rank, available_at FROM rara_steps
        WHERE status = 'ready' AND capability = cap.name AND executor = cap.executor
          AND available_at <= now()
          -- the index range starts here (-1001: below every rank, see migration 0004)
          AND (-priority, available_at, id) > (coalesce(cap.after_rank, -1001),
                                               coalesce(cap.after_at, '-infinity'),
                                               coalesce(cap.after_id, 0))
        ORDER BY -priority, available_at, id
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    ) AS c
    ORDER BY c.rank, c.available_at, c.id
    LIMIT :limit
), leased AS (
    -- The attempt starts: a fresh token fences every later write of this attempt.
    UPDATE rara_steps s SET
        status = 'running', attempt = s.attempt + 1, leased_by = :worker,
        lease_token = gen_random_uuid(),
        lease_expires_at = now() + make_interval(secs => :lease_seconds),
        heartbeat_at = now(), started_at = coalesce(s.started_at, now()),
        cancel_requested = false
    -- (= ANY (ARRAY(…)) and the scalar subqueries below: primary key probes, whatever the
    -- planner guesses of the number of rows leased)
    WHERE s.id = ANY (ARRAY(SELECT id FROM candidates))
    RETURNING s.id, s.run_id, s.key, s.capability, s.executor, s.payload, s.attempt,
              s.max_attempts, s.lease_token, s.lease_expires_at, s.timeout_ms,
              s.heartbeat_timeout_ms, s.depends_on, -s.priority AS rank, s.available_at
), history AS (
    -- Ownership history, read by the checker that proves no two owners overlapped.
    INSERT INTO rara_attempts (step_id, attempt, run_id, worker, lease_token)
    SELECT id, attempt, run_id, :worker, lease_token FROM leased
), started_runs AS (
    UPDATE rara_runs SET status = 'running', started_at = now()
    WHERE id = ANY (ARRAY(SELECT run_id FROM leased)) AND status = 'pending'
)
SELECT l.id, l.run_id, l.key, l.capability, l.executor, l.payload, l.attempt, l.max_attempts,
       l.lease_token, l.lease_expires_at, l.timeout_ms, l.heartbeat_timeout_ms, l.depends_on,
       (SELECT r.input FROM rara_runs r WHERE r.id = l.run_id) AS run_input, now() AS leased_at,
       -- What the attempt starts from, folded in so it starts without another round trip.
       -- Each is a subquery evaluated only when it can find something (a first attempt has no
       -- checkpoint, a step without dependencies no inputs), so the common case costs nothing.
       CASE WHEN l.attempt > 1 THEN (
           -- The latest checkpoint of an earlier attempt: what a retry resumes from.
           SELECT jsonb_build_object('attempt', c.attempt, 'seq', c.seq, 'state', c.state,
                                     'digest', c.digest, 'size', a.size)
           FROM rara_checkpoints c LEFT JOIN rara_artifacts a USING (digest)
           WHERE c.step_id = l.id AND c.attempt < l.attempt
           ORDER BY c.attempt DESC, c.seq DESC LIMIT 1) END AS checkpoint,
       CASE WHEN cardinality(l.depends_on) > 0 THEN (
           -- Upstream artifacts: the manifests of the succeeded dependencies. The snapshot sees
           -- them: a step is ready only once the transaction that finished its last dependency
           -- (and wrote its manifest) committed.
           SELECT jsonb_agg(jsonb_build_object('key', u.key, 'name', m.name, 'digest', m.digest,
                                               'size', m.size, 'media_type', m.media_type)
                            ORDER BY u.key, m.name)
           FROM rara_steps u
           JOIN rara_step_artifacts m ON m.step_id = u.id AND m.attempt = u.attempt
           WHERE u.run_id = l.run_id AND u.key = ANY (l.depends_on) AND u.status = 'succeeded')
       END AS inputs,
       l.rank, l.available_at  -- the worker's next cursor
FROM leased l;

-- name: step_heartbeat
-- The worker's heartbeat in one statement: its own row (what it serves, that it is alive) and
-- every lease it still holds extended (empty arrays when it runs nothing), fenced per lease.
-- The answer carries the cancel requests; attempts missing from it have lost their lease.
WITH me AS (
    UPDATE rara_workers SET heartbeat_at = now(), capabilities = :capabilities
    WHERE id = :worker
)
UPDATE rara_steps s SET
    lease_expires_at = now() + make_interval(secs => :lease_seconds), heartbeat_at = now()
FROM unnest(CAST(:step_ids AS bigint[]), CAST(:tokens AS uuid[])) AS h(id, token)
WHERE s.id = h.id AND s.lease_token = h.token AND s.leased_by = :worker
  AND s.status = 'running'
RETURNING s.id, s.cancel_requested;

-- name: step_progress_many
-- The latest progress of many attempts in one statement, fenced per attempt. FOR SHARE orders
-- the write after a concurrent reap or cancel of the step, so no event lands for an attempt
-- that no longer owns it. Returns the steps still owned. A replayed seq (its first write
-- failed in flight) is one row holding the newest state: no gap, no duplicate.
WITH p AS (
    SELECT * FROM unnest(CAST(:step_ids AS bigint[]), CAST(:tokens AS uuid[]),
                         CAST(:seqs AS integer[]), CAST(:fractions AS double precision[]),
                         CAST(:messages AS text[]), CAST(:metrics AS jsonb[]))
        AS p(step_id, token, seq, fraction, message, metrics)
), owned AS (
    SELECT p.*, s.attempt FROM p JOIN rara_steps s
        ON s.id = p.step_id AND s.lease_token = p.token AND s.leased_by = :worker
       AND s.status = 'running'
    FOR SHARE OF s
), written AS (
    INSERT INTO rara_events (step_id, attempt, seq, kind, fraction, message, metrics)
    SELECT step_id, attempt, seq, 'progress', fraction, message, metrics FROM owned
    ON CONFLICT (step_id, attempt, seq) DO UPDATE SET
        fraction = EXCLUDED.fraction, message = EXCLUDED.message, metrics = EXCLUDED.metrics
)
SELECT step_id FROM owned;

-- name: step_checkpoint$
-- A checkpoint, fenced (true: written or already there; false: the lease is lost). The blob,
-- if any, is registered in the same statement so the foreign key holds.
WITH owned AS (
    SELECT id, attempt FROM rara_steps
    WHERE id = :step_id AND leased_by = :worker AND lease_token = :token AND status = 'running'
    FOR SHARE
), blob AS (
    INSERT INTO rara_artifacts (digest, size)
    SELECT CAST(:digest AS text), CAST(:size AS bigint) FROM owned
    WHERE CAST(:digest AS text) IS NOT NULL
    ON CONFLICT (digest) DO NOTHING
), written AS (
    INSERT INTO rara_checkpoints (step_id, attempt, seq, state, digest)
    SELECT id, attempt, :seq, :state, CAST(:digest AS text) FROM owned
    ON CONFLICT DO NOTHING
)
SELECT count(*) = 1 FROM owned;

-- name: step_complete_many
-- Many successes in one statement (the worker's completion batcher), each fenced on its own:
-- the steps returned succeeded; any other step given has lost its lease and nothing was written
-- for it. It closes the attempts, unblocks dependants, records each step's artifact manifest
-- (an absent or empty `manifest`: none) and counts the successes in their runs' step counts,
-- ending the runs whose steps are then all terminal (as run_count_many, which tells why; with
-- :others, the deltas of the rest of the transaction — failures and cancels written before
-- it — so that the transaction locks its runs once, in id order, last). Nothing in it grows
-- with the size of a run: dependants are found by the finished step's `dependants`, the run
-- is aggregated by its counters.
WITH given AS MATERIALIZED (
    -- One JSON array for the whole batch ({id, token, result, manifest} each): encoded by one
    -- json.dumps in the worker, where four typed arrays cost a Python dumper call per element.
    SELECT * FROM jsonb_to_recordset(CAST(:endings AS jsonb))
        AS g(id bigint, token uuid, result jsonb, manifest jsonb)
), done AS (
    -- The fence, per step: a row whose owner or token changed is simply not matched.
    UPDATE rara_steps s SET
        status = 'succeeded', result = g.result, finished_at = now(), error = NULL,
        leased_by = NULL, lease_token = NULL, lease_expires_at = NULL
    FROM given g
    -- (= ANY as well: primary key look-ups, not a scan of every running step of the worker)
    WHERE s.id = ANY (ARRAY(SELECT id FROM given)) AND s.id = g.id
      AND s.leased_by = :worker AND s.lease_token = g.token AND s.status = 'running'
    RETURNING s.id, s.run_id, s.attempt, s.dependants
), closed AS (
    UPDATE rara_attempts a SET outcome = 'succeeded', ended_at = now(), ended_by = :worker
    FROM done WHERE a.step_id = done.id AND a.attempt = done.attempt
), unblocked AS (
    -- A dependant several of whose dependencies finish in this batch is updated once, by
    -- their count (an UPDATE applies one joined row per target row). A concurrent change of
    -- the dependant is waited for and re-read (pending_deps of the newest version). Found by
    -- (run_id, key) probes of the finished steps' dependants, not by a walk over their runs.
    UPDATE rara_steps s SET
        pending_deps = s.pending_deps - d.n,
        status = CASE WHEN s.pending_deps = d.n THEN 'ready' ELSE 'blocked' END::rara_step_status,
        available_at = now()
    FROM (SELECT b.id, count(*)::integer AS n
          FROM done CROSS JOIN LATERAL unnest(done.dependants) AS dependant(key)
          JOIN rara_steps b ON b.run_id = done.run_id AND b.key = dependant.key
           AND b.status = 'blocked'
          GROUP BY b.id) AS d
    WHERE s.id = d.id AND s.status = 'blocked'
    RETURNING s.id
), deltas AS MATERIALIZED (
    -- Per run: the successes of this statement and the given deltas of the transaction's rest.
    SELECT run_id, sum(succeeded)::integer AS succeeded, sum(failed)::integer AS failed,
           sum(cancelled)::integer AS cancelled
    FROM (SELECT run_id, 1 AS succeeded, 0 AS failed, 0 AS cancelled FROM done
          UNION ALL
          SELECT * FROM jsonb_to_recordset(CAST(:others AS jsonb))
              AS o(run_id bigint, succeeded integer, failed integer, cancelled integer)) AS x
    GROUP BY run_id
), locked AS (
    -- The runs, in id order, after every step row this statement writes: the dependants'
    -- (the count below is evaluated before any run row is locked) and the finished ones
    -- (deltas read all of done). See run_count_many.
    SELECT id FROM rara_runs
    WHERE id = ANY (ARRAY(SELECT run_id FROM deltas)) AND (SELECT count(*) FROM unblocked) >= 0
    ORDER BY id
    FOR NO KEY UPDATE
), counted AS (
    -- The parent aggregation by counters, as run_count_many (the one rule: rara_run_end_status).
    UPDATE rara_runs r SET
        steps_succeeded = r.steps_succeeded + d.succeeded,
        steps_failed = r.steps_failed + d.failed,
        steps_cancelled = r.steps_cancelled + d.cancelled,
        status = CASE WHEN r.status IN ('pending', 'running') THEN coalesce(rara_run_end_status(
            r.cancel_requested, r.steps_total, r.steps_succeeded + d.succeeded,
            r.steps_failed + d.failed, r.steps_cancelled + d.cancelled), r.status)
            ELSE r.status END,
        finished_at = CASE WHEN r.status IN ('pending', 'running') AND rara_run_end_status(
            r.cancel_requested, r.steps_total, r.steps_succeeded + d.succeeded,
            r.steps_failed + d.failed, r.steps_cancelled + d.cancelled) IS NOT NULL
            THEN now() ELSE r.finished_at END
    FROM deltas d
    WHERE r.id = d.run_id AND r.id = ANY (ARRAY(SELECT id FROM locked))
), manifest AS (
    -- Only the successes that name artifacts (most name none): nothing joined for the rest.
    SELECT done.id, done.attempt, m.name, m.digest, m.size, m.media_type
    FROM (SELECT id, manifest FROM given WHERE manifest IS NOT NULL) AS g
    JOIN done ON done.id = g.id
    CROSS JOIN LATERAL jsonb_to_recordset(g.manifest)
        AS m(name text, digest text, size bigint, media_type text)
), blobs AS (
    -- Blobs are known once; the manifest rows below reference them in the same statement.
    INSERT INTO rara_artifacts (digest, size)
    SELECT DISTINCT digest, size FROM manifest
    ON CONFLICT (digest) DO NOTHING
), recorded AS (
    INSERT INTO rara_step_artifacts (step_id, attempt, name, digest, size, media_type)
    SELECT id, attempt, name, digest, size, media_type FROM manifest
    ON CONFLICT (step_id, attempt, name) DO NOTHING
)
SELECT id FROM done;

-- name: step_fail^
-- Failure, fenced: back to ready after the backoff while attempts remain and the error is
-- retryable, otherwise failed for good. The attempt records :outcome (failed or timed_out).
-- The caller counts a failure for good in its run (step_complete_many's :others).
WITH failing AS (
    SELECT id, attempt, max_attempts,
           (:retryable AND attempt - releases < max_attempts) AS retry,
           rara_retry_delay(retry_initial_ms, retry_max_ms, retry_coefficient,
                            attempt - releases, :jitter) AS delay
    FROM rara_steps
    WHERE id = :step_id AND leased_by = :worker AND lease_token = :token AND status = 'running'
    FOR UPDATE
), updated AS (
    UPDATE rara_steps s SET
        status = CASE WHEN f.retry THEN 'ready' ELSE 'failed' END::rara_step_status,
        available_at = CASE WHEN f.retry THEN now() + f.delay ELSE s.available_at END,
        finished_at = CASE WHEN f.retry THEN NULL ELSE now() END,
        error = :error, leased_by = NULL, lease_token = NULL, lease_expires_at = NULL
    FROM failing f WHERE s.id = f.id
    RETURNING s.id, s.run_id, s.key, s.status::text AS status, s.available_at
), closed AS (
    UPDATE rara_attempts a SET outcome = CAST(:outcome AS rara_attempt_outcome),
           ended_at = now(), ended_by = :worker, error = :error
    FROM updated u WHERE a.step_id = u.id AND a.attempt = (SELECT attempt FROM failing)
)
SELECT id, run_id, key, status FROM updated;

-- name: step_cancel^
-- A running attempt stopped because cancel was asked, fenced.
WITH done AS (
    UPDATE rara_steps SET status = 'cancelled', finished_at = now(),
        error = jsonb_build_object('code', 'CANCELLED', 'message', 'cancelled on request'),
        leased_by = NULL, lease_token = NULL, lease_expires_at = NULL
    WHERE id = :step_id AND leased_by = :worker AND lease_token = :token AND status = 'running'
    RETURNING id, run_id, key, attempt
), closed AS (
    UPDATE rara_attempts a SET outcome = 'cancelled', ended_at = now(), ended_by = :worker
    FROM done WHERE a.step_id = done.id AND a.attempt = done.attempt
)
SELECT id, run_id, key, 'cancelled' AS status FROM done;

-- name: step_release_many
-- Graceful shutdown: give leases back so another worker takes them at once. A released
-- attempt is not a failure: `releases` keeps it out of the retry budget.
WITH released AS (
    UPDATE rara_steps s SET status = 'ready', available_at = now(), releases = s.releases + 1,
        leased_by = NULL, lease_token = NULL, lease_expires_at = NULL
    FROM unnest(CAST(:step_ids AS bigint[]), CAST(:tokens AS uuid[])) AS h(id, token)
    WHERE s.id = h.id AND s.lease_token = h.token AND s.leased_by = :worker
      AND s.status = 'running'
    RETURNING s.id, s.attempt
), closed AS (
    UPDATE rara_attempts a SET outcome = 'released', ended_at = now(), ended_by = :worker
    FROM released r WHERE a.step_id = r.id AND a.attempt = r.attempt
)
SELECT id FROM released;

-- name: step_reap_expired
-- Recover expired leases, in bounded batches, safely from every worker at once: SKIP LOCKED
-- picks rows nobody else is touching, and the UPDATE re-checks expiry itself, so a step that
-- completed (or was heart-beaten) since the scan is never overwritten.
WITH expired AS (
    SELECT id FROM rara_steps
    WHERE status = 'running' AND lease_expires_at < now()
    ORDER BY lease_expires_at LIMIT :limit
    FOR UPDATE SKIP LOCKED
), updated AS (
    UPDATE rara_steps s SET
        status = CASE WHEN s.attempt - s.releases < s.max_attempts THEN 'ready'
                      ELSE 'failed' END::rara_step_status,
        available_at = CASE WHEN s.attempt - s.releases < s.max_attempts
            THEN now() + rara_retry_delay(s.retry_initial_ms, s.retry_max_ms,
                                          s.retry_coefficient, s.attempt - s.releases, :jitter)
            ELSE s.available_at END,
        finished_at = CASE WHEN s.attempt - s.releases < s.max_attempts THEN NULL ELSE now() END,
        error = jsonb_build_object('code', 'LEASE_EXPIRED', 'retryable', true,
            'message', 'lease of ' || s.leased_by || ' expired at ' || s.lease_expires_at),
        leased_by = NULL, lease_token = NULL, lease_expires_at = NULL
    FROM expired e
    WHERE s.id = e.id AND s.status = 'running' AND s.lease_expires_at < now()
    RETURNING s.id, s.run_id, s.key, s.attempt, s.status::text AS status, s.error
), closed AS (
    UPDATE rara_attempts a SET outcome = 'lease_expired', ended_at = now(),
        ended_by = 'reaper:' || :worker, error = u.error
    FROM updated u WHERE a.step_id = u.id AND a.attempt = u.attempt AND a.outcome = 'running'
)
SELECT id, run_id, key, status FROM updated;
