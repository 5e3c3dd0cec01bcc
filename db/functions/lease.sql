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
LANGUAGE sql STABLE AS $$
    -- When the database last began to accept writes: the wal writer starts then, at the end
    -- of a restart's crash recovery or at a standby's promotion (a failover); the server's
    -- start when the caller may not see the wal writer (an owner without pg_read_all_stats:
    -- a restart is covered, a promotion is not). The leases' outage rule
    -- (rara_lease_alive; docs/lease-protocol.md, "Outages") counts from it.
    SELECT greatest(pg_postmaster_start_time(),
                    (SELECT max(a.backend_start) FROM pg_stat_activity a
                     WHERE a.backend_type = 'walwriter'))
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

CREATE OR REPLACE FUNCTION rara_lease_room(
    p_limited text[], p_slots integer[], p_quota_keys text[], p_quota_free integer[],
    p_namespace text, p_capability text)
RETURNS integer
LANGUAGE sql IMMUTABLE AS $$
    -- How many more of p_namespace's p_capability steps a lease may take, by the capability's
    -- limit and the namespace's quotas (rara_step_lease's arrays; NULL: no bound). SQL, so
    -- that it is inlined into the lease's probes.
    SELECT least(p_slots[array_position(p_limited, p_capability)],
                 p_quota_free[array_position(p_quota_keys, p_namespace || ' ' || p_capability)],
                 p_quota_free[array_position(p_quota_keys, p_namespace || ' *')])
$$;
SELECT rara_grant('rara_lease_room');  -- only through rara_step_lease

CREATE OR REPLACE FUNCTION rara_lease_map_input(p_map_parent bigint)
RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
BEGIN
    -- A map child's run input: the run's, without the map's list when the list came from it.
    RETURN (SELECT coalesce(p.map_input, r.input) FROM rara_steps p
            JOIN rara_runs r ON r.id = p.run_id WHERE p.id = p_map_parent);
END $$;
SELECT rara_grant('rara_lease_map_input');  -- only through rara_step_lease

CREATE OR REPLACE FUNCTION rara_lease_input_fields(p_run_id bigint, p_map_parent bigint,
                                                   p_keys jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
BEGIN
    -- The fields p_keys of a step's run input (a map child's: its map's, without the list),
    -- those the run has: what a step whose inputSchema names its fields is given.
    RETURN (SELECT coalesce(jsonb_object_agg(k.name, i.input -> k.name), '{}')
            FROM (SELECT CASE WHEN p_map_parent IS NULL
                              THEN (SELECT r.input FROM rara_runs r WHERE r.id = p_run_id)
                              ELSE rara_lease_map_input(p_map_parent) END AS input) AS i,
                 jsonb_array_elements_text(p_keys) AS k(name)
            WHERE i.input ? k.name);
END $$;
SELECT rara_grant('rara_lease_input_fields');  -- only through rara_step_lease

CREATE OR REPLACE FUNCTION rara_lease_checkpoint(p_step_id bigint, p_attempt integer)
RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
BEGIN
    -- The latest checkpoint of an attempt before p_attempt: what a retry resumes from.
    RETURN (SELECT jsonb_build_object('attempt', c.attempt, 'seq', c.seq, 'state', c.state,
                                      'digest', c.digest, 'size', a.size)
            FROM rara_checkpoints c LEFT JOIN rara_artifacts a USING (digest)
            WHERE c.step_id = p_step_id AND c.attempt < p_attempt
            ORDER BY c.attempt DESC, c.seq DESC LIMIT 1);
END $$;
SELECT rara_grant('rara_lease_checkpoint');  -- only through rara_step_lease

CREATE OR REPLACE FUNCTION rara_lease_inputs(p_run_id bigint, p_depends_on text[])
RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
BEGIN
    -- Upstream artifacts: the manifests of the succeeded dependencies. STABLE, so it reads
    -- with the lease's snapshot, which sees them: a step is ready only once the transaction
    -- that finished its last dependency (and wrote its manifest) committed. A map step's are
    -- its children's, in index order (under their own keys).
    RETURN (
        SELECT jsonb_agg(jsonb_build_object('key', a.key, 'name', a.name, 'digest', a.digest,
                                            'size', a.size, 'media_type', a.media_type)
                         ORDER BY u.key, a.map_index, a.name)
        FROM unnest(p_depends_on) AS dep(key)
        CROSS JOIN LATERAL (
            SELECT u.* FROM rara_steps u
            WHERE u.run_id = p_run_id AND u.key = dep.key AND u.status = 'succeeded'
            OFFSET 0) AS u
        CROSS JOIN LATERAL (
            SELECT u.map_index, u.key, m.name, m.digest, m.size, m.media_type
            FROM rara_step_artifacts m
            WHERE m.step_id = u.id AND m.attempt = u.attempt
            UNION ALL
            SELECT c.map_index, c.key, m.name, m.digest, m.size, m.media_type
            FROM rara_steps c
            JOIN rara_step_artifacts m ON m.step_id = c.id AND m.attempt = c.attempt
            WHERE u.map_over IS NOT NULL AND c.map_parent = u.id
              AND c.status = 'succeeded') AS a);
END $$;
SELECT rara_grant('rara_lease_inputs');  -- only through rara_step_lease

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
#variable_conflict use_column
DECLARE
    limited text[] := '{}';       -- served capabilities with a limit (rara_capability_limits)
    slots integer[] := '{}';      -- and how many more of each may run now
    quota_keys text[] := '{}';    -- 'namespace capability' of the quotas that apply
    quota_free integer[] := '{}'; -- and how many more each lets run
    drawn_caps text[];            -- the first round's draw: lanes, and slots of each
    drawn_execs text[];
    drawn_nss text[];
    drawn_counts integer[];
    drawn_weights integer[];
    cand_lanes text[];            -- the first round's candidates' lanes
    spent text[] := '{}';         -- lanes ('capability executor namespace') that gave less
    cand_ids bigint[];            -- a round's candidates, in the order they claim slots
    cand_nss text[];
    cand_caps text[];
    cand_keys text[];             -- their concurrency keys (NULL: none) and the keys' max
    cand_maxes integer[];
    taken bigint[] := '{}';       -- what the rounds leased
    taken_keys text[] := '{}';    -- and their concurrency keys
    full_keys text[];             -- keys running at their max when the lease began
    locked_keys text[];           -- keys whose lock this lease holds
    rejected bigint[] := '{}';    -- candidates a key's max turned away
    passed text[] := coalesce(p_except_namespaces, '{}');  -- namespaces this lease passes by
BEGIN
    PERFORM rara_worker_check_login(p_worker);
    IF p_limit < 1 THEN
        RETURN;
    END IF;
    -- Concurrency limits (migration 0009): a served capability with a limit has its row
    -- locked — leasers of one limited capability take turns; others never touch the table
    -- beyond this probe — and its free slots counted in a later statement, whose snapshot
    -- sees the attempts the previous holder of the lock leased.
    PERFORM 1 FROM rara_capability_limits l WHERE l.capability = ANY (p_capabilities)
    ORDER BY l.capability FOR UPDATE;
    IF FOUND THEN
        SELECT array_agg(l.capability), array_agg(greatest(0, l.max_running - (
                   SELECT count(*) FROM rara_steps s
                   WHERE s.status = 'running' AND s.capability = l.capability)::integer))
        INTO limited, slots
        FROM rara_capability_limits l WHERE l.capability = ANY (p_capabilities);
    END IF;
    -- Quotas (migration 0019): the same, after the limits (every leaser takes the locks in one
    -- order), for the quotas of the served capabilities in any namespace.
    PERFORM 1 FROM rara_namespace_quotas q
    WHERE q.capability = '*' OR q.capability = ANY (p_capabilities)
    ORDER BY q.namespace, q.capability FOR UPDATE;
    IF FOUND THEN
        WITH running AS (
            SELECT s.namespace, s.capability, count(*)::integer AS n FROM rara_steps s
            WHERE s.lease_expires_at IS NOT NULL  -- the running steps (their index)
              AND s.status = 'running'
            GROUP BY s.namespace, s.capability
        )
        SELECT array_agg(q.namespace || ' ' || q.capability),
               array_agg(greatest(0, q.max_running - coalesce((
                   SELECT sum(r.n) FROM running r
                   WHERE r.namespace = q.namespace
                     AND (q.capability = '*' OR r.capability = q.capability)), 0))::integer)
        INTO quota_keys, quota_free
        FROM rara_namespace_quotas q
        WHERE q.capability = '*' OR q.capability = ANY (p_capabilities);
    END IF;
    -- Concurrency keys (migration 0020): the keys already at their max, which the probes pass
    -- by (a hint: what counts is the lock and count after them, below). Only the running
    -- steps that have a key are in this index: none, for a fleet without keys.
    full_keys := ARRAY(
        SELECT s.concurrency_key FROM rara_steps s
        WHERE s.lease_expires_at IS NOT NULL AND s.concurrency_key IS NOT NULL
          AND s.status = 'running'
        GROUP BY s.concurrency_key HAVING count(*) >= min(s.concurrency_max));
    -- Fair share (docs/namespaces.md, "Fair share"; docs/decisions/0012-fair-share-lanes.md).
    -- The worker serves (capability, executor kind) pairs — a worker without a gRPC executor
    -- must not lease `executor: grpc` steps of a capability its registry also has — and a
    -- pair's ready steps are one index range per namespace, a lane (migration 0019).
    --
    -- First round: each of the lease's slots is drawn, a pair by the sum of its lanes' weights
    -- and then a lane of it by its namespace's weight (one probe of rara_lanes_draw per slot),
    -- and each lane drawn gives its slots in lease order (priority, then age: the order within
    -- a namespace). So the lease probes only the lanes it drew: it costs its size, not the
    -- number of namespaces. Second round, only when the first fell short (a lane drawn had
    -- fewer ready steps than slots, or a limit or quota stopped it): the pairs' other lanes,
    -- from one drawn by weight on in namespace order, each giving what it has until the lease
    -- is full — the walk stops there.
    --
    -- Per lane an optional cursor (p_after_namespaces names its lane; after_ranks, after_ats,
    -- after_ids; a pair appears once per cursor of its lanes, or once with NULLs) — the lease
    -- key (-priority, available_at, id) of the last step the worker leased of the lane: the
    -- scan starts after it, so the entries of steps already leased are not walked over again
    -- (dead ones that a held xmin horizon keeps in the index). What it skips — a higher
    -- priority or an earlier available_at that arrived behind the cursor — the worker's
    -- periodic scan from the start finds (rara.worker.lease_cursor).
    -- p_except_namespaces: a lease into a worker's held-back slots, for the namespaces with
    -- nothing running on it (docs/namespaces.md, "Held-back slots"): these namespaces' lanes
    -- give nothing, and the lease is the second round alone: a walk of the other lanes from a
    -- point drawn by weight, with no draw per slot for the one or two slots it fills.
    -- One lane in all (a single namespace queued what this worker serves, as in every
    -- fleet without namespaces): every slot is that lane's, and the draw is skipped (~6% of
    -- the cost of a lease of one step; docs/performance.md, "Fixed cost per call").
    IF cardinality(passed) = 0 THEN
        SELECT array_agg(l.capability), array_agg(l.executor), array_agg(l.namespace),
               array_agg(p_limit), array_agg(l.weight)
        INTO drawn_caps, drawn_execs, drawn_nss, drawn_counts, drawn_weights
        FROM (SELECT l.* FROM (SELECT DISTINCT p.capability, p.executor
                               FROM unnest(p_capabilities, p_executors) AS p(capability, executor))
                              AS p
              CROSS JOIN LATERAL (
                  SELECT l.capability, l.executor, l.namespace, l.weight FROM rara_lanes l
                  WHERE l.capability = p.capability AND l.executor = p.executor LIMIT 2) AS l
              LIMIT 2) AS l;
        IF cardinality(drawn_caps) > 1 THEN
            WITH pair AS (
                SELECT p.capability, p.executor,
                       sum(t.total) OVER (ORDER BY p.capability, p.executor) - t.total AS low,
                       sum(t.total) OVER () AS total
                FROM (SELECT DISTINCT p.capability, p.executor
                      FROM unnest(p_capabilities, p_executors) AS p(capability, executor)) AS p
                CROSS JOIN LATERAL (
                    SELECT l.low + l.weight AS total FROM rara_lanes l
                    WHERE l.capability = p.capability AND l.executor = p.executor
                    ORDER BY l.low DESC LIMIT 1) AS t
            ), draw AS MATERIALIZED (
                SELECT random() * (SELECT max(p.total) FROM pair p) AS r
                FROM generate_series(1, p_limit)
            )
            SELECT array_agg(l.capability), array_agg(l.executor), array_agg(l.namespace),
                   array_agg(l.n), array_agg(l.weight)
            INTO drawn_caps, drawn_execs, drawn_nss, drawn_counts, drawn_weights
            FROM (
                SELECT l.capability, l.executor, l.namespace, l.weight, count(*)::integer AS n
                FROM draw d
                CROSS JOIN LATERAL (SELECT p.* FROM pair p WHERE p.low <= d.r
                                    ORDER BY p.low DESC LIMIT 1) AS p
                CROSS JOIN LATERAL (
                    SELECT l.capability, l.executor, l.namespace, l.weight FROM rara_lanes l
                    WHERE l.capability = p.capability AND l.executor = p.executor
                      AND l.low <= d.r - p.low
                    ORDER BY l.low DESC LIMIT 1) AS l
                GROUP BY l.capability, l.executor, l.namespace, l.weight
            ) AS l;
        END IF;
        IF drawn_caps IS NULL THEN
            RETURN;  -- nothing was ever queued for what this worker serves
        END IF;
    END IF;
    FOR round IN CASE WHEN cardinality(passed) = 0 THEN 1 ELSE 2 END..2 LOOP
        IF round = 1 THEN
            WITH found AS (
                -- (nth: a lane's k-th step, in lease order; no lane gives more than it drew)
                SELECT l.executor, l.namespace, l.weight, c.id, c.capability,
                       c.concurrency_key, c.concurrency_max,
                       row_number() OVER (PARTITION BY l.capability, l.executor, l.namespace
                                          ORDER BY c.rank, c.available_at, c.id) AS nth
                FROM (
                    SELECT d.*, c.rank, c.at, c.id
                    FROM unnest(drawn_caps, drawn_execs, drawn_nss, drawn_counts, drawn_weights)
                        AS d(capability, executor, namespace, drawn, weight)
                    LEFT JOIN unnest(p_capabilities, p_executors, p_after_namespaces,
                                     p_after_ranks, p_after_ats, p_after_ids)
                        AS c(capability, executor, namespace, rank, at, id)
                        ON c.capability = d.capability AND c.executor = d.executor
                       AND c.namespace = d.namespace
                ) AS l
                CROSS JOIN LATERAL (
                    -- One index range scan per lane drawn, SKIP LOCKED so concurrent workers
                    -- never wait on each other, no more rows than it drew or a limit or quota
                    -- lets run.
                    SELECT s.id, s.capability, -s.priority AS rank, s.available_at,
                           s.concurrency_key, s.concurrency_max
                    FROM rara_steps s
                    WHERE s.status = 'ready' AND s.capability = l.capability
                      AND s.executor = l.executor AND s.namespace = l.namespace
                      AND s.available_at <= now()
                      AND (s.concurrency_key IS NULL OR s.concurrency_key <> ALL (full_keys))
                      -- the range starts here (-1001: below every rank, see migration 0004)
                      AND (-s.priority, s.available_at, s.id)
                          > (coalesce(l.rank, -1001), coalesce(l.at, '-infinity'),
                             coalesce(l.id, 0))
                    ORDER BY -s.priority, s.available_at, s.id
                    LIMIT least(l.drawn, rara_lease_room(limited, slots, quota_keys, quota_free,
                                                         l.namespace, l.capability))
                    FOR UPDATE SKIP LOCKED
                ) AS c
            ), arrivals AS (
                -- The order in which the candidates claim slots that a limit or quota shares
                -- between namespaces: a lane's k-th step arrives at the k-th event of a
                -- Poisson process of its weight; merged, each next arrival is a lane's with
                -- probability weight / Σ weights.
                SELECT f.*, sum(-ln(1.0 - random())) OVER (
                                PARTITION BY f.capability, f.executor, f.namespace ORDER BY f.nth)
                            / f.weight AS arrives
                FROM found f
            )
            SELECT array_agg(a.id ORDER BY a.arrives), array_agg(a.namespace ORDER BY a.arrives),
                   array_agg(a.capability ORDER BY a.arrives),
                   array_agg(a.concurrency_key ORDER BY a.arrives),
                   array_agg(a.concurrency_max ORDER BY a.arrives),
                   array_agg(a.capability || ' ' || a.executor || ' ' || a.namespace)
            INTO cand_ids, cand_nss, cand_caps, cand_keys, cand_maxes, cand_lanes
            FROM arrivals a;
            -- The lanes that gave less than they drew: the second round passes them by.
            spent := ARRAY(
                SELECT d.capability || ' ' || d.executor || ' ' || d.namespace
                FROM unnest(drawn_caps, drawn_execs, drawn_nss, drawn_counts)
                    AS d(capability, executor, namespace, drawn)
                WHERE d.drawn > (SELECT count(*) FROM unnest(cand_lanes) AS g(lane)
                                 WHERE g.lane = d.capability || ' ' || d.executor || ' '
                                                || d.namespace));
        ELSE
            SELECT array_agg(w.id ORDER BY w.o), array_agg(w.namespace ORDER BY w.o),
                   array_agg(w.capability ORDER BY w.o), array_agg(w.concurrency_key ORDER BY w.o),
                   array_agg(w.concurrency_max ORDER BY w.o)
            INTO cand_ids, cand_nss, cand_caps, cand_keys, cand_maxes
            FROM (
                SELECT l.namespace, c.id, c.capability, c.concurrency_key, c.concurrency_max,
                       row_number() OVER () AS o
                FROM (
                    -- the pairs in a random order, each from a lane drawn by weight on
                    SELECT p.capability, p.executor,
                           random() * (SELECT t.low + t.weight FROM rara_lanes t
                                       WHERE t.capability = p.capability
                                         AND t.executor = p.executor
                                       ORDER BY t.low DESC LIMIT 1) AS start
                    FROM (SELECT DISTINCT p.capability, p.executor
                          FROM unnest(p_capabilities, p_executors) AS p(capability, executor))
                        AS p
                    ORDER BY random()
                ) AS p
                CROSS JOIN LATERAL (
                    (SELECT l.capability, l.executor, l.namespace FROM rara_lanes l
                     WHERE l.capability = p.capability AND l.executor = p.executor
                       AND l.low + l.weight > p.start AND l.namespace <> ALL (passed)
                     ORDER BY l.low)
                    UNION ALL
                    (SELECT l.capability, l.executor, l.namespace FROM rara_lanes l
                     WHERE l.capability = p.capability AND l.executor = p.executor
                       AND l.low + l.weight <= p.start AND l.namespace <> ALL (passed)
                     ORDER BY l.low)
                ) AS l
                LEFT JOIN LATERAL (
                    SELECT c.rank, c.at, c.id
                    FROM unnest(p_capabilities, p_executors, p_after_namespaces,
                                p_after_ranks, p_after_ats, p_after_ids)
                        AS c(capability, executor, namespace, rank, at, id)
                    WHERE c.capability = l.capability AND c.executor = l.executor
                      AND c.namespace = l.namespace
                    LIMIT 1
                ) AS after ON true
                CROSS JOIN LATERAL (
                    SELECT s.id, s.capability, s.concurrency_key, s.concurrency_max
                    FROM rara_steps s
                    WHERE s.status = 'ready' AND s.capability = l.capability
                      AND s.executor = l.executor AND s.namespace = l.namespace
                      AND s.available_at <= now() AND s.id <> ALL (taken)
                      AND s.id <> ALL (rejected)
                      AND (s.concurrency_key IS NULL OR s.concurrency_key <> ALL (full_keys))
                      AND (-s.priority, s.available_at, s.id)
                          > (coalesce(after.rank, -1001), coalesce(after.at, '-infinity'),
                             coalesce(after.id, 0))
                    ORDER BY -s.priority, s.available_at, s.id
                    LIMIT least(p_limit - cardinality(taken),
                                rara_lease_room(limited, slots, quota_keys, quota_free,
                                                l.namespace, l.capability))
                    FOR UPDATE SKIP LOCKED
                ) AS c
                WHERE l.capability || ' ' || l.executor || ' ' || l.namespace <> ALL (spent)
                LIMIT p_limit - cardinality(taken)
            ) AS w;
        END IF;
        IF cand_ids IS NULL THEN
            cand_ids := '{}';
            cand_nss := '{}';
            cand_caps := '{}';
            cand_keys := '{}';
        END IF;
        IF EXISTS (SELECT FROM unnest(cand_keys) AS k WHERE k IS NOT NULL) THEN
            -- Keys, as the limits are but without waiting: each candidate's key is locked if
            -- no other lease holds it (a key another lease holds is that lease's to fill: its
            -- candidates wait for the next lease), and the attempts of the locked keys running
            -- are counted in a later statement, whose snapshot sees what the lock's previous
            -- holder leased. No more per key than its max, in the candidates' order.
            locked_keys := ARRAY(
                SELECT k.key FROM (SELECT DISTINCT k AS key FROM unnest(cand_keys) AS k
                                   WHERE k IS NOT NULL ORDER BY 1) AS k
                WHERE pg_try_advisory_xact_lock(hashtext('rara_concurrency_key'),
                                                hashtext(k.key)));
            WITH c AS (
                SELECT c.*, row_number() OVER (PARTITION BY c.key ORDER BY c.o) AS nth
                FROM unnest(cand_ids, cand_nss, cand_caps, cand_keys, cand_maxes)
                    WITH ORDINALITY AS c(id, namespace, capability, key, max, o)
            ), running AS (
                SELECT s.concurrency_key AS key, count(*)::integer AS n FROM rara_steps s
                WHERE s.lease_expires_at IS NOT NULL AND s.concurrency_key = ANY (locked_keys)
                  AND s.status = 'running'
                GROUP BY s.concurrency_key
            ), judged AS (
                SELECT c.*, c.key IS NULL OR (
                           c.key = ANY (locked_keys)
                           AND c.nth + coalesce(r.n, 0)
                               + (SELECT count(*) FROM unnest(taken_keys) AS t(key)
                                  WHERE t.key = c.key) <= c.max) AS admitted
                FROM c LEFT JOIN running r ON r.key = c.key
            )
            SELECT coalesce(array_agg(j.id ORDER BY j.o) FILTER (WHERE j.admitted), '{}'),
                   coalesce(array_agg(j.namespace ORDER BY j.o) FILTER (WHERE j.admitted), '{}'),
                   coalesce(array_agg(j.capability ORDER BY j.o) FILTER (WHERE j.admitted),
                            '{}'),
                   coalesce(array_agg(j.key ORDER BY j.o) FILTER (WHERE j.admitted), '{}'),
                   rejected || coalesce(array_agg(j.id) FILTER (WHERE NOT j.admitted), '{}')
            INTO cand_ids, cand_nss, cand_caps, cand_keys, rejected
            FROM judged j;
        END IF;
        IF cardinality(cand_ids) > 0
           AND (cardinality(limited) > 0 OR cardinality(quota_keys) > 0) THEN
            -- A limit or quota shared by several lanes: its free slots go to the candidates
            -- in their order; what finds none stays ready (this lease's lock on it ends with
            -- the transaction).
            WITH fit AS (
                SELECT c.*,
                       row_number() OVER (PARTITION BY c.capability ORDER BY c.o) AS of_cap,
                       row_number() OVER (PARTITION BY c.namespace, c.capability ORDER BY c.o)
                           AS of_quota,
                       row_number() OVER (PARTITION BY c.namespace ORDER BY c.o) AS of_ns
                FROM unnest(cand_ids, cand_nss, cand_caps, cand_keys) WITH ORDINALITY
                    AS c(id, namespace, capability, key, o)
            )
            SELECT coalesce(array_agg(f.id ORDER BY f.o), '{}'),
                   coalesce(array_agg(f.namespace ORDER BY f.o), '{}'),
                   coalesce(array_agg(f.capability ORDER BY f.o), '{}'),
                   coalesce(array_agg(f.key ORDER BY f.o), '{}')
            INTO cand_ids, cand_nss, cand_caps, cand_keys
            FROM fit f
            WHERE f.of_cap <= coalesce(slots[array_position(limited, f.capability)], f.of_cap)
              AND f.of_quota <= coalesce(quota_free[array_position(
                      quota_keys, f.namespace || ' ' || f.capability)], f.of_quota)
              AND f.of_ns <= coalesce(quota_free[array_position(
                      quota_keys, f.namespace || ' *')], f.of_ns);
            -- what the round took of each limit and quota
            slots := ARRAY(
                SELECT greatest(0, l.free - (SELECT count(*) FROM unnest(cand_caps) AS g(c)
                                             WHERE g.c = l.capability))::integer
                FROM unnest(limited, slots) WITH ORDINALITY AS l(capability, free, i)
                ORDER BY l.i);
            quota_free := ARRAY(
                SELECT greatest(0, q.free - (
                    SELECT count(*) FROM unnest(cand_nss, cand_caps) AS g(namespace, capability)
                    WHERE q.key IN (g.namespace || ' ' || g.capability, g.namespace || ' *')
                ))::integer
                FROM unnest(quota_keys, quota_free) WITH ORDINALITY AS q(key, free, i)
                ORDER BY q.i);
        END IF;
        taken := taken || cand_ids;
        taken_keys := taken_keys || cand_keys;
        EXIT WHEN cardinality(taken) >= p_limit;
    END LOOP;
    RETURN QUERY
    WITH leased AS (
        -- The attempt starts: a fresh token fences every later write of this attempt.
        UPDATE rara_steps s SET
            status = 'running', attempt = s.attempt + 1, leased_by = p_worker,
            lease_token = gen_random_uuid(),
            lease_expires_at = now() + make_interval(secs => p_lease_seconds),
            heartbeat_at = now(), started_at = coalesce(s.started_at, now()),
            cancel_requested = false
        -- (= ANY and the scalar subqueries below: primary key probes, whatever the planner
        -- guesses of the number of rows leased)
        WHERE s.id = ANY (taken)
        RETURNING s.id, s.run_id, s.key, s.capability, s.executor, s.payload, s.attempt,
                  s.max_attempts, s.lease_token, s.lease_expires_at, s.timeout_ms,
                  s.heartbeat_timeout_ms, s.depends_on, -s.priority AS rank, s.available_at,
                  s.map_parent, s.namespace
    ), history AS (
        -- Ownership history, read by the checker that proves no two owners overlapped.
        -- clock_timestamp(), not now(): the lease's rounds are statements of their own, each
        -- with a fresh snapshot, so a step may have become ready (its previous attempt ended
        -- and committed) after this function began; now() would date the new attempt before
        -- the end of the one it follows (tests/db/test_attempt_times.py).
        INSERT INTO rara_attempts (step_id, attempt, run_id, worker, lease_token, started_at)
        SELECT l.id, l.attempt, l.run_id, p_worker, l.lease_token, clock_timestamp()
        FROM leased l
    ), started_runs AS (
        UPDATE rara_runs SET status = 'running', started_at = now()
        WHERE id = ANY (ARRAY(SELECT l.run_id FROM leased l)) AND status = 'pending'
    )
    SELECT l.id, l.run_id, l.key, l.capability, l.executor, l.payload, l.attempt,
           l.max_attempts, l.lease_token, l.lease_expires_at, l.timeout_ms,
           l.heartbeat_timeout_ms, l.depends_on,
           -- The run input, or of a step whose inputSchema names the fields it reads
           -- (`input_keys`, rara_spec_input_rows) only those: a step is not sent what it
           -- cannot read. A step without one pays a key test of its payload.
           CASE WHEN l.payload ? 'input_keys'
               THEN rara_lease_input_fields(l.run_id, l.map_parent, l.payload -> 'input_keys')
               WHEN l.map_parent IS NULL
               THEN (SELECT r.input FROM rara_runs r WHERE r.id = l.run_id)
               ELSE rara_lease_map_input(l.map_parent)
           END AS run_input,
           now() AS leased_at,
           -- What the attempt starts from, folded in so it starts without another round trip:
           -- a retry's checkpoint, a dependant's upstream artifacts. Functions, called only
           -- when they can find something, rather than subqueries: a subquery's plan is set up
           -- at every execution of the statement, called or not, and theirs were ~10% of the
           -- cost of leasing one step (docs/performance.md, "Fixed cost per call").
           CASE WHEN l.attempt > 1 THEN rara_lease_checkpoint(l.id, l.attempt) END
               AS checkpoint,
           CASE WHEN cardinality(l.depends_on) > 0
               THEN rara_lease_inputs(l.run_id, l.depends_on) END AS inputs,
           l.rank, l.available_at,  -- the worker's next cursor
           l.namespace
    FROM leased l;
EXCEPTION WHEN integrity_constraint_violation THEN
    -- A leased row that breaks a constraint (a step out of attempts, say) fails the lease,
    -- whose writes roll back; PostgreSQL's detail would print that row whole, the token just
    -- drawn included, into the worker's log. The error is raised again as it was, less the
    -- row. (A block with a handler is one subtransaction a call: microseconds, per batch.)
    DECLARE
        failed text;
        message text;
        state text;
        violated text;
        tab text;
    BEGIN
        GET STACKED DIAGNOSTICS failed = PG_EXCEPTION_DETAIL;
        IF failed NOT LIKE 'Failing row contains%' THEN
            RAISE;
        END IF;
        GET STACKED DIAGNOSTICS message = MESSAGE_TEXT, state = RETURNED_SQLSTATE,
                                violated = CONSTRAINT_NAME, tab = TABLE_NAME;
        RAISE EXCEPTION USING MESSAGE = message, ERRCODE = state, CONSTRAINT = violated,
            TABLE = tab, DETAIL = 'the failing row is not shown: it holds a lease token';
    END;
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
    succeeded bigint[];           -- the successes whose fence matched, with their
    succeeded_attempts integer[]; -- attempt, run, key and capability
    succeeded_runs bigint[];
    succeeded_keys text[];
    succeeded_capabilities text[];
    map_ends jsonb := '[]';     -- children ended, per map step (rara_map_children_ended)
    map_ends_of_successes jsonb;
    maps_due bigint[] := '{}';  -- map steps whose upstream all succeeded: to expand
    with_dependants bigint[];   -- the successes that have dependants
    unblocking bigint[];        -- their dependants still blocked, by id
    unblocking_by integer[];    -- and how many of each one's dependencies ended here
    map bigint;
    failing bigint[];           -- the steps of p_others
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
        RETURNING s.id, s.run_id, s.attempt, s.dependants, s.map_parent, s.key, s.capability
    ), closed AS (
        -- clock_timestamp(), here and in every end: the time the end took the step's row, not
        -- when its transaction began. An end that waited for another step's lock is then never
        -- stamped before progress the attempt wrote while it still owned the step
        -- (tests/db/test_attempt_times.py).
        UPDATE rara_attempts a
        SET outcome = 'succeeded', ended_at = clock_timestamp(), ended_by = p_worker
        FROM done WHERE a.step_id = done.id AND a.attempt = done.attempt
    )
    SELECT coalesce(array_agg(done.id), '{}'), coalesce(array_agg(done.attempt), '{}'),
           coalesce(array_agg(done.run_id), '{}'), coalesce(array_agg(done.key), '{}'),
           coalesce(array_agg(done.capability), '{}'),
           coalesce(jsonb_agg(jsonb_build_object('map', done.map_parent, 'succeeded', 1,
                                                 'failed', 0))
                    FILTER (WHERE done.map_parent IS NOT NULL), '[]'),
           coalesce(array_agg(done.id) FILTER (WHERE cardinality(done.dependants) > 0), '{}')
    INTO succeeded, succeeded_attempts, succeeded_runs, succeeded_keys, succeeded_capabilities,
         map_ends_of_successes, with_dependants
    FROM done;
    -- What only some successes carry — a cache entry, the digests read, an artifact manifest —
    -- and what only some steps have — dependants — are statements of their own, run only for
    -- a batch that has them (setting up their plans cost a fifth of ending one step;
    -- docs/performance.md, "Fixed cost per call"). For the successes whose fence matched
    -- above; the manifests before the dependants, whose wait may begin and show them
    -- (rara_wait_begin); all before the runs' locks.
    IF cardinality(succeeded) > 0 AND jsonb_path_exists(
            p_successes, '$[*] ? (exists(@.cache) || exists(@.reads) || exists(@.manifest))')
    THEN
        WITH given AS MATERIALIZED (
            SELECT * FROM jsonb_to_recordset(p_successes)
                AS g(id bigint, result jsonb, manifest jsonb, reads jsonb, cache jsonb,
                     reused_from jsonb)
        ), done AS (
            SELECT * FROM unnest(succeeded, succeeded_attempts, succeeded_runs,
                                 succeeded_keys, succeeded_capabilities)
                AS d(id, attempt, run_id, key, capability)
        ), cached AS (
            -- A cache-enabled step that ran (not one that reused an entry): its entry, under
            -- the key its worker computed from its base and what it read (rara.cache;
            -- docs/step-cache.md). Only for a step whose definition has `cache:` (its
            -- payload's, rara_spec_caches), and with the step row's namespace, capability, key
            -- and ttl, never the worker's word: an entry is found only by steps of the same
            -- namespace and capability (cache_find), so a worker that lies about its own step
            -- cannot answer another's. A key already there (of that namespace and capability)
            -- was written by a step that ran at the same time (no single flight) or replaces
            -- an entry whose blobs a worker found missing: the same inputs, so the newest
            -- simply wins.
            INSERT INTO rara_step_cache AS c (key, namespace, capability, base, reads, step_key,
                                              parts, result, manifest, source_run, source_step,
                                              source_attempt, expires_at)
            SELECT g.cache ->> 'entry', s.namespace, s.capability, g.cache ->> 'base',
                   g.cache -> 'reads', s.key, g.cache -> 'entry_parts', g.result,
                   coalesce(g.manifest, '[]'), done.run_id, done.id, done.attempt,
                   now() + make_interval(
                       secs => (s.payload -> 'cache' ->> 'ttl_ms')::double precision / 1000)
            FROM (SELECT g.id, g.cache, g.result, g.manifest FROM given g
                  WHERE g.cache IS NOT NULL AND g.reused_from IS NULL) AS g
            JOIN done ON done.id = g.id
            JOIN rara_steps s ON s.id = g.id AND jsonb_typeof(s.payload -> 'cache') = 'object'
            ON CONFLICT (key, namespace, capability) DO UPDATE SET
                base = EXCLUDED.base, reads = EXCLUDED.reads, parts = EXCLUDED.parts,
                result = EXCLUDED.result, manifest = EXCLUDED.manifest,
                source_run = EXCLUDED.source_run, source_step = EXCLUDED.source_step,
                source_attempt = EXCLUDED.source_attempt, created_at = EXCLUDED.created_at,
                expires_at = EXCLUDED.expires_at
        ), reads AS (
            -- What the attempt read (migration 0015), only for successes that say: lineage.
            INSERT INTO rara_step_reads (step_id, digest)
            SELECT done.id, r.digest
            FROM (SELECT g.id, g.reads FROM given g WHERE g.reads IS NOT NULL) AS g
            JOIN done ON done.id = g.id
            CROSS JOIN LATERAL jsonb_array_elements_text(g.reads) AS r(digest)
            ON CONFLICT DO NOTHING
        ), manifest AS (
            -- Only the successes that name artifacts (most name none): nothing joined for the
            -- rest.
            SELECT done.id, done.attempt, m.name, m.digest, m.size, m.media_type
            FROM (SELECT g.id, g.manifest FROM given g WHERE g.manifest IS NOT NULL) AS g
            JOIN done ON done.id = g.id
            CROSS JOIN LATERAL jsonb_to_recordset(g.manifest)
                AS m(name text, digest text, size bigint, media_type text)
        ), blobs AS (
            -- Blobs are known once; the manifest rows below reference them in the same
            -- statement.
            INSERT INTO rara_artifacts (digest, size)
            SELECT DISTINCT m.digest, m.size FROM manifest m
            ON CONFLICT (digest) DO NOTHING
        )
        INSERT INTO rara_step_artifacts (step_id, attempt, name, digest, size, media_type)
        SELECT m.id, m.attempt, m.name, m.digest, m.size, m.media_type FROM manifest m
        ON CONFLICT (step_id, attempt, name) DO NOTHING;
    END IF;
    IF cardinality(with_dependants) > 0 THEN
        -- A dependant several of whose dependencies finish in this batch is updated once, by
        -- their count (an UPDATE applies one joined row per target row). Found by (run_id,
        -- key) probes of the finished steps' dependants, not by a walk over their runs.
        SELECT coalesce(array_agg(b.id ORDER BY b.id), '{}'),
               coalesce(array_agg(b.n ORDER BY b.id), '{}')
        INTO unblocking, unblocking_by
        FROM (SELECT b.id, count(*)::integer AS n
              FROM rara_steps done
              CROSS JOIN LATERAL unnest(done.dependants) AS dependant(key)
              CROSS JOIN LATERAL (
                  SELECT b.id FROM rara_steps b
                  WHERE b.run_id = done.run_id AND b.key = dependant.key
                    AND b.status = 'blocked'
                  OFFSET 0) AS b
              WHERE done.id = ANY (with_dependants)
              GROUP BY b.id) AS b;
        -- A concurrent change of the dependant is waited for and re-read (pending_deps of the
        -- newest version). A map step whose upstream all succeeded stays blocked: it expands
        -- below. (One index scan of the dependants' ids, each row's count found in the
        -- arrays: no join, whose plan could probe every id once per dependant.)
        WITH unblocked AS (
            UPDATE rara_steps s SET
                pending_deps = s.pending_deps - unblocking_by[array_position(unblocking, s.id)],
                status = CASE WHEN s.pending_deps
                                   = unblocking_by[array_position(unblocking, s.id)]
                                   AND s.map_over IS NULL AND s.wait IS NULL
                              THEN 'ready'
                              ELSE 'blocked' END::rara_step_status,
                available_at = now()
            WHERE s.id = ANY (unblocking) AND s.status = 'blocked'
            RETURNING s.id, s.pending_deps = 0 AND s.map_over IS NOT NULL AS expands
        )
        SELECT coalesce(array_agg(u.id ORDER BY u.id) FILTER (WHERE u.expands), '{}')
        INTO maps_due FROM unblocked u;
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
    FOREACH id IN ARRAY succeeded LOOP
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
BEGIN
    -- Graceful shutdown: give leases back so another worker takes them at once. A released
    -- attempt is not a failure: `releases` keeps it out of the retry budget.
    RETURN QUERY
    WITH released AS (
        UPDATE rara_steps s SET status = 'ready', available_at = now(),
            releases = s.releases + 1, leased_by = NULL, lease_token = NULL,
            lease_expires_at = NULL
        FROM unnest(p_step_ids, p_tokens) AS h(id, token)
        WHERE s.id = ANY (p_step_ids) AND s.id = h.id AND s.lease_token = h.token
          AND s.leased_by = p_worker AND s.status = 'running'
        RETURNING s.id, s.attempt
    ), closed AS (
        UPDATE rara_attempts a
        SET outcome = 'released', ended_at = clock_timestamp(), ended_by = p_worker
        FROM released r WHERE a.step_id = r.id AND a.attempt = r.attempt
    )
    SELECT r.id FROM released r;
END $$;
SELECT rara_grant('rara_step_release_many', 'rara_worker');

CREATE OR REPLACE FUNCTION rara_step_release_unheld(p_worker text, p_held bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT SET enable_seqscan = off AS $$
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
    RETURN QUERY
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
        RETURNING s.id, s.attempt
    ), closed AS (
        UPDATE rara_attempts a
        SET outcome = 'released', ended_at = clock_timestamp(), ended_by = p_worker
        FROM released r WHERE a.step_id = r.id AND a.attempt = r.attempt
    )
    SELECT r.id FROM released r;
END $$;
SELECT rara_grant('rara_step_release_unheld', 'rara_worker');

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
    back timestamptz := rara_db_return();
BEGIN
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
                  s.map_parent, e.ended_at
    ), closed AS (
        UPDATE rara_attempts a SET outcome = 'lease_expired', ended_at = u.ended_at,
            ended_by = 'reaper:' || p_worker, error = u.error
        FROM updated u
        WHERE a.step_id = u.id AND a.attempt = u.attempt AND a.outcome = 'running'
    )
    SELECT coalesce(jsonb_agg(jsonb_build_object('id', u.id, 'run_id', u.run_id, 'key', u.key,
                                                 'status', u.status, 'map', u.map_parent)
                              ORDER BY u.run_id),
                    '[]')
    INTO reaped FROM updated u;
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
END $$;
SELECT rara_grant('rara_step_reap_expired', 'rara_worker');
