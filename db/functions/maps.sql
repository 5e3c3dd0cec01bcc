-- Map steps (migration 0008, docs/map-steps.md): expanding a map step into its children, and
-- ending it when they ended. Internal: called only by the functions that start runs and end
-- steps (runs.sql, lease.sql), inside their transactions; granted to nobody.
-- Each returns the run count deltas of what it changed (rara_run_count's format, with `total`
-- for steps added to the run), which its caller counts last, with everything else it ended.
-- Locks: a batch of ends takes every step row it may write first, in id order — a map step's
-- before its children's (rara_step_end_lock) — and the map's end cancels waiting children
-- with SKIP LOCKED, never waiting on one; then the runs'.
-- Repeatable (rara.pg.migrate): edit in place.

CREATE OR REPLACE FUNCTION rara_map_expand(p_map bigint)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    map record;
    list jsonb;
    rest jsonb;     -- the run input without the list
    total integer;
    ready integer;
BEGIN
    -- The map step's upstream succeeded (or it has none): its list becomes its children. The
    -- first map_max_parallel of them (1,000 when unset) are inserted ready now; the rest wait
    -- as elements of the list, in slices (rara_map_lists, migration 0011), each inserted when
    -- a slot frees. All of them count in the run's steps_total from now. The window is also
    -- what keeps a big map fair to other runs: a child made ready later queues behind
    -- whatever became ready before it, so a run started behind the map waits for at most one
    -- window of its children.
    SELECT * INTO map FROM rara_steps WHERE id = p_map FOR UPDATE;
    IF map.map_over[1] = '$input' THEN
        SELECT r.input #> map.map_over[2:],
               CASE WHEN cardinality(map.map_over) > 1 THEN r.input #- map.map_over[2:]
                    ELSE '{}' END
        INTO list, rest FROM rara_runs r WHERE r.id = map.run_id;
        UPDATE rara_steps SET map_input = rest WHERE id = p_map;
    ELSE
        SELECT s.result #> map.map_over[2:] INTO list
        FROM rara_steps s WHERE s.run_id = map.run_id AND s.key = map.map_over[1];
    END IF;
    IF list IS NULL OR jsonb_typeof(list) <> 'array' THEN
        RETURN rara_map_fail(map.id, jsonb_build_object(
            'code', 'MAP_NOT_A_LIST', 'retryable', false,
            'message', format('map.over %s is %s, not a list', rara_map_over_text(map.map_over),
                              coalesce(jsonb_typeof(list), 'missing'))));
    END IF;
    total := jsonb_array_length(list);
    -- At most map_children children (rara_limits): a longer list fails the map before any
    -- child is written, as a list that is not one does (docs/map-steps.md, "How many").
    IF total > (rara_limits() ->> 'map_children')::integer THEN
        RETURN rara_map_fail(map.id, jsonb_build_object(
            'code', 'MAP_TOO_LARGE', 'retryable', false,
            'message', format('map.over %s has %s elements; the limit is %s children per map'
                              ' step (map_children, rara_limits())',
                              rara_map_over_text(map.map_over), total,
                              rara_limits() ->> 'map_children')));
    END IF;
    IF total = 0 THEN
        UPDATE rara_steps SET map_total = 0, map_next = 0 WHERE id = p_map;
        RETURN rara_map_succeed(p_map);
    END IF;
    -- The window is inserted now; the rest of the list waits in slices (rara_map_lists) and
    -- each freed slot inserts the next child (rara_map_children_ended): one write per child.
    ready := least(total, coalesce(map.map_max_parallel, 1000));
    PERFORM rara_map_children_insert(p_map, 0, (
        SELECT jsonb_agg(e.item ORDER BY e.n)
        FROM jsonb_array_elements(list) WITH ORDINALITY AS e(item, n) WHERE e.n <= ready));
    IF total > ready THEN
        INSERT INTO rara_map_lists (map_id, first_index, items)
        SELECT p_map, min(e.n) - 1, jsonb_agg(e.item ORDER BY e.n)
        FROM jsonb_array_elements(list) WITH ORDINALITY AS e(item, n)
        WHERE e.n > ready
        GROUP BY (e.n - 1 - ready) / 100;   -- (slices of 100: rara_map_list_slice)
    END IF;
    UPDATE rara_steps SET map_total = total, map_next = ready WHERE id = p_map;
    RETURN jsonb_build_array(jsonb_build_object('run_id', map.run_id, 'total', total));
END $$;
SELECT rara_grant('rara_map_expand');

CREATE OR REPLACE FUNCTION rara_map_children_insert(p_map bigint, p_first integer,
                                                    p_items jsonb)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    -- Children of map step p_map for the elements p_items (a JSON array), the first at index
    -- p_first, inserted ready. A child's depends_on is its map's (its lease's inputs: the
    -- upstream artifacts the map step would have had), with nothing pending and no
    -- dependants: its end is counted in the map (rara_map_children_ended), which unblocks the
    -- map's dependants. Its idempotency key, "<run>:<map>[<index>]", follows from its key.
    -- In a paused run (the map's run_paused: the pause holds the map's lock, which whoever
    -- inserts its children holds too) a child is inserted held, as rara_check_step_transition
    -- holds a step made ready (states.sql): available_at 'infinity', its own kept.
    INSERT INTO rara_steps (run_id, namespace, key, depends_on, dependants, pending_deps,
                            capability, executor, priority, payload, max_attempts,
                            retry_initial_ms, retry_max_ms, retry_coefficient, timeout_ms,
                            heartbeat_timeout_ms, status, map_parent, map_index,
                            concurrency_key, concurrency_max, run_paused, available_at,
                            held_available_at)
    SELECT map.run_id, map.namespace, map.key || '[' || (p_first + e.n - 1) || ']', map.depends_on, '{}', 0,
           map.capability, map.executor, map.priority,
           map.payload || jsonb_build_object(
               'map', jsonb_build_object('item', e.item, 'index', p_first + e.n - 1)),
           map.max_attempts, map.retry_initial_ms, map.retry_max_ms, map.retry_coefficient,
           map.timeout_ms, map.heartbeat_timeout_ms, 'ready', map.id, p_first + e.n - 1,
           map.concurrency_key, map.concurrency_max,  -- (the map's: its run's input)
           map.run_paused,
           CASE WHEN map.run_paused THEN 'infinity' ELSE now() END,
           CASE WHEN map.run_paused THEN now() END
    FROM rara_steps map, jsonb_array_elements(p_items) WITH ORDINALITY AS e(item, n)
    WHERE map.id = p_map;
END $$;
SELECT rara_grant('rara_map_children_insert');

CREATE OR REPLACE FUNCTION rara_map_list_slice(p_map bigint, p_first integer, p_count integer)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    items jsonb;
BEGIN
    -- Elements p_first … p_first + p_count - 1 of the map's list, from the slices that hold
    -- them (each at most 100 elements, so a slice that starts 100 or more before p_first
    -- cannot hold any): a range of the primary key, a few KB read whatever the list's size.
    SELECT jsonb_agg(e.item ORDER BY l.first_index + e.n) INTO items
    FROM rara_map_lists l
    CROSS JOIN LATERAL jsonb_array_elements(l.items) WITH ORDINALITY AS e(item, n)
    WHERE l.map_id = p_map AND l.first_index > p_first - 100
      AND l.first_index < p_first + p_count
      AND l.first_index + e.n - 1 >= p_first AND l.first_index + e.n - 1 < p_first + p_count;
    IF coalesce(jsonb_array_length(items), 0) <> p_count THEN
        RAISE EXCEPTION 'rara: map step %: elements % to % of its list are missing', p_map,
            p_first, p_first + p_count - 1 USING ERRCODE = 'data_corrupted';
    END IF;
    RETURN items;
END $$;
SELECT rara_grant('rara_map_list_slice');

CREATE OR REPLACE FUNCTION rara_map_children_ended(p_ends jsonb)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    ended record;
    map record;
    deltas jsonb := '[]';
    freed integer;
BEGIN
    -- Children ended ({map, succeeded, failed} per map step; a cancelled child counts as
    -- failed): counted in their map step, which then inserts as many of its next children,
    -- ready, as slots freed (from its list's slices: rara_map_list_slice), or ends — failed
    -- at the first child that failed for good, succeeded when every child succeeded. A map
    -- step that already ended (failed, or cancelled with its run) takes no more counts: its
    -- children still ending are counted in the run only.
    FOR ended IN
        SELECT e.map, sum(e.succeeded)::integer AS succeeded, sum(e.failed)::integer AS failed
        FROM jsonb_to_recordset(p_ends) AS e(map bigint, succeeded integer, failed integer)
        GROUP BY e.map ORDER BY e.map
    LOOP
        SELECT * INTO map FROM rara_steps WHERE id = ended.map FOR UPDATE;
        CONTINUE WHEN map.status <> 'blocked';
        UPDATE rara_steps SET map_succeeded = map_succeeded + ended.succeeded,
                              map_failed = map_failed + ended.failed
        WHERE id = map.id
        RETURNING * INTO map;
        IF map.map_failed > 0 THEN
            deltas := deltas || rara_map_fail(map.id, jsonb_build_object(
                'code', 'MAP_CHILD_FAILED', 'retryable', false,
                'message', format('%s of %s children of %s failed', map.map_failed,
                                  map.map_total, map.key)));
        ELSIF map.map_succeeded = map.map_total THEN
            deltas := deltas || rara_map_succeed(map.id);
        ELSE
            freed := least(ended.succeeded, map.map_total - map.map_next);
            IF freed > 0 THEN
                PERFORM rara_map_children_insert(
                    map.id, map.map_next, rara_map_list_slice(map.id, map.map_next, freed));
                UPDATE rara_steps SET map_next = map_next + freed WHERE id = map.id;
            END IF;
        END IF;
    END LOOP;
    RETURN deltas;
END $$;
SELECT rara_grant('rara_map_children_ended');

CREATE OR REPLACE FUNCTION rara_map_succeed(p_map bigint)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    map record;
BEGIN
    -- Every child succeeded: the map step succeeds (its result: how many; the children's
    -- results and artifacts are its downstream's, in index order) and unblocks its dependants.
    UPDATE rara_steps SET status = 'succeeded', finished_at = now(),
                          result = jsonb_build_object('children', map_total)
    WHERE id = p_map RETURNING * INTO map;
    DELETE FROM rara_map_lists WHERE map_id = p_map;
    RETURN jsonb_build_array(jsonb_build_object('run_id', map.run_id, 'succeeded', 1))
        || rara_step_unblock(map.run_id, map.dependants);
END $$;
SELECT rara_grant('rara_map_succeed');

CREATE OR REPLACE FUNCTION rara_map_fail(p_map_id bigint, p_error jsonb)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    p_map record;
    waiting integer;
    downstream integer;
    flagged bigint[];
BEGIN
    -- The map step fails for good (a child failed, or its list is not one): its waiting
    -- children and its downstream are cancelled, its running children asked to stop (NOTIFY
    -- and their next heartbeat, as a run cancel does). SKIP LOCKED: a child another
    -- transaction is ending is left to it (it is then counted in the run only). The children
    -- never inserted (past map_next) count as cancelled too; their elements are dropped.
    UPDATE rara_steps SET status = 'failed', finished_at = now(), error = p_error
    WHERE id = p_map_id RETURNING * INTO p_map;
    DELETE FROM rara_map_lists WHERE map_id = p_map_id;
    WITH cancelled AS (
        UPDATE rara_steps SET status = 'cancelled', finished_at = now(),
            error = jsonb_build_object('code', 'UPSTREAM_FAILED',
                                       'message', 'map ' || p_map.key || ' failed')
        WHERE id IN (SELECT c.id FROM rara_steps c
                     WHERE c.map_parent = p_map.id AND c.status = 'ready'
                     FOR UPDATE SKIP LOCKED)
        RETURNING id
    )
    SELECT count(*) INTO waiting FROM cancelled;
    WITH running AS (
        UPDATE rara_steps SET cancel_requested = true
        WHERE id IN (SELECT c.id FROM rara_steps c
                     WHERE c.map_parent = p_map.id AND c.status = 'running'
                     FOR UPDATE SKIP LOCKED)
        RETURNING id
    )
    SELECT coalesce(array_agg(id), '{}') INTO flagged FROM running;
    IF cardinality(flagged) > 0 THEN
        PERFORM pg_notify('rara_cancel', '');  -- a wake-up without a word, as a run cancel's
    END IF;
    downstream := rara_step_cancel_dependants(p_map.run_id, p_map.key);
    RETURN jsonb_build_array(jsonb_build_object(
        'run_id', p_map.run_id, 'failed', 1,
        'cancelled', waiting + coalesce(p_map.map_total - p_map.map_next, 0) + downstream));
END $$;
SELECT rara_grant('rara_map_fail');

CREATE OR REPLACE FUNCTION rara_step_unblock(p_run_id bigint, p_dependants text[])
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    due bigint[];
    deltas jsonb := '[]';
    map bigint;
BEGIN
    -- One step of the run succeeded outside a completion batch (a map step): its dependants'
    -- pending dependencies drop by one; those with none left become ready, or, map steps,
    -- expand. (A batch of ends does the same set-wise: rara_step_end_many.) Their rows are
    -- locked in id order first, as every end locks step rows (rara_step_end_lock).
    PERFORM 1 FROM rara_steps s
    WHERE s.run_id = p_run_id AND s.key = ANY (p_dependants) AND s.status = 'blocked'
    ORDER BY s.id FOR UPDATE;
    WITH unblocked AS (
        UPDATE rara_steps s SET
            pending_deps = s.pending_deps - 1,
            status = CASE WHEN s.pending_deps = 1 AND s.map_over IS NULL AND s.wait IS NULL
                          THEN 'ready'
                          ELSE 'blocked' END::rara_step_status,
            available_at = now()
        WHERE s.run_id = p_run_id AND s.key = ANY (p_dependants) AND s.status = 'blocked'
        RETURNING s.id, s.pending_deps = 0 AND s.map_over IS NOT NULL AS expands
    )
    SELECT coalesce(array_agg(u.id ORDER BY u.id) FILTER (WHERE u.expands), '{}') INTO due
    FROM unblocked u;
    FOREACH map IN ARRAY due LOOP
        deltas := deltas || rara_map_expand(map);
    END LOOP;
    RETURN deltas;
END $$;
SELECT rara_grant('rara_step_unblock');

CREATE OR REPLACE FUNCTION rara_map_over_text(p_over text[])
RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    -- map.over as the definition wrote it: input.a.b or step.result.a.b.
    SELECT CASE WHEN p_over[1] = '$input' THEN 'input' ELSE p_over[1] || '.result' END
           || CASE WHEN cardinality(p_over) > 1
                   THEN '.' || array_to_string(p_over[2:], '.') ELSE '' END
$$;
SELECT rara_grant('rara_map_over_text');

CREATE OR REPLACE FUNCTION rara_map_summary(p_total integer, p_succeeded integer,
                                            p_failed integer, p_map bigint)
RETURNS text
LANGUAGE plpgsql STABLE AS $$
BEGIN
    -- What `rara runs watch` and `show` print for a map step instead of a line per child.
    -- (PL/pgSQL, not SQL: db/schema.sql creates functions before the tables they read.)
    IF p_total IS NULL THEN
        RETURN 'map: waiting for its list';
    END IF;
    RETURN format('map: %s/%s done, %s running, %s failed', p_succeeded, p_total,
                  (SELECT count(*) FROM rara_steps c
                   WHERE c.map_parent = p_map AND c.status = 'running'), p_failed);
END $$;
SELECT rara_grant('rara_map_summary', 'rara_worker', 'rara_operator', 'rara_client',
                  'rara_reader');
