-- The lease protocol: every state change of an attempt, from its lease to its one end, and the
-- reaper that ends attempts whose worker vanished — each a SECURITY DEFINER function that only
-- rara_worker may execute (no role writes rara_steps, rara_attempts, rara_events or
-- rara_checkpoints directly: migration 0007). Every write after the lease is fenced by
-- (id, leased_by, lease_token, status = 'running'), the token being the lease's capability:
-- only the worker that leased the step ever learns it (no role may read the column:
-- reads.sql). Zero rows means the lease is lost and the caller writes nothing more for the
-- attempt. Called by the worker's store (rara.worker.store) through db/queries/lease.sql;
-- docs/lease-protocol.md tells the protocol, docs/least-privilege.md the roles.
-- Repeatable (rara.pg.migrate): edit in place. Parameters are p_-prefixed; `use_column` makes a
-- name that is both a column and an output column of the function mean the column.
--
-- Plans that do not depend on the statistics. A session's PL/pgSQL keeps a generic plan of each
-- statement from its sixth call on, costed on the tables' size at that moment, until the
-- tables are analyzed again. Made on a fresh database's few rows, where a seq scan of one page
-- beats every index, that plan walks the whole of rara_steps for every step leased or ended
-- once the table has grown. So every function a worker calls runs with enable_seqscan off,
-- and every statement reaches its rows by an index condition bounded by the steps it works on
-- (`= ANY (ARRAY(…))`, lateral probes by key), whatever join order the planner picks: the
-- same plan however large the tables and whatever their statistics
-- (tests/db/test_stale_plans.py; the measurements: docs/map-steps.md, "Planner statistics").

CREATE OR REPLACE FUNCTION rara_db_return()
RETURNS timestamptz
LANGUAGE plpgsql AS $$
    -- When the database last began to accept writes: the wal writer starts then, at the end
    -- of a restart's crash recovery or at a standby's promotion (a failover); the server's
    -- start when the caller may not see the wal writer (an owner without pg_read_all_stats:
    -- a restart is covered, a promotion is not). The leases' outage rule
    -- (rara_lease_alive; docs/lease-protocol.md, "Outages") counts from it.
    --
    -- Kept in rara_db_life (migration 0031) for the server's life: reading the wal writer's
    -- start copies every backend's status, which a heartbeat must not pay with thousands of
    -- connections. A life is the postmaster's start (a restart, or another server: a promoted
    -- standby, whose row came from its primary) and pg_stat_wal's reset time, which the
    -- server sets anew when it reinitialises after a crash without restarting the
    -- postmaster. A reset by hand only makes the next call compute it again. Not kept while
    -- in recovery: a standby about to be promoted would keep its answer from before.
DECLARE
    started timestamptz := pg_postmaster_start_time();
    reset timestamptz := (SELECT w.stats_reset FROM pg_stat_wal w);
    back timestamptz;
BEGIN
    SELECT l.db_return INTO back FROM rara_db_life l
    WHERE l.only_row AND l.postmaster_start = started
      AND l.wal_stats_reset IS NOT DISTINCT FROM reset;
    IF FOUND THEN
        RETURN back;
    END IF;
    back := greatest(started, (SELECT max(a.backend_start) FROM pg_stat_activity a
                               WHERE a.backend_type = 'walwriter'));
    IF NOT pg_is_in_recovery() THEN
        INSERT INTO rara_db_life AS l (only_row, postmaster_start, wal_stats_reset, db_return)
        VALUES (true, started, reset, back)
        ON CONFLICT (only_row) DO UPDATE
        SET postmaster_start = excluded.postmaster_start,
            wal_stats_reset = excluded.wal_stats_reset, db_return = excluded.db_return;
    END IF;
    RETURN back;
END
$$;
SELECT rara_grant('rara_db_return');  -- only through the heartbeat and the reaper

CREATE OR REPLACE FUNCTION rara_lease_alive(p_expires timestamptz, p_confirmed timestamptz,
                                            p_return timestamptz, p_now timestamptz)
RETURNS boolean
LANGUAGE sql STABLE AS $$
    -- Whether a running attempt's lease still holds at p_now: before its expiry, or — for a
    -- lease last confirmed (heartbeat_at) before the database's return (rara_db_return) —
    -- until a third of the lease (the default heartbeat interval) plus 2 s, the whole lease
    -- when shorter, after the return: an outage does not expire what its workers could not
    -- renew. The heartbeat extends, and the reaper leaves, exactly the leases alive; the
    -- proof: docs/lease-protocol.md, "Outages". SQL, so that it is inlined.
    SELECT p_expires > p_now
        OR coalesce(p_confirmed < p_return
                    AND p_now < p_return + least((p_expires - p_confirmed) / 3
                                                 + interval '2 s', p_expires - p_confirmed),
                    false)
$$;
SELECT rara_grant('rara_lease_alive');  -- only through the heartbeat and the reaper

CREATE OR REPLACE FUNCTION rara_step_lease(
    p_worker text, p_capabilities text[], p_executors text[], p_after_ranks integer[],
    p_after_ats timestamptz[], p_after_ids bigint[], p_limit integer,
    p_lease_seconds double precision, p_after_namespaces text[] DEFAULT NULL,
    p_except_namespaces text[] DEFAULT NULL)
RETURNS TABLE (id bigint, run_id bigint, key text, capability text, executor text,
               payload jsonb, attempt integer, max_attempts integer, lease_token uuid,
               lease_expires_at timestamptz, timeout_ms integer, heartbeat_timeout_ms integer,
               depends_on text[], run_input jsonb, leased_at timestamptz, checkpoint jsonb,
               inputs jsonb, rank integer, available_at timestamptz, namespace text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT SET enable_seqscan = off AS $$
DECLARE
    passed text[] := coalesce(p_except_namespaces, '{}');  -- namespaces this lease passes by
    cursors rara_lease_cursor[];
    bounds rara_lease_bound[];          -- what the limits and quotas let run still
    full_keys text[];                   -- concurrency keys at their max when the lease began
    lanes rara_lease_lane[] := '{}';    -- the lanes drawn, and the slots of each
    probed rara_lease_candidate[] := '{}';  -- what the drawn lanes gave
    found rara_lease_candidate[];       -- a round's candidates, in the order they claim slots
    taken rara_lease_candidate[] := '{}';   -- what the rounds admitted
    rejected bigint[] := '{}';          -- candidates a key's max turned away
BEGIN
    -- The stages (lease_stages.sql; docs/lease-protocol.md, "The lease's stages"): budget,
    -- draw, probe, admit keys, fit; walk when the probe fell short; take. A lease into
    -- held-back slots (p_except_namespaces: the namespaces with something running on the
    -- worker, whose lanes give nothing) is the walk alone, with no draw per slot for the one
    -- or two slots it fills (docs/namespaces.md, "Held-back slots").
    PERFORM rara_worker_check_login(p_worker);
    IF p_limit < 1 THEN
        RETURN;
    END IF;
    bounds := rara_lease_budget(p_capabilities);
    full_keys := rara_lease_full_keys();
    cursors := CASE WHEN p_after_namespaces IS NOT NULL
        THEN rara_lease_cursors(p_capabilities, p_executors, p_after_namespaces, p_after_ranks,
                                p_after_ats, p_after_ids) END;
    IF cardinality(passed) = 0 THEN
        lanes := rara_lease_draw(p_capabilities, p_executors, p_limit);
        IF cardinality(lanes) = 0 THEN
            RETURN;  -- nothing was ever queued for what this worker serves
        END IF;
    END IF;
    FOR round IN CASE WHEN cardinality(passed) = 0 THEN 1 ELSE 2 END..2 LOOP
        IF round = 1 THEN
            found := rara_lease_probe(lanes, cursors, bounds, full_keys);
            probed := found;
        ELSE
            found := rara_lease_walk(p_capabilities, p_executors, cursors, bounds, full_keys,
                                     passed, rara_lease_spent(lanes, probed), taken, rejected,
                                     p_limit - cardinality(taken));
        END IF;
        IF EXISTS (SELECT FROM unnest(found) AS f WHERE f.concurrency_key IS NOT NULL) THEN
            SELECT k.admitted, rejected || k.turned_away INTO found, rejected
            FROM rara_lease_admit_keys(found, taken) AS k;
        END IF;
        IF cardinality(found) > 0 AND cardinality(bounds) > 0 THEN
            found := rara_lease_fit(found, bounds);
        END IF;
        taken := taken || found;
        EXIT WHEN cardinality(taken) >= p_limit;
        bounds := rara_lease_spend(bounds, found);  -- what the walk may still take
    END LOOP;
    RETURN QUERY SELECT * FROM rara_lease_take(
        p_worker, ARRAY(SELECT t.id FROM unnest(taken) AS t), p_lease_seconds);
END $$;
SELECT rara_grant('rara_step_lease', 'rara_worker');

CREATE OR REPLACE FUNCTION rara_step_heartbeat(
    p_worker text, p_capabilities text[], p_lease_seconds double precision,
    p_step_ids bigint[], p_tokens uuid[])
RETURNS TABLE (id bigint, cancel_requested boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT SET enable_seqscan = off AS $$
#variable_conflict use_column
DECLARE
    back timestamptz := rara_db_return();
BEGIN
    -- The worker's heartbeat in one statement: its own row (what it serves, that it is
    -- alive) and every lease it still holds extended (empty arrays when it runs nothing),
    -- fenced per lease. The answer carries the cancel requests; attempts missing from it have
    -- lost their lease. A lease that is no longer alive (rara_lease_alive) is not extended,
    -- reaped or not: its worker has stopped the attempt by then (its own clock said the lease
    -- was not confirmed in time), and a heartbeat delayed past the expiry (sent before an
    -- outage, answered after) would otherwise keep a step nobody runs away from the reaper
    -- for another lease. One that expired during an outage is alive for a while after the
    -- database's return, and extended: its worker kept the attempt (docs/lease-protocol.md,
    -- "Outages").
    PERFORM rara_worker_check_login(p_worker);
    RETURN QUERY
    WITH me AS (
        UPDATE rara_workers SET heartbeat_at = now(), capabilities = p_capabilities
        WHERE id = p_worker
    )
    UPDATE rara_steps s SET
        lease_expires_at = now() + make_interval(secs => p_lease_seconds), heartbeat_at = now()
    FROM unnest(p_step_ids, p_tokens) AS h(id, token)
    -- (= ANY: primary key probes, whichever side of the join the plan puts rara_steps on)
    WHERE s.id = ANY (p_step_ids) AND s.id = h.id AND s.lease_token = h.token
      AND s.leased_by = p_worker AND s.status = 'running'
      AND rara_lease_alive(s.lease_expires_at, s.heartbeat_at, back, now())
    RETURNING s.id, s.cancel_requested;
END $$;
SELECT rara_grant('rara_step_heartbeat', 'rara_worker');

CREATE OR REPLACE FUNCTION rara_step_progress_many(
    p_worker text, p_step_ids bigint[], p_tokens uuid[], p_seqs integer[],
    p_fractions double precision[], p_messages text[], p_metrics jsonb[])
RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT SET enable_seqscan = off AS $$
BEGIN
    -- The latest progress of many attempts in one statement, fenced per attempt. FOR SHARE
    -- orders the write after a concurrent reap or cancel of the step, so no event lands for an
    -- attempt that no longer owns it. Returns the steps still owned. A replayed seq (its first
    -- write failed in flight) is one row holding the newest state: no gap, no duplicate.
    RETURN QUERY
    WITH p AS (
        SELECT * FROM unnest(p_step_ids, p_tokens, p_seqs, p_fractions, p_messages, p_metrics)
            AS p(step_id, token, seq, fraction, message, metrics)
    ), owned AS (
        SELECT p.*, s.attempt FROM p JOIN rara_steps s
            ON s.id = ANY (p_step_ids) AND s.id = p.step_id AND s.lease_token = p.token
           AND s.leased_by = p_worker AND s.status = 'running'
        FOR SHARE OF s
    ), written AS (
        INSERT INTO rara_events (step_id, attempt, seq, kind, fraction, message, metrics)
        SELECT o.step_id, o.attempt, o.seq, 'progress', o.fraction, o.message, o.metrics
        FROM owned o
        ON CONFLICT (step_id, attempt, seq) DO UPDATE SET
            fraction = EXCLUDED.fraction, message = EXCLUDED.message, metrics = EXCLUDED.metrics
    )
    SELECT o.step_id FROM owned o;
END $$;
SELECT rara_grant('rara_step_progress_many', 'rara_worker');

CREATE OR REPLACE FUNCTION rara_step_checkpoint(
    p_worker text, p_step_id bigint, p_token uuid, p_seq integer, p_state jsonb,
    p_digest text, p_size bigint)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT SET enable_seqscan = off AS $$
DECLARE
    written boolean;
BEGIN
    -- A checkpoint, fenced (true: written or already there; false: the lease is lost). The
    -- blob, if any, is registered in the same statement so the foreign key holds.
    WITH owned AS (
        SELECT s.id, s.attempt FROM rara_steps s
        WHERE s.id = p_step_id AND s.leased_by = p_worker AND s.lease_token = p_token
          AND s.status = 'running'
        FOR SHARE
    ), blob AS (
        INSERT INTO rara_artifacts (digest, size)
        SELECT p_digest, p_size FROM owned WHERE p_digest IS NOT NULL
        ON CONFLICT (digest) DO NOTHING
    ), checkpoint AS (
        INSERT INTO rara_checkpoints (step_id, attempt, seq, state, digest)
        SELECT o.id, o.attempt, p_seq, p_state, p_digest FROM owned o
        ON CONFLICT DO NOTHING
    )
    SELECT count(*) = 1 INTO written FROM owned;
    RETURN written;
END $$;
SELECT rara_grant('rara_step_checkpoint', 'rara_worker');

CREATE OR REPLACE FUNCTION rara_step_end_many(p_worker text, p_successes jsonb,
                                              p_others jsonb DEFAULT '[]')
RETURNS TABLE (id bigint, status text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT SET enable_seqscan = off AS $$
#variable_conflict use_column
DECLARE
    other record;
    ended record;
    deltas jsonb := '[]';
    succeeded rara_step_ended[];  -- the successes whose fence matched
    succeeded_runs bigint[];      -- and their runs
    map_ends jsonb := '[]';     -- children ended, per map step (rara_map_children_ended)
    map_ends_of_successes jsonb;
    maps_due bigint[] := '{}';  -- map steps whose upstream all succeeded: to expand
    with_dependants bigint[];   -- the successes that have dependants
    map bigint;
    failing bigint[];           -- the steps of p_others
    others_ended bigint[] := '{}';  -- those whose fence matched
    -- What the steps that stopped running held (rara_admission_freed): parallel arrays
    freed_capabilities text[];
    freed_namespaces text[];
    freed_keys text[];
    freed_maxes integer[];
    may_free boolean;           -- a success had a key, or some limit or quota exists
BEGIN
    -- Many ends of one worker's attempts in one transaction, each fenced on its own: the rows
    -- returned are the steps whose fence matched, with their status after the end; any other
    -- step given has lost its lease and nothing was written for it.
    -- p_others: failures and cancels (rare), one JSON array of {id, token, outcome, error,
    -- retryable, jitter}, written first, one statement each, with the cancels they cascade to.
    -- p_successes: one JSON array of {id, token, result, manifest, reads, cache,
    -- reused_from} (encoded by one json.dumps in the worker, where typed arrays cost a
    -- Python dumper call per element; cache and reused_from only for a step with `cache:`),
    -- then written
    -- in one statement; last, everything that ended is counted in the runs' step counts, so
    -- that the transaction locks its runs once, in id order, after all its step rows.
    -- (Most batches have no failure or cancel: no query is opened for them.)
    -- Every step row the batch writes is locked first, in id order (rara_step_end_lock): the
    -- statements below then take no step row another end or a run cancel could hold while
    -- waiting for one of this batch's, in whatever order they visit the rows.
    failing := ARRAY(SELECT o.id FROM jsonb_to_recordset(p_others) AS o(id bigint));
    PERFORM rara_step_end_lock(
        ARRAY(SELECT g.id FROM jsonb_to_recordset(p_successes) AS g(id bigint)) || failing,
        failing);
    IF p_others <> '[]' THEN
        FOR other IN
            SELECT * FROM jsonb_to_recordset(p_others) AS o(id bigint, token uuid, outcome text,
                                                             error jsonb, retryable boolean,
                                                             jitter double precision)
        LOOP
            IF other.outcome = 'cancelled' THEN
                SELECT * INTO ended FROM rara_step_cancel(p_worker, other.id, other.token);
            ELSIF other.outcome IN ('failed', 'timed_out') THEN
                SELECT * INTO ended FROM rara_step_fail(
                    p_worker, other.id, other.token, other.error, other.retryable, other.jitter,
                    other.outcome::rara_attempt_outcome);
            ELSE  -- a success goes in p_successes; released and lease_expired are not ends
                RAISE EXCEPTION 'rara: step %: an attempt cannot end as %', other.id, other.outcome
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            IF ended.id IS NOT NULL THEN
                others_ended := others_ended || ended.id;
                deltas := deltas || rara_step_end_deltas(ended.run_id, ended.key, ended.status);
                IF ended.map_parent IS NOT NULL AND ended.status <> 'ready' THEN
                    map_ends := map_ends || jsonb_build_array(jsonb_build_object(
                        'map', ended.map_parent, 'succeeded', 0, 'failed', 1));
                END IF;
                id := ended.id;
                status := ended.status;
                RETURN NEXT;
            END IF;
        END LOOP;
    END IF;
    WITH given AS MATERIALIZED (
        SELECT * FROM jsonb_to_recordset(p_successes)
            AS g(id bigint, token uuid, result jsonb, manifest jsonb, reads jsonb, cache jsonb,
                 reused_from jsonb)
    ), done AS (
        -- The fence, per step: a row whose owner or token changed is simply not matched.
        UPDATE rara_steps s SET
            status = 'succeeded', result = g.result, finished_at = now(), error = NULL,
            leased_by = NULL, lease_token = NULL, lease_expires_at = NULL,
            cache = g.cache - 'ttl_ms', reused_from = g.reused_from
        FROM given g
        -- (= ANY as well: primary key look-ups, not a scan of every running step of the
        -- worker)
        WHERE s.id = ANY (ARRAY(SELECT g2.id FROM given g2)) AND s.id = g.id
          AND s.leased_by = p_worker AND s.lease_token = g.token AND s.status = 'running'
        RETURNING s.id, s.run_id, s.attempt, s.dependants, s.map_parent, s.key, s.capability,
                  s.concurrency_key
    ), closed AS (
        -- clock_timestamp(), here and in every end: the time the end took the step's row, not
        -- when its transaction began. An end that waited for another step's lock is then never
        -- stamped before progress the attempt wrote while it still owned the step
        -- (tests/db/test_attempt_times.py).
        UPDATE rara_attempts a
        SET outcome = 'succeeded', ended_at = clock_timestamp(), ended_by = p_worker
        FROM done WHERE a.step_id = done.id AND a.attempt = done.attempt
    )
    SELECT coalesce(array_agg(ROW(done.id, done.attempt, done.run_id, done.key,
                                  done.capability)::rara_step_ended), '{}'),
           coalesce(array_agg(done.run_id), '{}'),
           coalesce(jsonb_agg(jsonb_build_object('map', done.map_parent, 'succeeded', 1,
                                                 'failed', 0))
                    FILTER (WHERE done.map_parent IS NOT NULL), '[]'),
           coalesce(array_agg(done.id) FILTER (WHERE cardinality(done.dependants) > 0), '{}'),
           -- (in this statement, not one of its own: most batches hold no bound, and a
           -- statement more was ~7% of the cost of ending one step)
           coalesce(bool_or(done.concurrency_key IS NOT NULL), false)
               OR EXISTS (SELECT FROM rara_capability_limits)
               OR EXISTS (SELECT FROM rara_namespace_quotas)
    INTO succeeded, succeeded_runs, map_ends_of_successes, with_dependants, may_free
    FROM done;
    IF may_free OR cardinality(others_ended) > 0 THEN
        -- A limit, quota or key the ended attempts held may let a waiting step start (what
        -- they held read again by id: only here, not in the common path).
        SELECT array_agg(s.capability), array_agg(s.namespace), array_agg(s.concurrency_key),
               array_agg(s.concurrency_max)
        INTO freed_capabilities, freed_namespaces, freed_keys, freed_maxes
        FROM rara_steps s
        WHERE s.id = ANY (ARRAY(SELECT e.id FROM unnest(succeeded) AS e) || others_ended);
        PERFORM rara_admission_freed(freed_capabilities, freed_namespaces, freed_keys,
                                     freed_maxes);
    END IF;
    -- The optional parts (lease_stages.sql), each only for a batch that has it: what only
    -- some successes carry — a cache entry, the digests read, an artifact manifest — then
    -- the dependants (after the manifests: a dependant's wait may begin and show them,
    -- rara_wait_begin); all before the runs' locks.
    IF cardinality(succeeded) > 0 AND jsonb_path_exists(
            p_successes, '$[*] ? (exists(@.cache) || exists(@.reads) || exists(@.manifest))')
    THEN
        PERFORM rara_end_cache_entries(p_successes, succeeded);
        PERFORM rara_end_lineage(p_successes, succeeded);
        PERFORM rara_end_manifests(p_successes, succeeded);
    END IF;
    IF cardinality(with_dependants) > 0 THEN
        maps_due := rara_end_unblock(with_dependants);
    END IF;
    -- Map steps: their children's ends counted (rara_map_children_ended), those now due
    -- expanded; then the runs, last, in id order, after every step row (rara_run_count).
    IF map_ends <> '[]' OR map_ends_of_successes <> '[]' THEN
        deltas := deltas || rara_map_children_ended(map_ends || map_ends_of_successes);
    END IF;
    FOREACH map IN ARRAY maps_due LOOP
        deltas := deltas || rara_map_expand(map);
    END LOOP;
    PERFORM rara_run_count(deltas, succeeded_runs);
    status := 'succeeded';  -- (RETURN NEXT per row: no query executed for the answer)
    FOR i IN 1..cardinality(succeeded) LOOP
        id := succeeded[i].id;
        RETURN NEXT;
    END LOOP;
END $$;
SELECT rara_grant('rara_step_end_many', 'rara_worker');

CREATE OR REPLACE FUNCTION rara_step_end_lock(p_steps bigint[], p_failing bigint[])
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    locked bigint[];
BEGIN
    -- The locks of a batch of ends (rara_step_end_many), all taken before its first write, in
    -- one order: the step rows it may write, by id — then, last, its runs, by id
    -- (rara_run_count). A batch waits for another only while it holds rows of lower ids than
    -- the one it waits for, so no two batches (nor a batch and a run cancel, which locks its
    -- run's steps by id too: rara_run_cancel) wait on each other in a cycle. Without it, two
    -- batches that share dependants, map steps or downstream take them in the order each
    -- visits them, and deadlock under normal load (tests/db/test_end_deadlocks.py).
    -- The rows: the ended steps p_steps; the map steps of those that are children; the
    -- dependants of both (unblocked by a success, or a map's success); and, when p_failing
    -- (failures and cancels, rare) is not empty, the whole downstream of those and of a map
    -- with a child among them (a map fails at its first child that fails or is cancelled):
    -- what a failure for good cancels. Rows the batch ends up not writing (a failure that
    -- retries, a map not done yet) are locked all the same, until the commit. FOR NO KEY
    -- UPDATE: the lock the updates take (foreign key checks of events written meanwhile are
    -- not held up).
    -- Not covered: a map that its upstream's success expands and that then ends in the same
    -- transaction (an empty list, or not a list) writes its own dependants after the rows
    -- above (rara_map_succeed, rara_map_fail); rare, and retried by the worker if it ever
    -- deadlocks.
    IF cardinality(p_failing) = 0 THEN
        -- Successes only (most batches): one level of dependants, no recursion.
        WITH ended AS MATERIALIZED (
            SELECT s.id, s.run_id, s.dependants, s.map_parent
            FROM rara_steps s WHERE s.id = ANY (p_steps)
        ), maps AS MATERIALIZED (
            SELECT m.id, m.run_id, m.dependants FROM rara_steps m
            -- (= ANY: primary key probes of the map steps)
            WHERE m.id = ANY (ARRAY(SELECT e.map_parent FROM ended e
                                    WHERE e.map_parent IS NOT NULL))
        ), written AS (
            SELECT e.id, e.run_id, e.dependants FROM ended e
            UNION ALL
            SELECT m.id, m.run_id, m.dependants FROM maps m
        )
        SELECT array_agg(w.id) || coalesce(array_agg(b.id) FILTER (WHERE b.id IS NOT NULL),
                                           '{}')
        INTO locked
        FROM written w
        LEFT JOIN LATERAL unnest(w.dependants) AS dependant(key) ON true
        -- (by (run_id, key) probes of the dependants)
        LEFT JOIN LATERAL (
            SELECT b.id FROM rara_steps b
            WHERE b.run_id = w.run_id AND b.key = dependant.key
            OFFSET 0) AS b ON true;
    ELSE
        WITH RECURSIVE ended AS MATERIALIZED (
            SELECT s.id, s.run_id, s.dependants, s.map_parent, s.id = ANY (p_failing) AS failing
            FROM rara_steps s WHERE s.id = ANY (p_steps)
        ), maps AS MATERIALIZED (
            SELECT m.id, m.run_id, m.dependants, bool_or(e.failing) AS failing
            FROM ended e JOIN rara_steps m ON m.id = e.map_parent
            WHERE m.id = ANY (ARRAY(SELECT e2.map_parent FROM ended e2
                                    WHERE e2.map_parent IS NOT NULL))
            GROUP BY m.id, m.run_id, m.dependants
        ), written(id, run_id, dependants, failing, first) AS (
            SELECT e.id, e.run_id, e.dependants, e.failing, true FROM ended e
            UNION
            SELECT m.id, m.run_id, m.dependants, m.failing, true FROM maps m
            UNION
            -- A row's dependants: one level from an ended step or a map, the whole downstream
            -- from a failure.
            SELECT b.id, b.run_id, b.dependants, w.failing, false
            FROM written w CROSS JOIN LATERAL unnest(w.dependants) AS dependant(key)
            CROSS JOIN LATERAL (
                SELECT b.id, b.run_id, b.dependants FROM rara_steps b
                WHERE b.run_id = w.run_id AND b.key = dependant.key
                OFFSET 0) AS b
            WHERE w.first OR w.failing
        )
        SELECT array_agg(w.id) INTO locked FROM written w;
    END IF;
    -- (a row found twice is locked once)
    PERFORM 1 FROM rara_steps s WHERE s.id = ANY (locked) ORDER BY s.id FOR NO KEY UPDATE;
END $$;
SELECT rara_grant('rara_step_end_lock');  -- only through rara_step_end_many

-- Retry backoff, the one formula (migration 0001): min(initial * coefficient^(attempt-1), max),
-- jittered down by up to `jitter` (0..1) so a burst of failures does not retry in lockstep.
CREATE OR REPLACE FUNCTION rara_retry_delay(initial_ms integer, max_ms integer,
                                            coefficient double precision, attempt integer,
                                            jitter double precision)
RETURNS interval LANGUAGE sql VOLATILE AS $$
    SELECT make_interval(secs => least(initial_ms * power(coefficient, greatest(attempt - 1, 0)),
                                       max_ms)::double precision
                                 * (1 - jitter * random()) / 1000.0)
$$;
SELECT rara_grant('rara_retry_delay');  -- only through rara_step_fail, the reaper

CREATE OR REPLACE FUNCTION rara_step_fail(
    p_worker text, p_step_id bigint, p_token uuid, p_error jsonb, p_retryable boolean,
    p_jitter double precision, p_outcome rara_attempt_outcome)
RETURNS TABLE (id bigint, run_id bigint, key text, status text, map_parent bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    -- Failure, fenced (rara_step_end_many): back to ready after the backoff while attempts
    -- remain and the error is retryable, otherwise failed for good. The attempt records
    -- p_outcome (failed or timed_out). The backoff counts from the attempt's recorded end (one
    -- clock reading for both): now() is the batch's start, earlier by the statements before.
    RETURN QUERY
    WITH failing AS (
        SELECT s.id, s.attempt, s.max_attempts, clock_timestamp() AS ended_at,
               (p_retryable AND s.attempt - s.releases < s.max_attempts) AS retry,
               rara_retry_delay(s.retry_initial_ms, s.retry_max_ms, s.retry_coefficient,
                                s.attempt - s.releases, p_jitter) AS delay
        FROM rara_steps s
        WHERE s.id = p_step_id AND s.leased_by = p_worker AND s.lease_token = p_token
          AND s.status = 'running'
        FOR UPDATE
    ), updated AS (
        UPDATE rara_steps s SET
            status = CASE WHEN f.retry THEN 'ready' ELSE 'failed' END::rara_step_status,
            available_at = CASE WHEN f.retry THEN f.ended_at + f.delay ELSE s.available_at END,
            finished_at = CASE WHEN f.retry THEN NULL ELSE now() END,
            error = p_error, leased_by = NULL, lease_token = NULL, lease_expires_at = NULL
        FROM failing f WHERE s.id = f.id
        RETURNING s.id, s.run_id, s.key, s.status::text AS status, s.map_parent
    ), closed AS (
        UPDATE rara_attempts a
        SET outcome = p_outcome, ended_at = f.ended_at, ended_by = p_worker, error = p_error
        FROM updated u JOIN failing f ON f.id = u.id
        WHERE a.step_id = u.id AND a.attempt = f.attempt
    )
    SELECT u.id, u.run_id, u.key, u.status, u.map_parent FROM updated u;
END $$;
SELECT rara_grant('rara_step_fail');  -- only through rara_step_end_many

CREATE OR REPLACE FUNCTION rara_step_cancel(p_worker text, p_step_id bigint, p_token uuid)
RETURNS TABLE (id bigint, run_id bigint, key text, status text, map_parent bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    -- A running attempt stopped because cancel was asked, fenced (rara_step_end_many).
    RETURN QUERY
    WITH done AS (
        UPDATE rara_steps s SET status = 'cancelled', finished_at = now(),
            error = jsonb_build_object('code', 'CANCELLED', 'message', 'cancelled on request'),
            leased_by = NULL, lease_token = NULL, lease_expires_at = NULL
        WHERE s.id = p_step_id AND s.leased_by = p_worker AND s.lease_token = p_token
          AND s.status = 'running'
        RETURNING s.id, s.run_id, s.key, s.attempt, s.map_parent
    ), closed AS (
        UPDATE rara_attempts a
        SET outcome = 'cancelled', ended_at = clock_timestamp(), ended_by = p_worker
        FROM done WHERE a.step_id = done.id AND a.attempt = done.attempt
    )
    SELECT done.id, done.run_id, done.key, 'cancelled'::text, done.map_parent FROM done;
END $$;
SELECT rara_grant('rara_step_cancel');  -- only through rara_step_end_many

CREATE OR REPLACE FUNCTION rara_step_end_deltas(p_run_id bigint, p_key text, p_status text)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    downstream integer := 0;
BEGIN
    -- A step's end in its run's step counts (rara_run_count's delta; nothing for a retry):
    -- after a failure for good, its downstream can never run and is cancelled, and counted.
    IF p_status = 'failed' THEN
        downstream := rara_step_cancel_dependants(p_run_id, p_key);
    END IF;
    RETURN jsonb_build_array(jsonb_build_object(
        'run_id', p_run_id, 'succeeded', (p_status = 'succeeded')::integer,
        'failed', (p_status = 'failed')::integer,
        'cancelled', (p_status = 'cancelled')::integer + downstream));
END $$;
SELECT rara_grant('rara_step_end_deltas');

CREATE OR REPLACE FUNCTION rara_step_release_many(p_worker text, p_step_ids bigint[],
                                                  p_tokens uuid[])
RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT SET enable_seqscan = off AS $$
DECLARE
    ids bigint[];  -- the steps released, and what they held (rara_admission_freed)
    freed_capabilities text[];
    freed_namespaces text[];
    freed_keys text[];
    freed_maxes integer[];
BEGIN
    -- Graceful shutdown: give leases back so another worker takes them at once. A released
    -- attempt is not a failure: `releases` keeps it out of the retry budget.
    WITH released AS (
        UPDATE rara_steps s SET status = 'ready', available_at = now(),
            releases = s.releases + 1, leased_by = NULL, lease_token = NULL,
            lease_expires_at = NULL
        FROM unnest(p_step_ids, p_tokens) AS h(id, token)
        WHERE s.id = ANY (p_step_ids) AND s.id = h.id AND s.lease_token = h.token
          AND s.leased_by = p_worker AND s.status = 'running'
        RETURNING s.id, s.attempt, s.capability, s.namespace, s.concurrency_key,
                  s.concurrency_max
    ), closed AS (
        UPDATE rara_attempts a
        SET outcome = 'released', ended_at = clock_timestamp(), ended_by = p_worker
        FROM released r WHERE a.step_id = r.id AND a.attempt = r.attempt
    )
    SELECT coalesce(array_agg(r.id), '{}'), array_agg(r.capability), array_agg(r.namespace),
           array_agg(r.concurrency_key), array_agg(r.concurrency_max)
    INTO ids, freed_capabilities, freed_namespaces, freed_keys, freed_maxes
    FROM released r;
    IF cardinality(ids) > 0 THEN  -- what they held may let a waiting step start
        PERFORM rara_admission_freed(freed_capabilities, freed_namespaces, freed_keys,
                                     freed_maxes);
    END IF;
    RETURN QUERY SELECT unnest(ids);
END $$;
SELECT rara_grant('rara_step_release_many', 'rara_worker');

CREATE OR REPLACE FUNCTION rara_step_release_unheld(p_worker text, p_held bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT SET enable_seqscan = off AS $$
DECLARE
    ids bigint[];  -- the steps released, and what they held (rara_admission_freed)
    freed_capabilities text[];
    freed_namespaces text[];
    freed_keys text[];
    freed_maxes integer[];
BEGIN
    -- A lease whose answer never reached its worker (the connection dropped between the
    -- commit and the reply: a crash or a failover in the middle of the statement) is held by
    -- nobody: the worker never learnt its token and would leave it to expire a whole lease
    -- later, at the cost of an attempt. After such a lease, once it can write again, the worker
    -- gives back every lease in its name that it does not hold (p_held: the steps it runs).
    -- Without a token the worker's name is the fence, so only its own login may
    -- (rara_worker_check_login). Released, not failed: `releases` keeps it out of the retry
    -- budget. Rows locked in id order, as every end locks them (rara_step_end_lock).
    PERFORM rara_worker_check_login(p_worker);
    WITH unheld AS MATERIALIZED (
        SELECT s.id FROM rara_steps s
        WHERE s.lease_expires_at IS NOT NULL  -- the running steps (rara_steps_running_expiry)
          AND s.leased_by = p_worker AND s.status = 'running' AND s.id <> ALL (p_held)
        ORDER BY s.id
        FOR NO KEY UPDATE
    ), released AS (
        UPDATE rara_steps s SET status = 'ready', available_at = now(),
            releases = s.releases + 1, leased_by = NULL, lease_token = NULL,
            lease_expires_at = NULL
        FROM unheld u
        WHERE s.id = u.id AND s.leased_by = p_worker AND s.status = 'running'
        RETURNING s.id, s.attempt, s.capability, s.namespace, s.concurrency_key,
                  s.concurrency_max
    ), closed AS (
        UPDATE rara_attempts a
        SET outcome = 'released', ended_at = clock_timestamp(), ended_by = p_worker
        FROM released r WHERE a.step_id = r.id AND a.attempt = r.attempt
    )
    SELECT coalesce(array_agg(r.id), '{}'), array_agg(r.capability), array_agg(r.namespace),
           array_agg(r.concurrency_key), array_agg(r.concurrency_max)
    INTO ids, freed_capabilities, freed_namespaces, freed_keys, freed_maxes
    FROM released r;
    IF cardinality(ids) > 0 THEN  -- what they held may let a waiting step start
        PERFORM rara_admission_freed(freed_capabilities, freed_namespaces, freed_keys,
                                     freed_maxes);
    END IF;
    RETURN QUERY SELECT unnest(ids);
END $$;
SELECT rara_grant('rara_step_release_unheld', 'rara_worker');

CREATE OR REPLACE FUNCTION rara_reap_turn(p_worker text)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    -- Whether it is p_worker's turn to reap: one caller a second fleet-wide takes it
    -- (rara_reaper_turn, migration 0030). A conditional UPDATE of the one row, not an advisory
    -- lock alone: a lock says who reaps now, not who reaped last, and the turn must outlive
    -- the transaction that took it. SKIP LOCKED: a caller never waits for the holder's reap
    -- (a turn taken but not yet committed is taken); one whose snapshot predates a taken turn
    -- re-reads the row and finds it taken. Rolled back with a reap that fails: the next
    -- caller takes it. One second is below a worker's reaper interval (default 5 s, each
    -- worker calling on its own), so a pass still follows an expiry within one interval, as
    -- with a single worker reaping: a dead worker is still reaped within lease + heartbeat.
    UPDATE rara_reaper_turn t SET taken_at = now(), taken_by = p_worker
    WHERE t.only_row AND t.only_row IN (
        SELECT u.only_row FROM rara_reaper_turn u
        WHERE u.only_row AND u.taken_at <= now() - interval '1 s'
        FOR UPDATE SKIP LOCKED);
    RETURN FOUND;
END $$;
SELECT rara_grant('rara_reap_turn');  -- only through rara_step_reap_expired

CREATE OR REPLACE FUNCTION rara_step_reap_expired(p_worker text, p_limit integer,
                                                  p_jitter double precision)
RETURNS TABLE (id bigint, status text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT SET enable_seqscan = off AS $$
#variable_conflict use_column
DECLARE
    reaped jsonb;
    step record;
    deltas jsonb := '[]';
    map_ends jsonb := '[]';
    back timestamptz;
    freed_capabilities text[];  -- what the reaped attempts held (rara_admission_freed)
    freed_namespaces text[];
    freed_keys text[];
    freed_maxes integer[];
BEGIN
    IF NOT rara_reap_turn(p_worker) THEN
        RETURN;  -- another caller's turn this second
    END IF;
    back := rara_db_return();
    -- Recover expired leases, in bounded batches, safely from every worker at once: SKIP
    -- LOCKED picks rows nobody else is touching, and the UPDATE re-checks expiry itself, so a
    -- step that completed (or was heart-beaten) since the scan is never overwritten. Needs no
    -- token: it only ends attempts whose lease already ran out. Not one that expired during
    -- an outage, until the workers had time to renew it after the database's return
    -- (rara_lease_alive).
    -- Backoffs count from the attempt's recorded end, as in rara_step_fail.
    WITH expired AS (
        SELECT s.id, clock_timestamp() AS ended_at FROM rara_steps s
        WHERE s.status = 'running' AND s.lease_expires_at < now()
          AND NOT rara_lease_alive(s.lease_expires_at, s.heartbeat_at, back, now())
        ORDER BY s.lease_expires_at LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), updated AS (
        UPDATE rara_steps s SET
            status = CASE WHEN s.attempt - s.releases < s.max_attempts THEN 'ready'
                          ELSE 'failed' END::rara_step_status,
            available_at = CASE WHEN s.attempt - s.releases < s.max_attempts
                THEN e.ended_at + rara_retry_delay(s.retry_initial_ms, s.retry_max_ms,
                                              s.retry_coefficient, s.attempt - s.releases,
                                              p_jitter)
                ELSE s.available_at END,
            finished_at = CASE WHEN s.attempt - s.releases < s.max_attempts THEN NULL
                               ELSE now() END,
            error = jsonb_build_object('code', 'LEASE_EXPIRED', 'retryable', true,
                'message', 'lease of ' || s.leased_by || ' expired at ' || s.lease_expires_at),
            leased_by = NULL, lease_token = NULL, lease_expires_at = NULL
        FROM expired e
        WHERE s.id = e.id AND s.status = 'running' AND s.lease_expires_at < now()
          AND NOT rara_lease_alive(s.lease_expires_at, s.heartbeat_at, back, now())
        RETURNING s.id, s.run_id, s.key, s.attempt, s.status::text AS status, s.error,
                  s.map_parent, e.ended_at, s.capability, s.namespace, s.concurrency_key,
                  s.concurrency_max
    ), closed AS (
        UPDATE rara_attempts a SET outcome = 'lease_expired', ended_at = u.ended_at,
            ended_by = 'reaper:' || p_worker, error = u.error
        FROM updated u
        WHERE a.step_id = u.id AND a.attempt = u.attempt AND a.outcome = 'running'
    )
    SELECT coalesce(jsonb_agg(jsonb_build_object('id', u.id, 'run_id', u.run_id, 'key', u.key,
                                                 'status', u.status, 'map', u.map_parent)
                              ORDER BY u.run_id),
                    '[]'),
           array_agg(u.capability), array_agg(u.namespace), array_agg(u.concurrency_key),
           array_agg(u.concurrency_max)
    INTO reaped, freed_capabilities, freed_namespaces, freed_keys, freed_maxes FROM updated u;
    IF reaped <> '[]' THEN  -- what the reaped attempts held may let a waiting step start
        PERFORM rara_admission_freed(freed_capabilities, freed_namespaces, freed_keys,
                                     freed_maxes);
    END IF;
    FOR step IN
        SELECT * FROM jsonb_to_recordset(reaped) AS r(id bigint, run_id bigint, key text,
                                                      status text, map bigint)
    LOOP
        deltas := deltas || rara_step_end_deltas(step.run_id, step.key, step.status);
        IF step.map IS NOT NULL AND step.status = 'failed' THEN
            map_ends := map_ends || jsonb_build_array(jsonb_build_object(
                'map', step.map, 'succeeded', 0, 'failed', 1));
        END IF;
        id := step.id;
        status := step.status;
        RETURN NEXT;
    END LOOP;
    IF map_ends <> '[]' THEN
        deltas := deltas || rara_map_children_ended(map_ends);
    END IF;
    PERFORM rara_run_count(deltas);  -- the runs last, in id order
    IF jsonb_array_length(reaped) >= p_limit THEN
        -- A full batch: more may have expired. The turn is handed back, so that the next
        -- caller (this worker, whose reaper calls again at once) reaps on.
        UPDATE rara_reaper_turn SET taken_at = '-infinity' WHERE only_row;
    END IF;
END $$;
SELECT rara_grant('rara_step_reap_expired', 'rara_worker');
