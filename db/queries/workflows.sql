-- Every statement the rara runtime runs, each under a name (loaded by aiosql, see
-- rara/pg/queries.py). Named object first, then verb: `step_lease`, `run_cancel`.
-- Suffixes (aiosql): ^ one row, $ one value, ! no result; none: all rows.
-- No literal percent signs: aiosql passes statements to psycopg's %-style placeholders.
-- Every write of an attempt after its lease is fenced by (id, leased_by, lease_token,
-- status = 'running'): zero rows means the lease is lost and the caller must stop.

-- =============================================================================================
-- Definitions

-- name: definition_upsert_name!
INSERT INTO rara_definitions (name) VALUES (:name)
ON CONFLICT (name) DO UPDATE SET retired_at = NULL;

-- name: definition_lock$
-- Serialises version numbering per name (released at commit).
SELECT pg_advisory_xact_lock(hashtext('rara_definition:' || :name)) IS NULL;

-- name: definition_version_by_digest^
SELECT id, name, version, digest, created_at FROM rara_definition_versions
WHERE name = :name AND digest = :digest;

-- name: definition_version_insert^
INSERT INTO rara_definition_versions (name, version, digest, spec)
SELECT :name, coalesce(max(version), 0) + 1, :digest, :spec
FROM rara_definition_versions WHERE name = :name
RETURNING id, name, version, digest, created_at;

-- name: definition_version_get^
-- The given version, or the latest when :version is null.
SELECT v.id, v.name, v.version, v.digest, v.spec, v.created_at, d.retired_at
FROM rara_definition_versions v JOIN rara_definitions d USING (name)
WHERE v.name = :name AND (CAST(:version AS integer) IS NULL OR v.version = :version)
ORDER BY v.version DESC LIMIT 1;

-- name: definition_list
SELECT d.name, max(v.version) AS latest_version, count(*) AS versions,
       (array_agg(v.digest ORDER BY v.version DESC))[1] AS digest, d.retired_at
FROM rara_definitions d JOIN rara_definition_versions v USING (name)
GROUP BY d.name, d.retired_at ORDER BY d.name;

-- name: definition_retire$
UPDATE rara_definitions SET retired_at = coalesce(retired_at, now()) WHERE name = :name
RETURNING name;

-- =============================================================================================
-- Runs

-- name: run_start^
-- A run and its steps in one round trip (rara.runs.start_run). Resolves the version as
-- definition_version_get does (:version, or the latest when null) and inserts only when that
-- version's digest is :digest, the caller's cached digest whose step rows :steps are (built
-- by rara.runs, one element per step), and nothing refuses the start: a retired definition
-- without an explicit :version, or with :check_capabilities a step capability that no live
-- worker serves (heartbeat within :alive_seconds, as capabilities_served). The spec comes
-- back only when the digest differs, so a stale or empty cache costs one more call and no
-- extra fetch. No row: no such definition. run_id is null when nothing was inserted;
-- ON CONFLICT makes racing clients with one idempotency key create one run: the loser waits
-- for the winner's commit, inserts nothing, and reads the winner's row with run_by_key.
WITH resolved AS (
    SELECT v.id, v.digest, v.spec, d.retired_at,
           coalesce(v.digest = CAST(:digest AS text), false) AS matched
    FROM rara_definition_versions v JOIN rara_definitions d USING (name)
    WHERE v.name = :name AND (CAST(:version AS integer) IS NULL OR v.version = :version)
    ORDER BY v.version DESC LIMIT 1
), step_rows AS (
    SELECT s.* FROM resolved, jsonb_to_recordset(CAST(:steps AS jsonb)) AS s(
        key text, depends_on text[], capability text, executor text, priority integer,
        payload jsonb, max_attempts integer, retry_initial_ms integer, retry_max_ms integer,
        retry_coefficient double precision, timeout_ms integer, heartbeat_timeout_ms integer)
    WHERE resolved.matched
), missing AS (
    -- One row always (an aggregate): null when nothing is missing or nothing was checked.
    SELECT array_agg(DISTINCT s.capability ORDER BY s.capability) AS capabilities
    FROM step_rows s
    WHERE CAST(:check_capabilities AS boolean) AND NOT EXISTS (
        SELECT FROM rara_workers w
        WHERE s.capability = ANY (w.capabilities) AND w.stopped_at IS NULL
          AND w.heartbeat_at > now() - make_interval(secs => :alive_seconds))
), run AS (
    INSERT INTO rara_runs (definition_version_id, input, idempotency_key)
    SELECT resolved.id, CAST(:input AS jsonb), CAST(:idempotency_key AS text)
    FROM resolved, missing
    WHERE resolved.matched AND missing.capabilities IS NULL
      AND (resolved.retired_at IS NULL OR CAST(:version AS integer) IS NOT NULL)
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING id
), steps AS (
    INSERT INTO rara_steps (run_id, key, depends_on, pending_deps, capability, executor,
                            priority, payload, max_attempts, retry_initial_ms, retry_max_ms,
                            retry_coefficient, timeout_ms, heartbeat_timeout_ms, status)
    SELECT run.id, s.key, s.depends_on, cardinality(s.depends_on), s.capability, s.executor,
           s.priority, s.payload, s.max_attempts, s.retry_initial_ms, s.retry_max_ms,
           s.retry_coefficient, s.timeout_ms, s.heartbeat_timeout_ms,
           CASE WHEN cardinality(s.depends_on) = 0 THEN 'ready' ELSE 'blocked' END::rara_step_status
    FROM run, step_rows s
)
SELECT resolved.id, resolved.digest, resolved.retired_at,
       CASE WHEN resolved.matched THEN NULL ELSE resolved.spec END AS spec,
       missing.capabilities AS missing, (SELECT id FROM run) AS run_id
FROM resolved, missing;

-- name: run_by_key$
SELECT id FROM rara_runs WHERE idempotency_key = :idempotency_key;

-- name: run_get^
SELECT r.id, r.status, r.input, r.idempotency_key, r.cancel_requested, r.error, r.created_at,
       r.started_at, r.finished_at, v.name AS definition, v.version, v.digest
FROM rara_runs r JOIN rara_definition_versions v ON v.id = r.definition_version_id
WHERE r.id = :run_id;

-- name: run_list
SELECT r.id, r.status, v.name AS definition, v.version, r.created_at, r.finished_at,
       (SELECT count(*) FROM rara_steps s WHERE s.run_id = r.id AND s.status = 'succeeded') AS done,
       (SELECT count(*) FROM rara_steps s WHERE s.run_id = r.id) AS total
FROM rara_runs r JOIN rara_definition_versions v ON v.id = r.definition_version_id
WHERE (CAST(:status AS rara_run_status) IS NULL OR r.status = :status)
ORDER BY r.id DESC LIMIT :limit;

-- name: run_steps
SELECT id, key, depends_on, capability, executor, status, attempt, max_attempts, available_at,
       started_at, finished_at, result, error, leased_by
FROM rara_steps WHERE run_id = :run_id ORDER BY id;

-- name: run_cancel_request$
-- Mark the run; the caller then cancels waiting steps and tells running ones.
UPDATE rara_runs SET cancel_requested = true
WHERE id = :run_id AND status IN ('pending', 'running')
RETURNING id;

-- name: run_cancel_waiting_steps!
UPDATE rara_steps SET status = 'cancelled', finished_at = now(),
       error = jsonb_build_object('code', 'CANCELLED', 'message', 'run cancelled')
WHERE run_id = :run_id AND status IN ('blocked', 'ready');

-- name: run_cancel_running_steps
-- Running steps learn of the cancel through NOTIFY now and their next heartbeat otherwise.
WITH flagged AS (
    UPDATE rara_steps SET cancel_requested = true
    WHERE run_id = :run_id AND status = 'running'
    RETURNING id
)
SELECT id, pg_notify('rara_cancel', id::text) FROM flagged;

-- name: run_notify!
SELECT pg_notify('rara_run', :payload);

-- =============================================================================================
-- Steps: the lease protocol

-- name: steps_complete_many
-- Many successes in one statement (the worker's completion batcher), each fenced on its own:
-- the steps returned succeeded; any other step given has lost its lease and nothing was written
-- for it. It closes the attempts and unblocks dependants, and it records
-- each step's artifact manifest (an absent or empty `manifest`: none) in the same statement. The caller
-- aggregates the runs afterwards in the same transaction (runs_lock, then runs_refresh).
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
    RETURNING s.id, s.run_id, s.key, s.attempt
), closed AS (
    UPDATE rara_attempts a SET outcome = 'succeeded', ended_at = now(), ended_by = :worker
    FROM done WHERE a.step_id = done.id AND a.attempt = done.attempt
), unblocked AS (
    -- A dependant several of whose dependencies finish in this batch is updated once, by
    -- their count (an UPDATE applies one joined row per target row). A concurrent change of
    -- the dependant is waited for and re-read (pending_deps of the newest version).
    UPDATE rara_steps s SET
        pending_deps = s.pending_deps - d.n,
        status = CASE WHEN s.pending_deps = d.n THEN 'ready' ELSE 'blocked' END::rara_step_status,
        available_at = now()
    FROM (SELECT b.id, count(*)::integer AS n
          FROM done JOIN rara_steps b ON b.run_id = done.run_id AND b.status = 'blocked'
           AND done.key = ANY (b.depends_on)
          GROUP BY b.id) AS d
    WHERE s.id = d.id AND s.status = 'blocked'
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
SELECT id, run_id FROM done;

-- name: step_fail^
-- Failure, fenced: back to ready after the backoff while attempts remain and the error is
-- retryable, otherwise failed for good. The attempt records :outcome (failed or timed_out).
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
SELECT id, run_id, key, status, available_at FROM updated;

-- name: step_cancelled^
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
SELECT id, run_id, key FROM done;

-- name: step_release
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

-- name: steps_reap
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

-- name: steps_cancel_dependants
-- A step failed for good: every step downstream of it in the run can never run; cancel them.
WITH RECURSIVE downstream(key) AS (
    SELECT CAST(:key AS text)
    UNION
    SELECT s.key FROM rara_steps s JOIN downstream d ON d.key = ANY (s.depends_on)
    WHERE s.run_id = :run_id
)
UPDATE rara_steps s SET status = 'cancelled', finished_at = now(),
    error = jsonb_build_object('code', 'UPSTREAM_FAILED',
                               'message', 'dependency ' || :key || ' failed')
FROM downstream d
WHERE s.run_id = :run_id AND s.key = d.key AND s.status IN ('blocked', 'ready')
RETURNING s.id;

-- =============================================================================================
-- Workers

-- name: worker_register!
INSERT INTO rara_workers (id, capabilities) VALUES (:worker, :capabilities)
ON CONFLICT (id) DO UPDATE SET capabilities = EXCLUDED.capabilities, heartbeat_at = now(),
    stopped_at = NULL;

-- name: worker_heartbeat_steps
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

-- name: worker_stop!
UPDATE rara_workers SET stopped_at = now() WHERE id = :worker;

-- name: capabilities_served
-- What live workers serve now (heartbeat within :alive_seconds).
SELECT DISTINCT unnest(capabilities) AS capability FROM rara_workers
WHERE stopped_at IS NULL AND heartbeat_at > now() - make_interval(secs => :alive_seconds);

-- name: workers_live
SELECT id, capabilities, started_at, heartbeat_at FROM rara_workers
WHERE stopped_at IS NULL AND heartbeat_at > now() - make_interval(secs => :alive_seconds)
ORDER BY id;

-- name: backlog_by_capability
-- Ready + running steps per capability: what the operator scales pools by.
SELECT capability, count(*) FILTER (WHERE status = 'ready') AS ready,
       count(*) FILTER (WHERE status = 'running') AS running
FROM rara_steps WHERE status IN ('ready', 'running') GROUP BY capability ORDER BY capability;

-- =============================================================================================
-- Worker (rara.worker): routed lease, progress, checkpoints, inputs

-- name: step_lease_routed
-- step_lease, routed: the worker serves (capability, executor kind) pairs — a worker without a
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
           SELECT jsonb_agg(jsonb_build_array(u.key, m.name, m.digest, m.size, m.media_type)
                            ORDER BY u.key, m.name)
           FROM rara_steps u
           JOIN rara_step_artifacts m ON m.step_id = u.id AND m.attempt = u.attempt
           WHERE u.run_id = l.run_id AND u.key = ANY (l.depends_on) AND u.status = 'succeeded')
       END AS inputs,
       l.rank, l.available_at  -- the worker's next cursor
FROM leased l;

-- name: steps_next_available$
-- Seconds until the earliest backing-off ready step of the served pairs becomes leasable (NULL:
-- none). Asked only when a lease came back short, so a retry runs when its backoff ends
-- instead of at the next poll.
SELECT extract(epoch FROM min(n.available_at) - now())::double precision
FROM unnest(CAST(:capabilities AS text[]), CAST(:executors AS text[])) AS cap(name, executor)
CROSS JOIN LATERAL (
    SELECT min(available_at) AS available_at FROM rara_steps
    WHERE status = 'ready' AND capability = cap.name AND executor = cap.executor
) AS n;

-- name: step_progress_write
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

-- name: step_checkpoint_write$
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

-- name: step_checkpoint_latest^
-- What an attempt resumes from: the latest checkpoint of any earlier attempt of the step.
SELECT c.attempt, c.seq, c.state, c.digest, a.size
FROM rara_checkpoints c LEFT JOIN rara_artifacts a USING (digest)
WHERE c.step_id = :step_id AND c.attempt < :attempt
ORDER BY c.attempt DESC, c.seq DESC LIMIT 1;

-- name: step_inputs
-- Upstream artifacts: the manifests of the succeeded attempts of the given dependencies.
SELECT s.key, a.name, a.digest, a.size, a.media_type
FROM rara_steps s
JOIN rara_step_artifacts a ON a.step_id = s.id AND a.attempt = s.attempt
WHERE s.run_id = :run_id AND s.key = ANY (CAST(:keys AS text[])) AND s.status = 'succeeded'
ORDER BY s.key, a.name;

-- =============================================================================================
-- Status

-- name: steps_recent_failures
SELECT s.run_id, s.key, s.capability, s.attempt, s.finished_at, s.error
FROM rara_steps s WHERE s.status = 'failed'
ORDER BY s.finished_at DESC LIMIT :limit;

-- name: artifacts_referenced
-- Every digest a manifest or a checkpoint still points at: GC keeps these blobs.
SELECT digest FROM rara_step_artifacts
UNION
SELECT digest FROM rara_checkpoints WHERE digest IS NOT NULL;

-- name: artifacts_forget!
-- Forget blobs nothing references any more (rows only; the bytes are deleted by GC).
DELETE FROM rara_artifacts a
WHERE a.digest = ANY (CAST(:digests AS text[]))
  AND NOT EXISTS (SELECT 1 FROM rara_step_artifacts m WHERE m.digest = a.digest)
  AND NOT EXISTS (SELECT 1 FROM rara_checkpoints c WHERE c.digest = a.digest);

-- =============================================================================================
-- Visibility (runs watch / show)

-- name: run_progress
-- Each step of a run with its latest progress event (of its current attempt).
SELECT s.id, s.key, s.capability, s.executor, s.status::text AS status, s.attempt,
       s.max_attempts, s.started_at, s.finished_at, s.result, s.error,
       e.fraction, e.message, e.metrics
FROM rara_steps s
LEFT JOIN LATERAL (
    SELECT fraction, message, metrics FROM rara_events
    WHERE step_id = s.id AND attempt = s.attempt
    ORDER BY seq DESC LIMIT 1
) e ON true
WHERE s.run_id = :run_id ORDER BY s.id;

-- name: run_events
SELECT s.key, e.attempt, e.seq, e.kind, e.fraction, e.message, e.metrics, e.created_at
FROM rara_events e JOIN rara_steps s ON s.id = e.step_id
WHERE s.run_id = :run_id ORDER BY e.created_at, s.key, e.attempt, e.seq;

-- name: run_attempts
SELECT s.key, a.attempt, a.worker, a.outcome::text AS outcome, a.started_at, a.ended_at,
       a.error
FROM rara_attempts a JOIN rara_steps s ON s.id = a.step_id
WHERE a.run_id = :run_id ORDER BY s.id, a.attempt;

-- name: run_artifacts
-- The artifacts of each succeeded step of a run (its succeeded attempt's manifest).
SELECT s.key, a.name, a.digest, a.size, a.media_type
FROM rara_steps s
JOIN rara_step_artifacts a ON a.step_id = s.id AND a.attempt = s.attempt
WHERE s.run_id = :run_id AND s.status = 'succeeded'
ORDER BY s.id, a.name;

-- name: runs_lock
-- Serialises the aggregation of runs. Taken just before runs_refresh in the transaction of step
-- changes: under READ COMMITTED, runs_refresh's snapshot is taken when its statement starts, so
-- two sibling steps finishing in concurrent transactions would each miss the other's commit and
-- leave the run `running` forever. With the lock the second waits for the first's commit, and
-- its refresh (a later statement, a later snapshot) sees both. In id order and always the last
-- locks a transaction takes (after its step rows), so they cannot take part in a lock cycle.
SELECT id FROM rara_runs WHERE id = ANY (CAST(:run_ids AS bigint[])) ORDER BY id
FOR NO KEY UPDATE;

-- name: runs_refresh
-- Parent aggregation, the one rule, for the given runs: a run ends when all its steps are
-- terminal — failed if any step failed, else cancelled if cancel was asked or a step was
-- cancelled, else succeeded; a run with a started step is running. A run whose aggregate did
-- not change is left as it is.
WITH agg AS (
    SELECT run_id,
           bool_and(status IN ('succeeded', 'failed', 'cancelled')) AS all_terminal,
           bool_or(status = 'failed') AS any_failed,
           bool_or(status = 'cancelled') AS any_cancelled,
           bool_or(attempt > 0) AS any_started
    FROM rara_steps WHERE run_id = ANY (CAST(:run_ids AS bigint[])) GROUP BY run_id
), next AS (
    SELECT r.id, CASE
        WHEN NOT agg.all_terminal THEN
            CASE WHEN agg.any_started THEN 'running' ELSE r.status END
        WHEN agg.any_failed THEN 'failed'
        WHEN r.cancel_requested OR agg.any_cancelled THEN 'cancelled'
        ELSE 'succeeded' END::rara_run_status AS status
    FROM rara_runs r JOIN agg ON agg.run_id = r.id
    WHERE r.id = ANY (CAST(:run_ids AS bigint[]))  -- an index probe, in a generic plan too
)
UPDATE rara_runs r SET
    status = next.status,
    started_at = CASE WHEN next.status <> 'cancelled' OR r.started_at IS NOT NULL
                      THEN coalesce(r.started_at, now()) END,
    finished_at = CASE WHEN next.status IN ('succeeded', 'failed', 'cancelled') THEN now() END
FROM next
WHERE r.id = next.id AND r.id = ANY (CAST(:run_ids AS bigint[]))
  AND r.status IN ('pending', 'running') AND r.status <> next.status
RETURNING r.id, r.status::text;

-- name: run_steps_lock!
-- Cancel takes the run's step rows first, in id order, then the run row: the order a step
-- outcome takes them (its step, then runs_lock), so the two cannot wait on each other in a cycle.
SELECT id FROM rara_steps WHERE run_id = :run_id ORDER BY id FOR UPDATE;
