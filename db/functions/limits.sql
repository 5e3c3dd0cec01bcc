-- Concurrency limits per capability (migration 0009, docs/limits.md): set or removed by the
-- roles that run the fleet (rara_client: `rara limits set`; rara_operator), enforced in the
-- lease (rara_step_lease, lease.sql). Called through db/queries/limits.sql.
-- Repeatable (rara.pg.migrate): edit in place.

CREATE OR REPLACE FUNCTION rara_capability_limit_set(p_capability text, p_max_running integer)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM rara_namespace_check('*');  -- the fleet's capacity: every namespace's
    -- At most p_max_running attempts of p_capability at once (0: none start); NULL: no limit.
    -- Attempts already running above a lowered limit finish; no new one starts until the
    -- running ones are below it.
    IF p_max_running IS NULL THEN
        DELETE FROM rara_capability_limits WHERE capability = p_capability;
    ELSE
        INSERT INTO rara_capability_limits (capability, max_running)
        VALUES (p_capability, p_max_running)
        ON CONFLICT (capability) DO UPDATE SET max_running = EXCLUDED.max_running,
                                               updated_at = now();
    END IF;
    PERFORM rara_admission_bound_changed(NULL, p_capability);
END $$;
SELECT rara_grant('rara_capability_limit_set', 'rara_client', 'rara_operator');

-- Fair share between namespaces (migration 0019, docs/namespaces.md "Fair share"): a
-- namespace's weight, and its quotas — the fleet's business, as the limits are: a team must
-- not raise its own share, so both need every namespace ('*'). Enforced in the lease.

CREATE OR REPLACE FUNCTION rara_namespace_share_set(p_namespace text, p_weight integer)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM rara_namespace_check('*');
    -- p_namespace's weight; NULL: back to 1, every namespace's unless set.
    IF p_weight IS NULL THEN
        DELETE FROM rara_namespace_shares WHERE namespace = p_namespace;
    ELSE
        INSERT INTO rara_namespace_shares (namespace, weight) VALUES (p_namespace, p_weight)
        ON CONFLICT (namespace) DO UPDATE SET weight = EXCLUDED.weight, updated_at = now();
    END IF;
    -- The lease draws lanes by the weights laid out in rara_lanes: lay them out again.
    PERFORM rara_lanes_rebalance(l.capability, l.executor) FROM rara_lanes l
    WHERE l.namespace = p_namespace ORDER BY l.capability, l.executor;
END $$;
SELECT rara_grant('rara_namespace_share_set', 'rara_client', 'rara_operator');

CREATE OR REPLACE FUNCTION rara_namespace_quota_set(p_namespace text, p_capability text,
                                                    p_max_running integer)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM rara_namespace_check('*');
    -- At most p_max_running attempts of p_namespace at once, of p_capability ('*': of all its
    -- capabilities together); NULL: no quota. As with a limit, attempts already running
    -- above a lowered quota finish.
    IF p_max_running IS NULL THEN
        DELETE FROM rara_namespace_quotas
        WHERE namespace = p_namespace AND capability = p_capability;
    ELSE
        INSERT INTO rara_namespace_quotas (namespace, capability, max_running)
        VALUES (p_namespace, p_capability, p_max_running)
        ON CONFLICT (namespace, capability) DO UPDATE SET max_running = EXCLUDED.max_running,
                                                          updated_at = now();
    END IF;
    PERFORM rara_admission_bound_changed(p_namespace, p_capability);
END $$;
SELECT rara_grant('rara_namespace_quota_set', 'rara_client', 'rara_operator');

-- Size limits (docs/limits.md, "Size limits"): the one place each number is kept. The functions
-- data enters by check it first, before any other work (the namespace check included), so a
-- call's cost is bounded by the limit, not by what its caller sent: rara_definition_register
-- (spec_bytes, spec_steps), rara_run_start and rara_run_resume (run_input_bytes),
-- rara_run_signal (signal_payload_bytes), rara_map_expand (map_children), rara_login_limit
-- (statement_timeout_ms). Python's constants (rara.runs.MAX_INPUT_BYTES,
-- rara.waits.MAX_PAYLOAD_BYTES, rara.definitions.parse.MAX_SPEC_BYTES, the model's 1,000 steps)
-- refuse the same before a round trip; tests/security/test_limit_attacks.py fails when they
-- differ from these. Bytes are those of the JSON text as PostgreSQL writes it (`value::text`,
-- UTF-8). SQL and IMMUTABLE: inlined into its callers, a constant.
CREATE OR REPLACE FUNCTION rara_limits()
RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT jsonb_build_object(
        'run_input_bytes', 262144,        -- 256 KiB: a run's parameters; data goes as artifacts
        'signal_payload_bytes', 65536,    -- 64 KiB: what happened, not its bytes
        'spec_bytes', 1000000,            -- a definition's spec, as JSON
        'spec_steps', 1000,               -- steps of one definition (a map counts once)
        'map_children', 100000,           -- children of one map step (the largest measured)
        'statement_timeout_ms', 30000)    -- a client's or reader's login (rara_login_limit)
$$;
SELECT rara_grant('rara_limits', 'rara_reader', 'rara_worker', 'rara_client', 'rara_operator');

CREATE OR REPLACE FUNCTION rara_limit_check(p_what text, p_value bigint, p_unit text,
                                            p_limit text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    -- p_value held to limit p_limit of rara_limits(), the one comparison of every entry
    -- point; over it, one refusal naming the value and the limit: "run input is 524288
    -- bytes; the limit is 262144 bytes (run_input_bytes, rara_limits())".
    IF p_value <= (rara_limits() ->> p_limit)::bigint THEN
        RETURN;
    END IF;
    RAISE EXCEPTION '% is % %; the limit is % % (%, rara_limits())', p_what, p_value, p_unit,
        rara_limits() ->> p_limit, p_unit, p_limit USING ERRCODE = 'program_limit_exceeded';
END $$;
SELECT rara_grant('rara_limit_check');  -- only through the functions data enters by

CREATE OR REPLACE FUNCTION rara_login_limit(p_login text, p_timeout_ms integer DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    -- A login's statements are cancelled after statement_timeout_ms (or p_timeout_ms): a
    -- setting of the login itself, since a group role's settings do not reach its members.
    -- Run by a superuser after CREATE ROLE … LOGIN (it needs CREATEROLE, which the owner has
    -- not; granted to no role), for every login of rara_client and rara_reader
    -- (rara.pg.logins.ensure_login does it for the logins it makes). A session
    -- may still SET its own: a default for every client, not a wall against a hostile login
    -- (docs/limits.md, "Statement timeout").
    EXECUTE format('ALTER ROLE %I SET statement_timeout = %s', p_login,
                   coalesce(p_timeout_ms, (rara_limits() ->> 'statement_timeout_ms')::integer));
END $$;
SELECT rara_grant('rara_login_limit');  -- the owner's

-- Admission freed (docs/lease-protocol.md, "Wake-ups"). A ready step that a capability's limit,
-- its namespace's quota or its concurrency key holds back becomes leasable when a step that
-- counted against the same bound stops running — its own status never changes, so the
-- rara_ready trigger says nothing, and an idle worker would find it only at its fallback
-- poll, long while it listens. Every path by which a step stops running (the ends, a retry,
-- a release, the reaper, a cache deferral) passes its steps here: parallel arrays, one
-- element per step (p_keys and p_maxes NULL for a step without a key). For each step that
-- held a bound a waiting step may need, rara_ready is sent with the capabilities such a step
-- may have: its own, for a limit or a quota of its capability; for a quota of all its
-- namespace's capabilities ('*') or a key (per namespace, shared by a group's steps of any
-- capability), every capability queued in its namespace (its lanes) — a key only when it was
-- full, counting this batch's ends of it (otherwise nothing waited on it). Identical payloads
-- of one transaction are folded by PostgreSQL. A step with none of these (a fleet without
-- limits, quotas or keys) costs this function one probe of each table and sends nothing.
-- NOTIFY is a wake-up, never an authority: the lease's budget and key admission decide.
CREATE OR REPLACE FUNCTION rara_admission_freed(p_capabilities text[], p_namespaces text[],
                                                p_keys text[], p_maxes integer[])
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF cardinality(array_remove(p_keys, NULL)) = 0
       AND NOT EXISTS (SELECT FROM rara_capability_limits l
                       WHERE l.capability = ANY (p_capabilities))
       AND NOT EXISTS (SELECT FROM rara_namespace_quotas q
                       WHERE q.namespace = ANY (p_namespaces)) THEN
        RETURN;  -- (most ends: no bound held)
    END IF;
    PERFORM pg_notify('rara_ready', w.capability)
    FROM (
        SELECT f.capability
        FROM unnest(p_capabilities, p_namespaces) AS f(capability, namespace)
        WHERE EXISTS (SELECT FROM rara_capability_limits l WHERE l.capability = f.capability)
           OR EXISTS (SELECT FROM rara_namespace_quotas q
                      WHERE q.namespace = f.namespace AND q.capability = f.capability)
        UNION
        SELECT l.capability FROM rara_lanes l
        WHERE l.namespace = ANY (ARRAY(
            SELECT f.namespace
            FROM unnest(p_namespaces, p_keys, p_maxes) AS f(namespace, key, max)
            WHERE EXISTS (SELECT FROM rara_namespace_quotas q
                          WHERE q.namespace = f.namespace AND q.capability = '*')
               OR (f.key IS NOT NULL
                   AND (SELECT count(*) FROM rara_steps s
                        WHERE s.lease_expires_at IS NOT NULL AND s.concurrency_key = f.key
                          AND s.status = 'running')
                       + (SELECT count(*) FROM unnest(p_keys) AS k(key) WHERE k.key = f.key)
                       >= f.max)))
    ) AS w;
END $$;
SELECT rara_grant('rara_admission_freed');  -- only through the paths by which a step stops running

-- A step's admission, freed by a change of the bound itself: a limit or quota raised or
-- removed may let a held-back step start (lowered, nothing: sent all the same, it is rare).
CREATE OR REPLACE FUNCTION rara_admission_bound_changed(p_namespace text, p_capability text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('rara_ready', c.capability)
    FROM (SELECT p_capability AS capability WHERE p_capability <> '*'
          UNION
          SELECT l.capability FROM rara_lanes l
          WHERE p_capability = '*' AND l.namespace = p_namespace) AS c;
END $$;
SELECT rara_grant('rara_admission_bound_changed');  -- only through the limits' and quotas' set
