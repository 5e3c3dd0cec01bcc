-- Triggers (migration 0035, docs/triggers.md): applied, paused and deleted by the roles that
-- manage workflows (rara_client: `rara triggers`), and fired by the same roles (the webhook
-- endpoint, rara.triggers.webhook). What an event means (a signature, a payload mapped into a
-- run input) is Python's; these functions store the trigger and keep the one rule of exactly
-- once: an event's record and its run are written in one transaction, under one key. Called
-- through db/queries/triggers.sql (rara.pg.triggers). Repeatable (rara.pg.migrate): edit in place.

CREATE OR REPLACE FUNCTION rara_trigger_apply(
    p_name text, p_kind text, p_definition text, p_version integer, p_input jsonb,
    p_config jsonb, p_suspended boolean, p_spec jsonb, p_namespace text DEFAULT 'default')
RETURNS TABLE (created boolean, changed boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    old record;
BEGIN
    -- Create or change the trigger p_name of p_namespace (its runs start there, of
    -- p_definition). The constant part of every run's input is a run input: held to its
    -- limit here, where it enters; the document to a spec's size. The same spec again
    -- changes nothing.
    PERFORM rara_limit_check('spec.input', octet_length(p_input::text), 'bytes',
                             'run_input_bytes');
    PERFORM rara_limit_check('the trigger document', octet_length(p_spec::text), 'bytes',
                             'spec_bytes');
    PERFORM rara_namespace_check(p_namespace);
    SELECT * INTO old FROM rara_triggers
    WHERE namespace = p_namespace AND name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO rara_triggers (namespace, name, kind, definition, version, input, config,
                                   suspended, spec, next_poll)
        VALUES (p_namespace, p_name, p_kind, p_definition, p_version, p_input, p_config,
                p_suspended, p_spec, CASE WHEN p_kind <> 'webhook' THEN now() END);
        created := true;
        changed := true;
    ELSE
        created := false;
        changed := old.spec IS DISTINCT FROM p_spec;
        IF changed THEN
            -- A watched trigger changed is watched at once (its folder may be another); what
            -- an objects trigger saw stays while its location does, so only what changed
            -- since starts a run.
            UPDATE rara_triggers SET
                kind = p_kind, definition = p_definition, version = p_version,
                input = p_input, config = p_config, suspended = p_suspended, spec = p_spec,
                next_poll = CASE WHEN p_kind <> 'webhook' THEN now() END,
                watch_error = NULL, watch_error_at = NULL,
                updated_at = now()
            WHERE namespace = p_namespace AND name = p_name;
            IF p_kind <> 'objects' OR old.config ->> 'location' IS DISTINCT FROM p_config ->> 'location' THEN
                DELETE FROM rara_trigger_objects
                WHERE namespace = p_namespace AND trigger = p_name;
            END IF;
        END IF;
    END IF;
    RETURN NEXT;
END $$;
SELECT rara_grant('rara_trigger_apply', 'rara_client', 'rara_operator');

CREATE OR REPLACE FUNCTION rara_trigger_suspend(
    p_name text, p_suspended boolean, p_namespace text DEFAULT 'default')
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    -- Pause (p_suspended) or resume a trigger; the spec keeps `suspend` in step, so `show`
    -- and a re-apply agree. It waits for the events being taken now (rara_trigger_take holds
    -- the row FOR SHARE until their commit): once a pause returns, no event starts a run.
    -- NULL: no such trigger; false: it already was.
    PERFORM rara_namespace_check(p_namespace);
    PERFORM 1 FROM rara_triggers WHERE namespace = p_namespace AND name = p_name;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    UPDATE rara_triggers SET
        suspended = p_suspended,
        spec = jsonb_set(spec, '{suspend}', to_jsonb(p_suspended)),
        updated_at = now()
    WHERE namespace = p_namespace AND name = p_name AND suspended <> p_suspended;
    RETURN FOUND;
END $$;
SELECT rara_grant('rara_trigger_suspend', 'rara_client', 'rara_operator');

CREATE OR REPLACE FUNCTION rara_trigger_delete(p_name text, p_namespace text DEFAULT 'default')
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM rara_namespace_check(p_namespace);
    -- The trigger and its event history go; the runs it started stay. False: none was.
    DELETE FROM rara_triggers WHERE namespace = p_namespace AND name = p_name;
    RETURN FOUND;
END $$;
SELECT rara_grant('rara_trigger_delete', 'rara_client', 'rara_operator');

CREATE OR REPLACE FUNCTION rara_trigger_take(
    p_name text, p_event_key text, p_namespace text DEFAULT 'default')
RETURNS TABLE (kind text, definition text, version integer, input jsonb, config jsonb,
               suspended boolean, started_run_id bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
BEGIN
    -- The trigger an event is for, its row held FOR SHARE until the caller's commit: events
    -- of one trigger are taken side by side, and a pause, a change or a delete waits for
    -- them, so what an event starts is what the trigger said when it came. started_run_id:
    -- the run an earlier delivery of this event (p_event_key) started, if any. No row: no
    -- such trigger in p_namespace.
    PERFORM rara_namespace_check(p_namespace);
    RETURN QUERY
        SELECT t.kind, t.definition, t.version, t.input, t.config, t.suspended,
               (SELECT e.run_id FROM rara_trigger_events e
                WHERE e.namespace = t.namespace AND e.trigger = t.name
                  AND e.event_key = p_event_key AND e.outcome = 'started')
        FROM rara_triggers t
        WHERE t.namespace = p_namespace AND t.name = p_name
        FOR SHARE OF t;
END $$;
SELECT rara_grant('rara_trigger_take', 'rara_client', 'rara_operator');

CREATE OR REPLACE FUNCTION rara_trigger_event_record(
    p_name text, p_event_key text, p_run_id bigint, p_reason text,
    p_namespace text DEFAULT 'default')
RETURNS TABLE (outcome text, run_id bigint, seen integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
BEGIN
    -- An event of trigger p_name, in the transaction that took the trigger
    -- (rara_trigger_take) and started its run: p_run_id, or p_reason why none. The same
    -- event again counts one more delivery; a run it started stays its run (a later refusal
    -- of the same event, the trigger changed meanwhile, does not undo it), and a refused
    -- event that now starts a run is started.
    PERFORM rara_namespace_check(p_namespace);
    IF (p_run_id IS NULL) = (p_reason IS NULL) THEN
        RAISE EXCEPTION 'an event starts a run or is refused with a reason, not both'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY
        INSERT INTO rara_trigger_events AS e (namespace, trigger, event_key, outcome, run_id,
                                              reason)
        VALUES (p_namespace, p_name, p_event_key,
                CASE WHEN p_run_id IS NULL THEN 'refused' ELSE 'started' END, p_run_id,
                left(p_reason, 2000))
        ON CONFLICT (namespace, trigger, event_key) DO UPDATE SET
            seen = e.seen + 1,
            last_at = now(),
            outcome = CASE WHEN e.outcome = 'started' THEN e.outcome ELSE excluded.outcome END,
            run_id = CASE WHEN e.outcome = 'started' THEN e.run_id ELSE excluded.run_id END,
            reason = CASE WHEN e.outcome = 'started' THEN NULL ELSE excluded.reason END
        RETURNING e.outcome, e.run_id, e.seen;
END $$;
SELECT rara_grant('rara_trigger_event_record', 'rara_client', 'rara_operator');

CREATE OR REPLACE FUNCTION rara_trigger_watch_claim(p_limit integer)
RETURNS TABLE (namespace text, name text, kind text, definition text, version integer,
               input jsonb, config jsonb, passes bigint, created_at timestamptz,
               db_now timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
BEGIN
    -- Up to p_limit watched triggers (objects, release, run) due for a pass, of the caller's
    -- namespaces, their rows locked until the caller's commit: SKIP LOCKED, so watchers never
    -- wait on each other and never judge one trigger at once. The caller finds the trigger's
    -- new events (objects: compared with rara_trigger_objects; releases and runs:
    -- rara_trigger_upstream), starts their runs, records them and ends the pass
    -- (rara_trigger_watch_decide) in the same transaction.
    RETURN QUERY
        SELECT t.namespace, t.name, t.kind, t.definition, t.version, t.input, t.config,
               t.passes, t.created_at, now()
        FROM rara_triggers t
        WHERE t.next_poll <= now() AND NOT t.suspended
          AND ((SELECT rara_caller_namespaces()) @> '{*}'
               OR t.namespace = ANY ((SELECT rara_caller_namespaces())::text[]))
        ORDER BY t.next_poll
        LIMIT p_limit
        FOR UPDATE OF t SKIP LOCKED;
END $$;
SELECT rara_grant('rara_trigger_watch_claim', 'rara_client', 'rara_operator');

CREATE OR REPLACE FUNCTION rara_trigger_watch_decide(
    p_name text, p_objects jsonb, p_changed boolean, p_next_poll timestamptz,
    p_error text, p_namespace text DEFAULT 'default')
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    -- The end of a watching pass over p_name, in the transaction that claimed it: for an
    -- objects trigger, p_objects ([{key, digest, size, fingerprint}]) is what it saw new or
    -- different (a changed
    -- fingerprint with the same bytes too: not a change, but not to be read again), p_changed
    -- whether that made an event (its run started in this transaction), p_error why the pass
    -- could not watch (NULL: it did). The trigger is due again at p_next_poll.
    PERFORM rara_namespace_check(p_namespace);
    IF NOT EXISTS (SELECT FROM rara_triggers
                   WHERE namespace = p_namespace AND name = p_name AND kind <> 'webhook') THEN
        RAISE EXCEPTION 'no watched trigger % in namespace %', p_name, p_namespace
            USING ERRCODE = 'no_data_found';
    END IF;
    INSERT INTO rara_trigger_objects AS o (namespace, trigger, key, digest, size, fingerprint)
    SELECT p_namespace, p_name, x.key, x.digest, x.size, x.fingerprint
    FROM jsonb_to_recordset(p_objects) AS x(key text, digest text, size bigint, fingerprint text)
    ON CONFLICT (namespace, trigger, key) DO UPDATE SET
        digest = excluded.digest, size = excluded.size, fingerprint = excluded.fingerprint,
        changed_at = CASE WHEN o.digest = excluded.digest THEN o.changed_at ELSE now() END;
    UPDATE rara_triggers SET
        next_poll = p_next_poll,
        passes = passes + CASE WHEN p_changed THEN 1 ELSE 0 END,
        watch_error = left(p_error, 2000),
        watch_error_at = CASE WHEN p_error IS NULL THEN NULL ELSE now() END
    WHERE namespace = p_namespace AND name = p_name;
END $$;
SELECT rara_grant('rara_trigger_watch_decide', 'rara_client', 'rara_operator');

CREATE OR REPLACE FUNCTION rara_trigger_upstream(
    p_name text, p_limit integer, p_namespace text DEFAULT 'default')
RETURNS TABLE (event_key text, payload jsonb)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    t record;
BEGIN
    -- The events of a release or run trigger that no pass has recorded yet, oldest first, at
    -- most p_limit: each promotion (and, with onRollback, each rollback) of the release it
    -- names, or each end of a run of the definition it names in the states it names — of its
    -- own namespace, since the trigger was created, and within the last 7 days (a watcher
    -- down longer misses the older ones). An event's key is the move's or the run's id, so a
    -- second pass, a second watcher or a restart finds it recorded (rara_trigger_events).
    PERFORM rara_namespace_check(p_namespace);
    SELECT * INTO t FROM rara_triggers WHERE namespace = p_namespace AND name = p_name;
    IF t.kind = 'release' THEN
        RETURN QUERY
            SELECT 'move-' || m.id, jsonb_build_object(
                       'release', m.name, 'number', m.to_number, 'action', m.action,
                       'movedAt', m.moved_at,
                       'run', r.run_id,
                       'artifacts', COALESCE((
                           SELECT jsonb_agg(jsonb_build_object(
                                      'step', a.step_key, 'name', a.name, 'digest', a.digest,
                                      'size', a.size, 'mediaType', a.media_type)
                                  ORDER BY a.step_key, a.name)
                           FROM rara_release_artifacts a WHERE a.release_id = r.id), '[]'))
            FROM rara_release_moves m
            JOIN rara_releases r
              ON r.namespace = m.namespace AND r.name = m.name AND r.number = m.to_number
            WHERE m.namespace = p_namespace AND m.name = t.config ->> 'name'
              AND (m.action = 'promote' OR (t.config ->> 'onRollback')::boolean)
              AND m.moved_at >= greatest(t.created_at, now() - interval '7 days')
              AND NOT EXISTS (SELECT FROM rara_trigger_events e
                              WHERE e.namespace = p_namespace AND e.trigger = p_name
                                AND e.event_key = 'move-' || m.id)
            ORDER BY m.id
            LIMIT p_limit;
    ELSIF t.kind = 'run' THEN
        RETURN QUERY
            SELECT 'run-' || r.id, jsonb_build_object(
                       'run', r.id, 'definition', v.name, 'status', r.status::text,
                       'finishedAt', r.finished_at)
            FROM rara_runs r
            JOIN rara_definition_versions v ON v.id = r.definition_version_id
            WHERE r.namespace = p_namespace AND v.name = t.config ->> 'definition'
              AND r.status::text IN (SELECT jsonb_array_elements_text(t.config -> 'states'))
              AND r.finished_at >= greatest(t.created_at, now() - interval '7 days')
              AND NOT EXISTS (SELECT FROM rara_trigger_events e
                              WHERE e.namespace = p_namespace AND e.trigger = p_name
                                AND e.event_key = 'run-' || r.id)
            ORDER BY r.finished_at, r.id
            LIMIT p_limit;
    END IF;
END $$;
SELECT rara_grant('rara_trigger_upstream', 'rara_client', 'rara_operator');

CREATE OR REPLACE FUNCTION rara_trigger_batch_add(
    p_name text, p_event_key text, p_batch_key text, p_input jsonb, p_window_seconds integer,
    p_max_delay_seconds integer, p_namespace text DEFAULT 'default')
RETURNS TABLE (batch_id bigint, due_at timestamptz, seen integer, events integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    known record;
    batch record;
BEGIN
    -- A debounced webhook's event p_event_key, in the transaction that took its trigger
    -- (rara_trigger_take): added to the open burst of p_batch_key (opened now if none), whose
    -- run is then due p_window_seconds after this event and at most p_max_delay_seconds after
    -- the burst's first. The same event again counts one more delivery and joins nothing.
    PERFORM rara_namespace_check(p_namespace);
    SELECT e.outcome, e.batch_id INTO known FROM rara_trigger_events e
    WHERE e.namespace = p_namespace AND e.trigger = p_name AND e.event_key = p_event_key
    FOR UPDATE;
    IF FOUND AND known.outcome = 'batched' THEN
        UPDATE rara_trigger_events e SET seen = e.seen + 1, last_at = now()
        WHERE e.namespace = p_namespace AND e.trigger = p_name AND e.event_key = p_event_key;
        RETURN QUERY
            SELECT b.id, b.due_at, e.seen, jsonb_array_length(b.inputs)
            FROM rara_trigger_batches b JOIN rara_trigger_events e ON e.batch_id = b.id
            WHERE b.id = known.batch_id AND e.event_key = p_event_key
              AND e.namespace = p_namespace AND e.trigger = p_name;
        RETURN;
    END IF;
    -- One statement, so two events racing for a burst that is not open yet join one.
    INSERT INTO rara_trigger_batches AS b (namespace, trigger, batch_key, inputs, due_at)
    VALUES (p_namespace, p_name, p_batch_key, jsonb_build_array(p_input),
            now() + make_interval(secs => least(p_window_seconds, p_max_delay_seconds)))
    ON CONFLICT (namespace, trigger, batch_key) WHERE closed_at IS NULL DO UPDATE SET
        inputs = b.inputs || jsonb_build_array(p_input),
        last_at = now(),
        due_at = least(b.opened_at + make_interval(secs => p_max_delay_seconds),
                       now() + make_interval(secs => p_window_seconds))
    RETURNING b.id AS id, b.due_at AS due_at, jsonb_array_length(b.inputs) AS n INTO batch;
    INSERT INTO rara_trigger_events AS e (namespace, trigger, event_key, outcome, batch_id)
    VALUES (p_namespace, p_name, p_event_key, 'batched', batch.id)
    ON CONFLICT (namespace, trigger, event_key) DO UPDATE SET
        outcome = 'batched', batch_id = excluded.batch_id, run_id = NULL, reason = NULL,
        seen = e.seen + 1, last_at = now();
    RETURN QUERY
        SELECT batch.id, batch.due_at, e.seen, batch.n
        FROM rara_trigger_events e
        WHERE e.namespace = p_namespace AND e.trigger = p_name AND e.event_key = p_event_key;
END $$;
SELECT rara_grant('rara_trigger_batch_add', 'rara_client', 'rara_operator');

CREATE OR REPLACE FUNCTION rara_trigger_batch_claim(p_limit integer)
RETURNS TABLE (id bigint, namespace text, trigger text, definition text, version integer,
               input jsonb, config jsonb, inputs jsonb)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
BEGIN
    -- Up to p_limit due bursts of debounced webhook triggers (not paused) of the caller's
    -- namespaces, locked until the caller's commit (SKIP LOCKED): the caller starts each
    -- one's run and closes it (rara_trigger_batch_close) in the same transaction.
    RETURN QUERY
        SELECT b.id, b.namespace, b.trigger, t.definition, t.version, t.input, t.config, b.inputs
        FROM rara_trigger_batches b
        JOIN rara_triggers t ON t.namespace = b.namespace AND t.name = b.trigger
        WHERE b.closed_at IS NULL AND b.due_at <= now() AND NOT t.suspended
          AND ((SELECT rara_caller_namespaces()) @> '{*}'
               OR b.namespace = ANY ((SELECT rara_caller_namespaces())::text[]))
        ORDER BY b.due_at
        LIMIT p_limit
        FOR UPDATE OF b SKIP LOCKED;
END $$;
SELECT rara_grant('rara_trigger_batch_claim', 'rara_client', 'rara_operator');

CREATE OR REPLACE FUNCTION rara_trigger_batch_close(
    p_batch_id bigint, p_run_id bigint, p_reason text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    b record;
BEGIN
    -- A due burst ended by its run (p_run_id, started in this transaction) or its refusal
    -- (p_reason); its events take that outcome, so a redelivery of one finds the run.
    SELECT * INTO b FROM rara_trigger_batches WHERE id = p_batch_id AND closed_at IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no open trigger batch %', p_batch_id USING ERRCODE = 'no_data_found';
    END IF;
    PERFORM rara_namespace_check(b.namespace);
    IF (p_run_id IS NULL) = (p_reason IS NULL) THEN
        RAISE EXCEPTION 'a batch starts a run or is refused with a reason, not both'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE rara_trigger_batches SET closed_at = now(), run_id = p_run_id,
                                    reason = left(p_reason, 2000)
    WHERE id = p_batch_id;
    UPDATE rara_trigger_events SET
        outcome = CASE WHEN p_run_id IS NULL THEN 'refused' ELSE 'started' END,
        run_id = p_run_id, reason = left(p_reason, 2000)
    WHERE batch_id = p_batch_id;
END $$;
SELECT rara_grant('rara_trigger_batch_close', 'rara_client', 'rara_operator');
