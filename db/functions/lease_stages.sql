-- The stages of the lease and the parts of an end: the functions rara_step_lease and
-- rara_step_end_many (lease.sql) call in turn, each deciding one thing, in the order
-- docs/lease-protocol.md tells ("The lease's stages"). Internal: no role may call them
-- (rara_grant with no role); they run as the SECURITY DEFINER function that calls them, under
-- its settings (search_path, enable_seqscan off: the plans of lease.sql's header hold here
-- too). What the lease's stages hand each other are arrays of typed rows (migration 0030):
-- rara_lease_bound (what may still run), rara_lease_lane, rara_lease_cursor and
-- rara_lease_candidate (a ready step found and locked); an end's, rara_step_ended. Each stage
-- is VOLATILE PL/pgSQL, as the statements were when they were the lease's own: every statement
-- takes a fresh snapshot (a count after a lock sees what the lock's previous holder leased),
-- and its plan is kept for the session. tests/db/test_lease_stages.py calls each one directly.
-- Repeatable (rara.pg.migrate): edit in place.

CREATE OR REPLACE FUNCTION rara_lease_room(p_bounds rara_lease_bound[], p_namespace text,
                                           p_capability text)
RETURNS SETOF integer
LANGUAGE sql IMMUTABLE AS $$
    -- How many more of p_namespace's p_capability steps a lease may take, by the capability's
    -- limit and the namespace's quotas (NULL: no bound). A set of one row, SQL, so that it is
    -- inlined into the probes that join it laterally.
    SELECT min(b.free) FROM unnest(p_bounds) AS b
    WHERE (b.namespace IS NULL AND b.capability = p_capability)
       OR (b.namespace = p_namespace AND b.capability IN (p_capability, '*'))
$$;
SELECT rara_grant('rara_lease_room');  -- only through the lease's probes

CREATE OR REPLACE FUNCTION rara_lease_budget(p_capabilities text[])
RETURNS rara_lease_bound[]
LANGUAGE plpgsql AS $$
DECLARE
    bounds rara_lease_bound[] := '{}';
BEGIN
    -- Budget: the capability limits and namespace quotas that apply to the served
    -- capabilities, and how many more steps each lets run now. Limits (docs/limits.md): a
    -- served capability with a limit has its row locked — leasers of one limited capability
    -- take turns; others never touch the table beyond this probe — and its free slots counted
    -- in a later statement, whose snapshot sees the attempts the previous holder of the lock
    -- leased.
    PERFORM 1 FROM rara_capability_limits l WHERE l.capability = ANY (p_capabilities)
    ORDER BY l.capability FOR UPDATE;
    IF FOUND THEN
        bounds := ARRAY(
            SELECT ROW(NULL, l.capability, greatest(0, l.max_running - (
                       SELECT count(*) FROM rara_steps s
                       WHERE s.status = 'running' AND s.capability = l.capability)::integer)
                   )::rara_lease_bound
            FROM rara_capability_limits l WHERE l.capability = ANY (p_capabilities));
    END IF;
    -- Quotas: the same, after the limits (every leaser takes the locks in one order), for the
    -- quotas of the served capabilities in any namespace.
    PERFORM 1 FROM rara_namespace_quotas q
    WHERE q.capability = '*' OR q.capability = ANY (p_capabilities)
    ORDER BY q.namespace, q.capability FOR UPDATE;
    IF FOUND THEN
        bounds := bounds || ARRAY(
            WITH running AS (
                SELECT s.namespace, s.capability, count(*)::integer AS n FROM rara_steps s
                WHERE s.lease_expires_at IS NOT NULL  -- the running steps (their index)
                  AND s.status = 'running'
                GROUP BY s.namespace, s.capability
            )
            SELECT ROW(q.namespace, q.capability, greatest(0, q.max_running - coalesce((
                       SELECT sum(r.n) FROM running r
                       WHERE r.namespace = q.namespace
                         AND (q.capability = '*' OR r.capability = q.capability)), 0))::integer
                   )::rara_lease_bound
            FROM rara_namespace_quotas q
            WHERE q.capability = '*' OR q.capability = ANY (p_capabilities));
    END IF;
    RETURN bounds;
END $$;
SELECT rara_grant('rara_lease_budget');  -- only through rara_step_lease

CREATE OR REPLACE FUNCTION rara_lease_full_keys()
RETURNS text[]
LANGUAGE plpgsql AS $$
BEGIN
    -- The concurrency keys already at their max, which the probes pass by (a hint: what
    -- counts is the lock and count of rara_lease_admit_keys). Only the running steps that
    -- have a key are in this index: none, for a fleet without keys.
    RETURN ARRAY(
        SELECT s.concurrency_key FROM rara_steps s
        WHERE s.lease_expires_at IS NOT NULL AND s.concurrency_key IS NOT NULL
          AND s.status = 'running'
        GROUP BY s.concurrency_key HAVING count(*) >= min(s.concurrency_max));
END $$;
SELECT rara_grant('rara_lease_full_keys');  -- only through rara_step_lease

CREATE OR REPLACE FUNCTION rara_lease_cursors(
    p_capabilities text[], p_executors text[], p_after_namespaces text[],
    p_after_ranks integer[], p_after_ats timestamptz[], p_after_ids bigint[])
RETURNS rara_lease_cursor[]
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    -- The worker's cursors, one row per lane that has one (the lease's arguments are parallel
    -- arrays: the wire format; a pair without a cursor comes with NULLs).
    RETURN ARRAY(
        SELECT ROW(c.capability, c.executor, c.namespace, c.rank, c.at, c.id)::rara_lease_cursor
        FROM unnest(p_capabilities, p_executors, p_after_namespaces, p_after_ranks,
                    p_after_ats, p_after_ids) AS c(capability, executor, namespace, rank, at, id)
        WHERE c.namespace IS NOT NULL);
END $$;
SELECT rara_grant('rara_lease_cursors');  -- only through rara_step_lease

CREATE OR REPLACE FUNCTION rara_lease_draw(p_capabilities text[], p_executors text[],
                                           p_limit integer)
RETURNS rara_lease_lane[]
LANGUAGE plpgsql AS $$
DECLARE
    lanes rara_lease_lane[];
BEGIN
    -- Draw: the lanes the lease's p_limit slots go to, with how many each (docs/namespaces.md,
    -- "Fair share"; docs/decisions/0012-fair-share-lanes.md). Each slot is drawn, a pair by the
    -- sum of its lanes' weights and then a lane of it by its namespace's weight (one probe of
    -- rara_lanes per slot), so the lease probes only the lanes it drew: it costs its size, not
    -- the number of namespaces. One lane in all (a single namespace queued what this worker
    -- serves, as in every fleet without namespaces): every slot is that lane's, and the draw
    -- is skipped (~6% of the cost of a lease of one step; docs/performance.md, "Fixed cost per
    -- call"). Empty: nothing was ever queued for what this worker serves.
    lanes := ARRAY(
        SELECT ROW(l.capability, l.executor, l.namespace, p_limit, l.weight)::rara_lease_lane
        FROM (SELECT DISTINCT p.capability, p.executor
              FROM unnest(p_capabilities, p_executors) AS p(capability, executor)) AS p
        CROSS JOIN LATERAL (
            SELECT l.capability, l.executor, l.namespace, l.weight FROM rara_lanes l
            WHERE l.capability = p.capability AND l.executor = p.executor LIMIT 2) AS l
        LIMIT 2);
    IF cardinality(lanes) > 1 THEN
        lanes := ARRAY(
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
            SELECT ROW(l.capability, l.executor, l.namespace, count(*)::integer,
                       l.weight)::rara_lease_lane
            FROM draw d
            CROSS JOIN LATERAL (SELECT p.* FROM pair p WHERE p.low <= d.r
                                ORDER BY p.low DESC LIMIT 1) AS p
            CROSS JOIN LATERAL (
                SELECT l.capability, l.executor, l.namespace, l.weight FROM rara_lanes l
                WHERE l.capability = p.capability AND l.executor = p.executor
                  AND l.low <= d.r - p.low
                ORDER BY l.low DESC LIMIT 1) AS l
            GROUP BY l.capability, l.executor, l.namespace, l.weight);
    END IF;
    RETURN lanes;
END $$;
SELECT rara_grant('rara_lease_draw');  -- only through rara_step_lease

CREATE OR REPLACE FUNCTION rara_lease_probe(p_lanes rara_lease_lane[],
                                            p_cursors rara_lease_cursor[],
                                            p_bounds rara_lease_bound[], p_full_keys text[])
RETURNS rara_lease_candidate[]
LANGUAGE plpgsql AS $$
BEGIN
    -- Probe (the first round): each lane drawn gives its slots in lease order (priority, then
    -- age: the order within a namespace), from after the worker's cursor in it (the lease key
    -- (-priority, available_at, id) of the last step it leased there: the entries of steps
    -- already leased are not walked over again; what that skips, the worker's periodic scan
    -- from the start finds, rara.worker.lease_cursor). The candidates, locked, in the order
    -- in which they claim slots that a limit or quota shares between namespaces.
    RETURN ARRAY(
        WITH found AS (
            -- (nth: a lane's k-th step, in lease order; no lane gives more than it drew)
            SELECT l.weight, c.*,
                   row_number() OVER (PARTITION BY l.capability, l.executor, l.namespace
                                      ORDER BY c.rank, c.available_at, c.id) AS nth
            FROM (
                SELECT d.*, c.rank, c.at, c.id AS after_id
                FROM unnest(p_lanes) AS d
                LEFT JOIN unnest(p_cursors) AS c
                    ON c.capability = d.capability AND c.executor = d.executor
                   AND c.namespace = d.namespace
            ) AS l
            CROSS JOIN LATERAL rara_lease_room(p_bounds, l.namespace, l.capability) AS room(free)
            CROSS JOIN LATERAL (
                -- One index range scan per lane drawn, SKIP LOCKED so concurrent workers
                -- never wait on each other, no more rows than it drew or a limit or quota
                -- lets run.
                SELECT s.id, s.capability, s.executor, s.namespace, s.concurrency_key,
                       s.concurrency_max, -s.priority AS rank, s.available_at
                FROM rara_steps s
                WHERE s.status = 'ready' AND s.capability = l.capability
                  AND s.executor = l.executor AND s.namespace = l.namespace
                  AND s.available_at <= now()
                  AND (s.concurrency_key IS NULL OR s.concurrency_key <> ALL (p_full_keys))
                  -- the range starts here (-1001: below every rank, see migration 0004)
                  AND (-s.priority, s.available_at, s.id)
                      > (coalesce(l.rank, -1001), coalesce(l.at, '-infinity'),
                         coalesce(l.after_id, 0))
                ORDER BY -s.priority, s.available_at, s.id
                LIMIT least(l.drawn, room.free)
                FOR UPDATE SKIP LOCKED
            ) AS c
        ), arrivals AS (
            -- A lane's k-th step arrives at the k-th event of a Poisson process of its weight;
            -- merged, each next arrival is a lane's with probability weight / Σ weights.
            SELECT f.*, sum(-ln(1.0 - random())) OVER (
                            PARTITION BY f.capability, f.executor, f.namespace ORDER BY f.nth)
                        / f.weight AS arrives
            FROM found f
        )
        SELECT ROW(a.id, a.capability, a.executor, a.namespace, a.concurrency_key,
                   a.concurrency_max)::rara_lease_candidate
        FROM arrivals a ORDER BY a.arrives);
END $$;
SELECT rara_grant('rara_lease_probe');  -- only through rara_step_lease

CREATE OR REPLACE FUNCTION rara_lease_spent(p_lanes rara_lease_lane[],
                                            p_found rara_lease_candidate[])
RETURNS rara_lease_lane[]
LANGUAGE plpgsql AS $$
BEGIN
    -- The lanes drawn that gave fewer candidates than they drew: the walk passes them by.
    IF cardinality(p_lanes) = 0 THEN
        RETURN '{}';  -- a held-back lease drew none
    END IF;
    RETURN ARRAY(
        SELECT d FROM unnest(p_lanes) AS d
        WHERE d.drawn > (SELECT count(*) FROM unnest(p_found) AS f
                         WHERE f.capability = d.capability AND f.executor = d.executor
                           AND f.namespace = d.namespace));
END $$;
SELECT rara_grant('rara_lease_spent');  -- only through rara_step_lease

CREATE OR REPLACE FUNCTION rara_lease_walk(
    p_capabilities text[], p_executors text[], p_cursors rara_lease_cursor[],
    p_bounds rara_lease_bound[], p_full_keys text[], p_passed text[],
    p_spent rara_lease_lane[], p_taken rara_lease_candidate[], p_rejected bigint[],
    p_want integer)
RETURNS rara_lease_candidate[]
LANGUAGE plpgsql AS $$
BEGIN
    -- Walk (the second round, when the probe fell short — a lane drawn had fewer ready steps
    -- than slots, or a limit or quota stopped it — and the whole of a lease into held-back
    -- slots): the pairs in a random order, each pair's lanes from one drawn by weight on in
    -- namespace order, each lane giving what it has until p_want are found — the walk stops
    -- there. Not the lanes spent (p_spent), nor the namespaces passed by (p_passed), nor the
    -- steps already taken or turned away.
    RETURN ARRAY(
        SELECT ROW(c.id, c.capability, c.executor, c.namespace, c.concurrency_key,
                   c.concurrency_max)::rara_lease_candidate
        FROM (
            -- the pairs in a random order, each from a lane drawn by weight on
            SELECT p.capability, p.executor,
                   random() * (SELECT t.low + t.weight FROM rara_lanes t
                               WHERE t.capability = p.capability
                                 AND t.executor = p.executor
                               ORDER BY t.low DESC LIMIT 1) AS start
            FROM (SELECT DISTINCT p.capability, p.executor
                  FROM unnest(p_capabilities, p_executors) AS p(capability, executor)) AS p
            ORDER BY random()
        ) AS p
        CROSS JOIN LATERAL (
            (SELECT l.capability, l.executor, l.namespace FROM rara_lanes l
             WHERE l.capability = p.capability AND l.executor = p.executor
               AND l.low + l.weight > p.start AND l.namespace <> ALL (p_passed)
             ORDER BY l.low)
            UNION ALL
            (SELECT l.capability, l.executor, l.namespace FROM rara_lanes l
             WHERE l.capability = p.capability AND l.executor = p.executor
               AND l.low + l.weight <= p.start AND l.namespace <> ALL (p_passed)
             ORDER BY l.low)
        ) AS l
        LEFT JOIN LATERAL (
            SELECT c.rank, c.at, c.id FROM unnest(p_cursors) AS c
            WHERE c.capability = l.capability AND c.executor = l.executor
              AND c.namespace = l.namespace
            LIMIT 1
        ) AS after ON true
        CROSS JOIN LATERAL rara_lease_room(p_bounds, l.namespace, l.capability) AS room(free)
        CROSS JOIN LATERAL (
            SELECT s.id, s.capability, s.executor, s.namespace, s.concurrency_key,
                   s.concurrency_max
            FROM rara_steps s
            WHERE s.status = 'ready' AND s.capability = l.capability
              AND s.executor = l.executor AND s.namespace = l.namespace
              AND s.available_at <= now()
              AND s.id <> ALL (ARRAY(SELECT t.id FROM unnest(p_taken) AS t) || p_rejected)
              AND (s.concurrency_key IS NULL OR s.concurrency_key <> ALL (p_full_keys))
              AND (-s.priority, s.available_at, s.id)
                  > (coalesce(after.rank, -1001), coalesce(after.at, '-infinity'),
                     coalesce(after.id, 0))
            ORDER BY -s.priority, s.available_at, s.id
            LIMIT least(p_want, room.free)
            FOR UPDATE SKIP LOCKED
        ) AS c
        WHERE NOT EXISTS (SELECT FROM unnest(p_spent) AS x
                          WHERE x.capability = l.capability AND x.executor = l.executor
                            AND x.namespace = l.namespace)
        LIMIT p_want);
END $$;
SELECT rara_grant('rara_lease_walk');  -- only through rara_step_lease

CREATE OR REPLACE FUNCTION rara_lease_admit_keys(
    p_found rara_lease_candidate[], p_taken rara_lease_candidate[],
    OUT admitted rara_lease_candidate[], OUT turned_away bigint[])
LANGUAGE plpgsql AS $$
DECLARE
    locked text[];  -- keys whose lock this lease holds
BEGIN
    -- Admit keys (docs/limits.md, "Concurrency keys"), as the limits are but without waiting:
    -- each candidate's key is locked if no other lease holds it (a key another lease holds is
    -- that lease's to fill: its candidates wait for the next lease), and the attempts of the
    -- locked keys running are counted in a later statement, whose snapshot sees what the
    -- lock's previous holder leased. No more per key than its max, with what this lease took
    -- already (p_taken), in the candidates' order. A candidate without a key is admitted.
    locked := ARRAY(
        SELECT k.key FROM (SELECT DISTINCT f.concurrency_key AS key FROM unnest(p_found) AS f
                           WHERE f.concurrency_key IS NOT NULL ORDER BY 1) AS k
        WHERE pg_try_advisory_xact_lock(hashtext('rara_concurrency_key'), hashtext(k.key)));
    WITH c AS (
        SELECT c.*, row_number() OVER (PARTITION BY c.concurrency_key ORDER BY c.o) AS nth
        FROM unnest(p_found) WITH ORDINALITY
            AS c(id, capability, executor, namespace, concurrency_key, concurrency_max, o)
    ), running AS (
        SELECT s.concurrency_key AS key, count(*)::integer AS n FROM rara_steps s
        WHERE s.lease_expires_at IS NOT NULL AND s.concurrency_key = ANY (locked)
          AND s.status = 'running'
        GROUP BY s.concurrency_key
    ), judged AS (
        SELECT c.*, c.concurrency_key IS NULL OR (
                   c.concurrency_key = ANY (locked)
                   AND c.nth + coalesce(r.n, 0)
                       + (SELECT count(*) FROM unnest(p_taken) AS t
                          WHERE t.concurrency_key = c.concurrency_key)
                       <= c.concurrency_max) AS ok
        FROM c LEFT JOIN running r ON r.key = c.concurrency_key
    )
    SELECT coalesce(array_agg(ROW(j.id, j.capability, j.executor, j.namespace,
                                  j.concurrency_key, j.concurrency_max)::rara_lease_candidate
                              ORDER BY j.o) FILTER (WHERE j.ok), '{}'),
           coalesce(array_agg(j.id ORDER BY j.o) FILTER (WHERE NOT j.ok), '{}')
    INTO admitted, turned_away
    FROM judged j;
END $$;
SELECT rara_grant('rara_lease_admit_keys');  -- only through rara_step_lease

CREATE OR REPLACE FUNCTION rara_lease_fit(p_found rara_lease_candidate[],
                                          p_bounds rara_lease_bound[])
RETURNS rara_lease_candidate[]
LANGUAGE plpgsql AS $$
BEGIN
    -- Fit: a limit or quota shared by several lanes gives its free slots to the candidates in
    -- their order; what finds none stays ready (this lease's lock on it ends with the
    -- transaction).
    RETURN ARRAY(
        WITH c AS (
            SELECT c.*,
                   row_number() OVER (PARTITION BY c.capability ORDER BY c.o) AS of_cap,
                   row_number() OVER (PARTITION BY c.namespace, c.capability ORDER BY c.o)
                       AS of_quota,
                   row_number() OVER (PARTITION BY c.namespace ORDER BY c.o) AS of_ns
            FROM unnest(p_found) WITH ORDINALITY
                AS c(id, capability, executor, namespace, concurrency_key, concurrency_max, o)
        )
        SELECT ROW(c.id, c.capability, c.executor, c.namespace, c.concurrency_key,
                   c.concurrency_max)::rara_lease_candidate
        FROM c
        WHERE NOT EXISTS (
            SELECT FROM unnest(p_bounds) AS b
            WHERE (b.namespace IS NULL AND b.capability = c.capability AND c.of_cap > b.free)
               OR (b.namespace = c.namespace AND b.capability = c.capability
                   AND c.of_quota > b.free)
               OR (b.namespace = c.namespace AND b.capability = '*' AND c.of_ns > b.free))
        ORDER BY c.o);
END $$;
SELECT rara_grant('rara_lease_fit');  -- only through rara_step_lease

CREATE OR REPLACE FUNCTION rara_lease_spend(p_bounds rara_lease_bound[],
                                            p_taken rara_lease_candidate[])
RETURNS rara_lease_bound[]
LANGUAGE plpgsql AS $$
BEGIN
    -- The bounds less what p_taken takes of each: what the next round may still take.
    IF cardinality(p_bounds) = 0 OR cardinality(p_taken) = 0 THEN
        RETURN p_bounds;
    END IF;
    RETURN ARRAY(
        SELECT ROW(b.namespace, b.capability, greatest(0, b.free - (
                   SELECT count(*) FROM unnest(p_taken) AS t
                   WHERE CASE WHEN b.namespace IS NULL THEN t.capability = b.capability
                              ELSE t.namespace = b.namespace
                                   AND b.capability IN (t.capability, '*') END))::integer
               )::rara_lease_bound
        FROM unnest(p_bounds) WITH ORDINALITY AS b(namespace, capability, free, o)
        ORDER BY b.o);
END $$;
SELECT rara_grant('rara_lease_spend');  -- only through rara_step_lease

CREATE OR REPLACE FUNCTION rara_lease_take(p_worker text, p_steps bigint[],
                                           p_lease_seconds double precision)
RETURNS TABLE (id bigint, run_id bigint, key text, capability text, executor text,
               payload jsonb, attempt integer, max_attempts integer, lease_token uuid,
               lease_expires_at timestamptz, timeout_ms integer, heartbeat_timeout_ms integer,
               depends_on text[], run_input jsonb, leased_at timestamptz, checkpoint jsonb,
               inputs jsonb, rank integer, available_at timestamptz, namespace text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    -- Take: the steps p_steps (found, locked and admitted by the stages before) start their
    -- attempt, and the lease's answer is what each attempt starts from.
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
        WHERE s.id = ANY (p_steps)
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
SELECT rara_grant('rara_lease_take');  -- only through rara_step_lease

CREATE OR REPLACE FUNCTION rara_lease_map_input(p_map_parent bigint)
RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
BEGIN
    -- A map child's run input: the run's, without the map's list when the list came from it.
    RETURN (SELECT coalesce(p.map_input, r.input) FROM rara_steps p
            JOIN rara_runs r ON r.id = p.run_id WHERE p.id = p_map_parent);
END $$;
SELECT rara_grant('rara_lease_map_input');  -- only through rara_lease_take

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
SELECT rara_grant('rara_lease_input_fields');  -- only through rara_lease_take

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
SELECT rara_grant('rara_lease_checkpoint');  -- only through rara_lease_take

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
SELECT rara_grant('rara_lease_inputs');  -- only through rara_lease_take

-- The optional parts of an end (rara_step_end_many): what only some successes carry — a cache
-- entry, the digests read, an artifact manifest — and what only some steps have — dependants.
-- Each is a statement of its own, run only for a batch that has it (setting up their plans
-- cost a fifth of ending one step; docs/performance.md, "Fixed cost per call"), and writes
-- only for p_ended, the successes whose fence matched (p_successes: the end's JSON array).

CREATE OR REPLACE FUNCTION rara_end_cache_entries(p_successes jsonb, p_ended rara_step_ended[])
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    -- A cache-enabled step that ran (not one that reused an entry): its entry, under the key
    -- its worker computed from its base and what it read (rara.cache; docs/step-cache.md).
    -- Only for a step whose definition has `cache:` (its payload's, rara_spec_caches), and
    -- with the step row's namespace, capability, key and ttl, never the worker's word: an
    -- entry is found only by steps of the same namespace and capability (cache_find), so a
    -- worker that lies about its own step cannot answer another's. A key already there (of
    -- that namespace and capability) was written by a step that ran at the same time (no
    -- single flight) or replaces an entry whose blobs a worker found missing: the same
    -- inputs, so the newest simply wins.
    IF NOT jsonb_path_exists(p_successes, '$[*] ? (exists(@.cache))') THEN
        RETURN;
    END IF;
    INSERT INTO rara_step_cache AS c (key, namespace, capability, base, reads, step_key, parts,
                                      result, manifest, source_run, source_step, source_attempt,
                                      expires_at)
    SELECT g.cache ->> 'entry', s.namespace, s.capability, g.cache ->> 'base',
           g.cache -> 'reads', s.key, g.cache -> 'entry_parts', g.result,
           coalesce(g.manifest, '[]'), done.run_id, done.id, done.attempt,
           now() + make_interval(
               secs => (s.payload -> 'cache' ->> 'ttl_ms')::double precision / 1000)
    FROM jsonb_to_recordset(p_successes)
        AS g(id bigint, result jsonb, manifest jsonb, cache jsonb, reused_from jsonb)
    JOIN unnest(p_ended) AS done ON done.id = g.id
    JOIN rara_steps s ON s.id = g.id AND jsonb_typeof(s.payload -> 'cache') = 'object'
    WHERE g.cache IS NOT NULL AND g.reused_from IS NULL
    ON CONFLICT (key, namespace, capability) DO UPDATE SET
        base = EXCLUDED.base, reads = EXCLUDED.reads, parts = EXCLUDED.parts,
        result = EXCLUDED.result, manifest = EXCLUDED.manifest,
        source_run = EXCLUDED.source_run, source_step = EXCLUDED.source_step,
        source_attempt = EXCLUDED.source_attempt, created_at = EXCLUDED.created_at,
        expires_at = EXCLUDED.expires_at;
END $$;
SELECT rara_grant('rara_end_cache_entries');  -- only through rara_step_end_many

CREATE OR REPLACE FUNCTION rara_end_lineage(p_successes jsonb, p_ended rara_step_ended[])
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    -- What the attempt read (docs/artifacts.md), only for successes that say: lineage.
    IF NOT jsonb_path_exists(p_successes, '$[*] ? (exists(@.reads))') THEN
        RETURN;
    END IF;
    INSERT INTO rara_step_reads (step_id, digest)
    SELECT done.id, r.digest
    FROM jsonb_to_recordset(p_successes) AS g(id bigint, reads jsonb)
    JOIN unnest(p_ended) AS done ON done.id = g.id
    CROSS JOIN LATERAL jsonb_array_elements_text(g.reads) AS r(digest)
    WHERE g.reads IS NOT NULL
    ON CONFLICT DO NOTHING;
END $$;
SELECT rara_grant('rara_end_lineage');  -- only through rara_step_end_many

CREATE OR REPLACE FUNCTION rara_end_manifests(p_successes jsonb, p_ended rara_step_ended[])
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    -- The artifacts the successes name (most name none): blobs known once, then the
    -- manifest rows that reference them, in one statement.
    IF NOT jsonb_path_exists(p_successes, '$[*] ? (exists(@.manifest))') THEN
        RETURN;
    END IF;
    WITH manifest AS (
        SELECT done.id, done.attempt, m.name, m.digest, m.size, m.media_type
        FROM jsonb_to_recordset(p_successes) AS g(id bigint, manifest jsonb)
        JOIN unnest(p_ended) AS done ON done.id = g.id
        CROSS JOIN LATERAL jsonb_to_recordset(g.manifest)
            AS m(name text, digest text, size bigint, media_type text)
        WHERE g.manifest IS NOT NULL
    ), blobs AS (
        INSERT INTO rara_artifacts (digest, size)
        SELECT DISTINCT m.digest, m.size FROM manifest m
        ON CONFLICT (digest) DO NOTHING
    )
    INSERT INTO rara_step_artifacts (step_id, attempt, name, digest, size, media_type)
    SELECT m.id, m.attempt, m.name, m.digest, m.size, m.media_type FROM manifest m
    ON CONFLICT (step_id, attempt, name) DO NOTHING;
END $$;
SELECT rara_grant('rara_end_manifests');  -- only through rara_step_end_many

CREATE OR REPLACE FUNCTION rara_end_unblock(p_steps bigint[])
RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
    unblocking bigint[];      -- the dependants still blocked, by id
    unblocking_by integer[];  -- and how many of each one's dependencies ended here
    maps_due bigint[];
BEGIN
    -- The dependants of the successes p_steps, each less the dependencies that ended here;
    -- those with none left become ready. Answers the map steps whose upstream all succeeded:
    -- they stay blocked, to be expanded (rara_map_expand). A dependant several of whose
    -- dependencies finish in this batch is updated once, by their count (an UPDATE applies
    -- one joined row per target row). Found by (run_id, key) probes of the finished steps'
    -- dependants, not by a walk over their runs.
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
          WHERE done.id = ANY (p_steps)
          GROUP BY b.id) AS b;
    -- A concurrent change of the dependant is waited for and re-read (pending_deps of the
    -- newest version). (One index scan of the dependants' ids, each row's count found in the
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
    RETURN maps_due;
END $$;
SELECT rara_grant('rara_end_unblock');  -- only through rara_step_end_many
