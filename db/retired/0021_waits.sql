-- Durable waits and approval gates (docs/waits.md, decision 0013).
--
-- A wait step runs nothing: no capability of a worker, no lease, no slot, no pod. Once its
-- dependencies succeeded it stays `blocked` and gains a row in rara_waits (the trigger below,
-- whichever path unblocked it: a batch of ends, a map step, a start, a resume); the database
-- ends it (blocked -> succeeded | failed, as a map step ends) when its time comes
-- (rara_waits_fire, which any worker runs), when its signal arrives (rara_run_signal), or
-- when a person decides (rara_approval_decide). Its dependants then become ready in the same
-- statement path as after any other step's end (rara_step_unblock). A row in rara_waits is
-- what "waiting" means; so the step's status enum is unchanged, and with it every index
-- predicate and every worker of the previous release.

-- The step's rule, from its version's step rows (rara_spec_steps below); NULL: a step that runs.
--   {"kind": "timer", "for_ms": N} | {"kind": "timer", "at": "<timestamptz>"} (from `until:`)
--   {"kind": "signal", "signal": NAME, "timeout_ms": N|null, "on_timeout": "fail"|"succeed"}
--   {"kind": "approval", "show": [...], "approvers": [...], "timeout_ms": N|null,
--    "on_reject": "fail"|"cancel", "on_timeout": "fail"|"cancel"}
ALTER TABLE rara_steps ADD COLUMN wait jsonb;

CREATE TABLE rara_waits (
    step_id   bigint PRIMARY KEY REFERENCES rara_steps (id) ON DELETE CASCADE,
    run_id    bigint NOT NULL REFERENCES rara_runs (id) ON DELETE CASCADE,
    namespace text NOT NULL,
    kind      text NOT NULL CHECK (kind IN ('timer', 'signal', 'approval')),
    signal    text,               -- the name a signal wait ends on
    due_at    timestamptz,        -- a timer's time, or a signal's or approval's deadline
    began_at  timestamptz NOT NULL DEFAULT now()
);
-- The firing's one probe: the earliest due rows. A wait without deadline is not in it, so
-- 10,000 runs waiting for signals cost the firing nothing at all.
CREATE INDEX rara_waits_due ON rara_waits (due_at) WHERE due_at IS NOT NULL;
CREATE INDEX rara_waits_run ON rara_waits (run_id);

-- Signals accepted, once per (run, key): a repeated key is the same signal (its answer is the
-- first's), whoever sends it and however often.
CREATE TABLE rara_signals (
    run_id    bigint NOT NULL REFERENCES rara_runs (id) ON DELETE CASCADE,
    key       text NOT NULL CHECK (length(key) BETWEEN 1 AND 200),
    namespace text NOT NULL,
    name      text NOT NULL,
    payload   jsonb,
    step_id   bigint NOT NULL REFERENCES rara_steps (id) ON DELETE CASCADE,
    sent_by   text NOT NULL,
    sent_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, key)
);

-- An approval gate: what it shows, frozen when it began waiting (the evidence a decision is
-- made on is the evidence recorded with it), who may decide, and the decision, made once.
CREATE TABLE rara_approvals (
    step_id       bigint PRIMARY KEY REFERENCES rara_steps (id) ON DELETE CASCADE,
    run_id        bigint NOT NULL REFERENCES rara_runs (id) ON DELETE CASCADE,
    namespace     text NOT NULL,
    step_key      text NOT NULL,
    evidence      jsonb NOT NULL,
    approvers     text[] NOT NULL,
    requested_at  timestamptz NOT NULL DEFAULT now(),
    decision      text CHECK (decision IN ('approved', 'rejected', 'timed_out')),
    decided_by    text,           -- the person: the login, or the UI's authenticated identity
    decided_login text,           -- the database login that recorded it
    decided_at    timestamptz,
    reason        text CHECK (length(reason) <= 2000),
    CHECK ((decision IS NULL) = (decided_at IS NULL))
);
CREATE INDEX rara_approvals_open ON rara_approvals (namespace, requested_at)
    WHERE decision IS NULL;
CREATE INDEX rara_approvals_run ON rara_approvals (run_id);

-- A team sees its own waits, signals and approvals (migration 0018's rule).
DO $$
DECLARE
    tab text;
BEGIN
    FOREACH tab IN ARRAY ARRAY['rara_waits', 'rara_signals', 'rara_approvals'] LOOP
        EXECUTE format('CREATE POLICY %I ON %I FOR SELECT USING '
                       '((SELECT rara_caller_namespaces()) @> ''{*}'' '
                       'OR namespace = ANY ((SELECT rara_caller_namespaces())::text[]))',
                       tab || '_read', tab);
        IF (SELECT c.relrowsecurity FROM pg_class c WHERE c.oid = 'rara_runs'::regclass) THEN
            EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', tab);
        END IF;
    END LOOP;
END $$;

-- A wait step ends without running, from blocked, as a map step does (rara.states has the same
-- rule); every other step's moves are unchanged.
CREATE OR REPLACE FUNCTION rara_check_step_transition() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT (rara_step_transition_allowed(OLD.status, NEW.status)
            OR ((NEW.map_over IS NOT NULL OR NEW.wait IS NOT NULL) AND OLD.status = 'blocked'
                AND NEW.status IN ('succeeded', 'failed'))) THEN
        RAISE EXCEPTION 'illegal step transition % -> % (step %)', OLD.status, NEW.status, OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'rara_step_transition';
    END IF;
    RETURN NEW;
END $$;

-- The checks of 0012 stay whole under a new name; rara_spec_steps checks the wait and approval
-- fields around them, gives those steps the database's own capability (a wait step names none:
-- rara.wait@1, rara.approval@1, which no worker may serve), and adds each row's `wait` rule.
ALTER FUNCTION rara_spec_steps(jsonb) RENAME TO rara_spec_run_steps;

CREATE FUNCTION rara_spec_wait(p_step jsonb, p_what text) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    -- (a field set to null is absent: a client that writes every default sends them)
    wait jsonb := jsonb_strip_nulls(nullif(p_step -> 'wait', 'null'));
    approval jsonb := jsonb_strip_nulls(nullif(p_step -> 'approval', 'null'));
    extra text;
    shown text;
    depends jsonb := coalesce(nullif(p_step -> 'dependsOn', 'null'), '[]');
BEGIN
    -- A step's wait rule (NULL: a step that runs), every field checked and named.
    IF wait IS NULL AND approval IS NULL THEN
        IF p_step ->> 'capability' IN ('rara.wait@1', 'rara.approval@1') THEN
            RAISE EXCEPTION '%.capability: % is the database''s own (wait: or approval:)',
                p_what, p_step ->> 'capability' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RETURN NULL;
    END IF;
    IF wait IS NOT NULL AND approval IS NOT NULL THEN
        RAISE EXCEPTION '%: wait and approval: a step is one or the other', p_what
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- (absent, null or empty: what a client that writes every default sends)
    SELECT string_agg(f.key, ', ') INTO extra FROM jsonb_each(p_step) AS f
    WHERE (f.key IN ('map', 'cache', 'concurrency', 'timeout', 'heartbeatTimeout', 'secrets',
                     'inputSchema')
           AND f.value NOT IN ('null', '{}'))
       OR (f.key = 'resources' AND jsonb_strip_nulls(f.value) NOT IN ('{}', '{"gpu": 0}'))
       OR (f.key = 'executor' AND f.value <> '"inprocess"');
    IF extra IS NOT NULL THEN
        RAISE EXCEPTION '%: % do nothing for a step that runs nothing (remove them)', p_what,
            extra USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF wait IS NOT NULL THEN
        IF jsonb_typeof(wait) <> 'object' THEN
            RAISE EXCEPTION '%.wait: must be a mapping (for:, until: or signal:)', p_what
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        SELECT string_agg(k, ', ') INTO extra FROM jsonb_object_keys(wait) AS k
        WHERE k NOT IN ('for', 'until', 'signal', 'timeout', 'onTimeout');
        IF extra IS NOT NULL THEN
            RAISE EXCEPTION '%.wait: unknown field %', p_what, extra
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF (wait ? 'for')::integer + (wait ? 'until')::integer + (wait ? 'signal')::integer <> 1
        THEN
            RAISE EXCEPTION '%.wait: needs exactly one of for:, until: and signal:', p_what
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF wait ? 'signal' THEN
            IF jsonb_typeof(wait -> 'signal') <> 'string'
               OR NOT (wait ->> 'signal') ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$' THEN
                RAISE EXCEPTION '%.wait.signal: must be a name (letters, digits, . _ -)', p_what
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            IF coalesce(wait ->> 'onTimeout', 'fail') NOT IN ('fail', 'succeed') THEN
                RAISE EXCEPTION '%.wait.onTimeout: must be fail or succeed', p_what
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            RETURN jsonb_build_object(
                'kind', 'signal', 'signal', wait ->> 'signal',
                'timeout_ms', rara_duration_ms(wait -> 'timeout', p_what || '.wait.timeout'),
                'on_timeout', coalesce(wait ->> 'onTimeout', 'fail'));
        END IF;
        IF wait ? 'timeout' OR wait ->> 'onTimeout' = 'succeed' THEN
            RAISE EXCEPTION '%.wait: timeout and onTimeout are for signal waits', p_what
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF wait ? 'for' THEN
            RETURN jsonb_build_object(
                'kind', 'timer',
                'for_ms', rara_duration_ms(wait -> 'for', p_what || '.wait.for'));
        END IF;
        IF jsonb_typeof(wait -> 'until') <> 'string'
           OR NOT (wait ->> 'until') ~ '^input(\.[A-Za-z0-9_-]+)+$' THEN
            RAISE EXCEPTION '%.wait.until: must be input.<path> (a time in the run input)',
                p_what USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RETURN jsonb_build_object('kind', 'timer',
                                  'until', to_jsonb((string_to_array(wait ->> 'until', '.'))[2:]));
    END IF;
    IF jsonb_typeof(approval) <> 'object' THEN
        RAISE EXCEPTION '%.approval: must be a mapping (show:, approvers:, ...)', p_what
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT string_agg(k, ', ') INTO extra FROM jsonb_object_keys(approval) AS k
    WHERE k NOT IN ('show', 'approvers', 'timeout', 'onReject', 'onTimeout');
    IF extra IS NOT NULL THEN
        RAISE EXCEPTION '%.approval: unknown field %', p_what, extra
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF coalesce(jsonb_typeof(nullif(approval -> 'show', 'null')), 'array') <> 'array'
       OR coalesce(jsonb_typeof(nullif(approval -> 'approvers', 'null')), 'array') <> 'array' THEN
        RAISE EXCEPTION '%.approval: show and approvers must be lists', p_what
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR shown IN SELECT jsonb_array_elements(coalesce(nullif(approval -> 'show', 'null'), '[]'))
                        #>> '{}' LOOP
        IF shown IS NULL OR NOT shown ~ '^[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?(\.result(\.[A-Za-z0-9_-]+)*)?$' THEN
            RAISE EXCEPTION '%.approval.show: % is not <step> or <step>.result.<path>',
                p_what, coalesce(shown, 'null') USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF NOT depends ? split_part(shown, '.', 1) THEN
            RAISE EXCEPTION '%.approval.show: shows step %, which is not in its dependsOn',
                p_what, split_part(shown, '.', 1) USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END LOOP;
    IF EXISTS (SELECT FROM jsonb_array_elements(coalesce(nullif(approval -> 'approvers', 'null'),
                                                         '[]')) AS a
               WHERE jsonb_typeof(a) <> 'string' OR length(a #>> '{}') NOT BETWEEN 1 AND 200) THEN
        RAISE EXCEPTION '%.approval.approvers: must be logins or roles (text)', p_what
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF coalesce(approval ->> 'onReject', 'fail') NOT IN ('fail', 'cancel')
       OR coalesce(approval ->> 'onTimeout', 'fail') NOT IN ('fail', 'cancel') THEN
        RAISE EXCEPTION '%.approval: onReject and onTimeout must be fail or cancel', p_what
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN jsonb_build_object(
        'kind', 'approval',
        'show', coalesce(nullif(approval -> 'show', 'null'), '[]'),
        'approvers', coalesce(nullif(approval -> 'approvers', 'null'), '[]'),
        'timeout_ms', rara_duration_ms(approval -> 'timeout', p_what || '.approval.timeout'),
        'on_reject', coalesce(approval ->> 'onReject', 'fail'),
        'on_timeout', coalesce(approval ->> 'onTimeout', 'fail'));
END $$;

CREATE FUNCTION rara_spec_steps(p_spec jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    steps jsonb := p_spec -> 'steps';
    s jsonb;
    what text;
    own text;
    rules jsonb := '[]';
    rule jsonb;
    rows jsonb;
    signals jsonb := '{}';
BEGIN
    -- The step rows of 0012 (rara_spec_run_steps: keys, graph, retries, maps), with each wait
    -- or approval step checked here first and given its capability, and each row's rule.
    IF jsonb_typeof(steps) = 'array' THEN
        FOR i IN 0 .. jsonb_array_length(steps) - 1 LOOP
            s := steps -> i;
            IF jsonb_typeof(s) IS DISTINCT FROM 'object' THEN
                rules := rules || 'null'::jsonb;
                CONTINUE;
            END IF;
            what := format('spec.steps[%s] (step %L)', i, s ->> 'key');
            rule := rara_spec_wait(s, what);
            rules := rules || coalesce(rule, 'null');
            IF rule IS NOT NULL THEN
                own := CASE rule ->> 'kind' WHEN 'approval' THEN 'rara.approval@1'
                                            ELSE 'rara.wait@1' END;
                IF s ? 'capability' AND s -> 'capability' <> to_jsonb(own) THEN
                    RAISE EXCEPTION '%.capability: a % step runs no capability (remove it)',
                        what, CASE WHEN s ? 'wait' THEN 'wait' ELSE 'approval' END
                        USING ERRCODE = 'invalid_parameter_value';
                END IF;
                steps := jsonb_set(steps, ARRAY[i::text], s || jsonb_build_object('capability', own));
                IF rule ? 'signal' THEN
                    IF signals ? (rule ->> 'signal') THEN
                        RAISE EXCEPTION '%.wait.signal: step % waits for signal % already',
                            what, signals ->> (rule ->> 'signal'), rule ->> 'signal'
                            USING ERRCODE = 'invalid_parameter_value';
                    END IF;
                    signals := signals || jsonb_build_object(rule ->> 'signal', s ->> 'key');
                END IF;
            END IF;
        END LOOP;
    END IF;
    rows := rara_spec_run_steps(jsonb_set(p_spec, '{steps}', coalesce(steps, 'null')));
    RETURN (SELECT jsonb_agg(r.row || jsonb_build_object('wait', rules -> (r.n - 1)::integer)
                             ORDER BY r.n)
            FROM jsonb_array_elements(rows) WITH ORDINALITY AS r(row, n));
END $$;

-- A wait step's dependencies all succeeded (inserted so, or its last dependency just ended):
-- it begins to wait. One rule for every path that unblocks a step; a trigger so that no path
-- can forget it. The WHEN clauses are evaluated without calling the function: a step that runs
-- (wait IS NULL) costs nothing here.
CREATE FUNCTION rara_wait_begin() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    rule jsonb := NEW.wait;
    due timestamptz;
BEGIN
    due := CASE
        WHEN rule ? 'at' THEN (rule ->> 'at')::timestamptz
        WHEN rule ? 'for_ms' THEN now() + make_interval(secs => (rule ->> 'for_ms')::numeric / 1000)
        WHEN rule ->> 'timeout_ms' IS NOT NULL
            THEN now() + make_interval(secs => (rule ->> 'timeout_ms')::numeric / 1000)
    END;
    INSERT INTO rara_waits (step_id, run_id, namespace, kind, signal, due_at)
    VALUES (NEW.id, NEW.run_id, NEW.namespace, rule ->> 'kind', rule ->> 'signal', due)
    ON CONFLICT (step_id) DO NOTHING;
    IF rule ->> 'kind' = 'approval' THEN
        INSERT INTO rara_approvals (step_id, run_id, namespace, step_key, evidence, approvers)
        VALUES (NEW.id, NEW.run_id, NEW.namespace, NEW.key,
                rara_approval_evidence(NEW.run_id, rule -> 'show'),
                ARRAY(SELECT jsonb_array_elements_text(rule -> 'approvers')))
        ON CONFLICT (step_id) DO NOTHING;
    END IF;
    IF due IS NOT NULL THEN
        -- Firing loops sleep until the earliest due time they read: this one may be earlier.
        PERFORM pg_notify('rara_waits', '');
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER rara_wait_begin_inserted AFTER INSERT ON rara_steps FOR EACH ROW
    WHEN (NEW.wait IS NOT NULL AND NEW.pending_deps = 0 AND NEW.status = 'blocked')
    EXECUTE FUNCTION rara_wait_begin();
CREATE TRIGGER rara_wait_begin_unblocked AFTER UPDATE OF pending_deps ON rara_steps FOR EACH ROW
    WHEN (NEW.wait IS NOT NULL AND NEW.pending_deps = 0 AND OLD.pending_deps > 0
          AND NEW.status = 'blocked')
    EXECUTE FUNCTION rara_wait_begin();

-- Helpers of the owner's functions: no role may call them (rara_grant with no role).
SELECT rara_grant('rara_spec_wait');
SELECT rara_grant('rara_spec_steps');
SELECT rara_grant('rara_wait_begin');
