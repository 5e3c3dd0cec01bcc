-- Durable waits, signals and approval decisions (migration 0021, docs/waits.md): how a wait
-- step begins (rara_wait_begin, the function of 0021's triggers) and ends: by its time
-- (rara_waits_fire: every worker runs it, SKIP LOCKED), by its signal (rara_run_signal) or by
-- a decision (rara_approval_decide). An end is a step end like any other: the step's row, then
-- its dependants' (rara_step_unblock) or its downstream's (rara_step_cancel_dependants), then
-- the run, last (rara_run_count). Called through db/queries/waits.sql (rara.pg.waits).
-- Repeatable (rara.pg.migrate): edit in place.

CREATE OR REPLACE FUNCTION rara_approval_evidence(p_run_id bigint, p_show jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
BEGIN
    -- What an approval shows, read when it begins to wait and kept with it: each `show:` entry
    -- (<step> or <step>.result.<path>) with its value now, and the artifacts of the steps shown
    -- (name, digest, size: the bytes a decision is about). Its upstream all succeeded, so each
    -- value is the result of the attempt that counts. (PL/pgSQL: its body names tables, which
    -- a dump of the schema creates after it.)
    RETURN jsonb_build_object(
        'shown', coalesce((
            SELECT jsonb_agg(jsonb_build_object(
                       'show', e.show, 'step', s.key,
                       'value', s.result #> (string_to_array(e.show, '.'))[3:])
                   ORDER BY e.n)
            FROM jsonb_array_elements_text(p_show) WITH ORDINALITY AS e(show, n)
            JOIN rara_steps s ON s.run_id = p_run_id AND s.key = split_part(e.show, '.', 1)),
            '[]'),
        'artifacts', coalesce((
            SELECT jsonb_agg(jsonb_build_object('step', s.key, 'name', a.name,
                                                'digest', a.digest, 'size', a.size)
                             ORDER BY s.key, a.name)
            FROM rara_steps s JOIN rara_step_artifacts a ON a.step_id = s.id
            WHERE s.run_id = p_run_id
              AND s.key IN (SELECT split_part(e, '.', 1) FROM jsonb_array_elements_text(p_show) e)
              AND a.attempt = (SELECT max(a2.attempt) FROM rara_step_artifacts a2
                               WHERE a2.step_id = s.id)),
            '[]'));
END $$;
SELECT rara_grant('rara_approval_evidence');  -- only through rara_wait_begin

CREATE OR REPLACE FUNCTION rara_wait_begin() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    rule jsonb := NEW.wait;
    due timestamptz;
BEGIN
    -- A wait step's dependencies all succeeded (0021's triggers: inserted so, or its last
    -- dependency just ended): it begins to wait.
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
    IF rule ->> 'kind' IN ('signal', 'approval') THEN
        -- Watchers of the run (`rara runs watch`, Client.wait(until_person=True)): it may now
        -- wait for a person. It begins in the transaction of the step it depended on, which
        -- notifies nobody else; identical notifications of a transaction fold into one. Timer
        -- waits stay silent here: time moves them on, and nobody stops for them. No payload:
        -- any login may LISTEN, and the run is not its to know of (docs/least-privilege.md);
        -- a watcher reads its own run again.
        PERFORM pg_notify('rara_run', '');
    END IF;
    RETURN NULL;
END $$;
SELECT rara_grant('rara_wait_begin');  -- a trigger's: no role calls it

CREATE OR REPLACE FUNCTION rara_wait_end(p_step_id bigint, p_outcome text, p_result jsonb,
                                         p_error jsonb)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    step record;
    downstream integer;
BEGIN
    -- Ends one waiting step whose rara_waits row the caller holds locked: p_outcome
    -- 'succeeded' (its dependants unblocked) or 'failed' (its downstream cancelled). Returns
    -- the run deltas, for rara_run_count, which the caller runs last. NULL: the step no longer
    -- waits (a run cancel took it first); nothing was written.
    UPDATE rara_steps SET status = p_outcome::rara_step_status, finished_at = now(),
                          result = p_result, error = p_error
    WHERE id = p_step_id AND status = 'blocked'
    RETURNING id, run_id, key, dependants INTO step;
    DELETE FROM rara_waits WHERE step_id = p_step_id;
    IF step.id IS NULL THEN
        RETURN NULL;
    END IF;
    -- A run that began with a wait has had no lease to mark it running.
    UPDATE rara_runs SET status = 'running', started_at = now()
    WHERE id = step.run_id AND status = 'pending';
    IF p_outcome = 'succeeded' THEN
        RETURN jsonb_build_array(jsonb_build_object('run_id', step.run_id, 'succeeded', 1))
            || rara_step_unblock(step.run_id, step.dependants);
    END IF;
    downstream := rara_step_cancel_dependants(step.run_id, step.key);
    RETURN jsonb_build_array(jsonb_build_object('run_id', step.run_id, 'failed', 1,
                                                'cancelled', downstream));
END $$;
SELECT rara_grant('rara_wait_end');  -- only through the functions below

CREATE OR REPLACE FUNCTION rara_wait_cancel_run(p_step_id bigint, p_error jsonb)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    run_id bigint := (SELECT s.run_id FROM rara_steps s WHERE s.id = p_step_id);
BEGIN
    -- A gate whose rule cancels its run (onReject or onTimeout: cancel): the run is cancelled
    -- as `rara runs cancel` does (its waits go with it), the gate's error saying why. A caller
    -- that may not cancel in the run's namespace (a worker of other namespaces, firing the
    -- deadline) fails the gate instead, which ends the run too.
    IF rara_run_cancel(run_id) IS NULL THEN
        PERFORM rara_run_count(rara_wait_end(p_step_id, 'failed', NULL, p_error));
    ELSE
        UPDATE rara_steps SET error = p_error WHERE id = p_step_id;
    END IF;
END $$;
SELECT rara_grant('rara_wait_cancel_run');  -- only through the functions below

CREATE OR REPLACE FUNCTION rara_waits_fire(p_limit integer)
RETURNS TABLE (fired integer, next_due timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    due record;
    rule jsonb;
    deltas jsonb := '[]';
    ended jsonb;
    n integer := 0;
    cancels bigint[] := '{}';   -- gates whose timeout cancels their run
    gate bigint;
BEGIN
    -- Ends the waits whose time came, at most p_limit of them, oldest first: a timer
    -- succeeds; a signal or approval past its deadline ends as its rule says. Any number of
    -- processes may call it at once (SKIP LOCKED: a wait or step another is ending is its,
    -- and is never waited for). Returns how many it ended and the earliest due time left, for
    -- the caller's sleep. A gate whose timeout cancels the run is cancelled last, after the
    -- other runs are counted (rara_run_cancel takes its run's steps, then the run).
    FOR due IN
        SELECT w.step_id, w.kind, w.due_at, s.wait, s.run_id FROM rara_waits w
        JOIN rara_steps s ON s.id = w.step_id
        WHERE w.due_at <= now()
        ORDER BY w.due_at LIMIT p_limit
        FOR UPDATE OF w, s SKIP LOCKED
    LOOP
        rule := due.wait;
        IF due.kind = 'timer' THEN
            ended := rara_wait_end(due.step_id, 'succeeded',
                                   jsonb_build_object('waited_until', due.due_at,
                                                      'fired_at', now()), NULL);
        ELSIF due.kind = 'signal' AND rule ->> 'on_timeout' = 'succeed' THEN
            ended := rara_wait_end(due.step_id, 'succeeded',
                                   jsonb_build_object('signal', rule ->> 'signal',
                                                      'timed_out', true), NULL);
        ELSIF due.kind = 'approval' THEN
            UPDATE rara_approvals SET decision = 'timed_out', decided_at = now()
            WHERE step_id = due.step_id AND decision IS NULL;
            IF rule ->> 'on_timeout' = 'cancel' THEN
                cancels := cancels || due.step_id;
                CONTINUE;
            ELSE
                ended := rara_wait_end(due.step_id, 'failed', NULL, jsonb_build_object(
                    'code', 'APPROVAL_TIMED_OUT',
                    'message', 'no decision by ' || due.due_at));
            END IF;
        ELSE
            ended := rara_wait_end(due.step_id, 'failed', NULL, jsonb_build_object(
                'code', 'WAIT_TIMED_OUT',
                'message', 'no signal ' || (rule ->> 'signal') || ' by ' || due.due_at));
        END IF;
        IF ended IS NOT NULL THEN
            deltas := deltas || ended;
            n := n + 1;
        END IF;
    END LOOP;
    PERFORM rara_run_count(deltas);
    FOREACH gate IN ARRAY cancels LOOP
        PERFORM rara_wait_cancel_run(gate, jsonb_build_object(
            'code', 'APPROVAL_TIMED_OUT', 'message', 'no decision by its deadline'));
        n := n + 1;
    END LOOP;
    fired := n;
    next_due := (SELECT min(w.due_at) FROM rara_waits w WHERE w.due_at IS NOT NULL);
    RETURN NEXT;
END $$;
SELECT rara_grant('rara_waits_fire', 'rara_worker', 'rara_operator');

CREATE OR REPLACE FUNCTION rara_wait_refuse(p_run_id bigint, p_what text,
                                            p_status rara_step_status, p_for text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    -- A signal or decision for a step that does not wait, refused by the two reasons a caller
    -- must tell apart: not yet (its dependencies still run: 55000, object not in prerequisite
    -- state, which the operator retries) and no longer (it ended: 22023, which it does not).
    IF p_status = 'blocked' THEN
        RAISE EXCEPTION 'run %: % is blocked on its dependencies and not waiting for %',
            p_run_id, p_what, p_for USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    RAISE EXCEPTION 'run %: % is % and not waiting for %', p_run_id, p_what, p_status, p_for
        USING ERRCODE = 'invalid_parameter_value';
END $$;
SELECT rara_grant('rara_wait_refuse');  -- only through the functions below

CREATE OR REPLACE FUNCTION rara_run_signal(p_run_id bigint, p_name text, p_payload jsonb,
                                           p_key text)
RETURNS TABLE (step_id bigint, step_key text, accepted boolean, sent_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    run record;
    earlier record;
    target record;
    waiting boolean;
    deltas jsonb;
BEGIN
    -- Signal p_name to run p_run_id: the step waiting for it succeeds, its result the payload,
    -- and its dependants become ready. Once per (run, p_key): a repeated key answers the first
    -- signal's step and time with accepted = false, and writes nothing. A signal no step waits
    -- for is refused, saying what the step that names it is doing (not yet waiting, ended) or
    -- that none does. The payload's size first (rara_limits), before any other work: it
    -- becomes the step's result, which every page of the run and every dependant reads.
    PERFORM rara_limit_check(format('signal %s: its payload', left(p_name, 200)),
                             octet_length(p_payload::text), 'bytes', 'signal_payload_bytes');
    SELECT r.id, r.namespace, r.status INTO run FROM rara_runs r
    WHERE r.id = p_run_id AND rara_namespace_allowed(r.namespace);
    IF NOT FOUND THEN  -- or not the caller's: what it cannot read it cannot name
        RAISE EXCEPTION 'no run %', p_run_id USING ERRCODE = 'no_data_found';
    END IF;
    IF p_key IS NULL OR length(p_key) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'signal %: its key must be 1 to 200 characters', p_name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The step first (then the signal's key), as every end locks its step before anything.
    SELECT s.id, s.key, s.status INTO target FROM rara_steps s
    WHERE s.run_id = p_run_id AND s.wait ->> 'kind' = 'signal' AND s.wait ->> 'signal' = p_name
    FOR UPDATE;
    -- Whether it waits: read once the step is locked, by a statement of its own. (Joined in
    -- the locking read, the wait's row would be the one that read's snapshot saw, from before
    -- an end that committed while it waited for the step: a signal of another key, or the
    -- deadline. This one then wrote its signal too, and answered accepted.)
    PERFORM 1 FROM rara_waits w WHERE w.step_id = target.id FOR UPDATE;
    waiting := FOUND;
    SELECT g.step_id, g.name, g.sent_at INTO earlier FROM rara_signals g
    WHERE g.run_id = p_run_id AND g.key = p_key;
    IF FOUND THEN
        IF earlier.name <> p_name THEN
            RAISE EXCEPTION 'run %: key % was signal %, not %', p_run_id, p_key, earlier.name,
                p_name USING ERRCODE = 'unique_violation';
        END IF;
        step_id := earlier.step_id;
        step_key := target.key;
        accepted := false;
        sent_at := earlier.sent_at;
        RETURN NEXT;
        RETURN;
    END IF;
    IF target.id IS NULL THEN
        RAISE EXCEPTION 'run %: no step waits for signal % (its definition names none)',
            p_run_id, p_name USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT waiting THEN
        PERFORM rara_wait_refuse(p_run_id, format('step %s', target.key), target.status,
                                 format('signal %s', p_name));
    END IF;
    INSERT INTO rara_signals (run_id, key, namespace, name, payload, step_id, sent_by)
    VALUES (p_run_id, p_key, run.namespace, p_name, p_payload, target.id, rara_caller())
    RETURNING rara_signals.sent_at INTO sent_at;
    deltas := rara_wait_end(target.id, 'succeeded',
                            jsonb_build_object('signal', p_name, 'key', p_key,
                                               'payload', p_payload), NULL);
    PERFORM rara_run_count(deltas);
    step_id := target.id;
    step_key := target.key;
    accepted := true;
    RETURN NEXT;
END $$;
SELECT rara_grant('rara_run_signal', 'rara_client', 'rara_operator');

CREATE OR REPLACE FUNCTION rara_approval_four_eyes(p_run_id bigint, p_key text, p_rule jsonb)
RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    -- Whether approval step p_key of run p_run_id may not be decided by who started the run:
    -- its rule's `fourEyes`, else on for a gate that guards a release — one after which no
    -- other approval gate comes, so that its approval is the last word a run needs before it
    -- can succeed, and only a succeeded run is released (rara_release_promote) — and off for
    -- a gate with another one after it. (PL/pgSQL: its body names tables.)
    RETURN coalesce((p_rule ->> 'four_eyes')::boolean, NOT EXISTS (
        WITH RECURSIVE later (key) AS (
            SELECT d.key FROM rara_steps s CROSS JOIN LATERAL unnest(s.dependants) AS d(key)
            WHERE s.run_id = p_run_id AND s.key = p_key
            UNION
            SELECT d.key FROM later l
            JOIN rara_steps s ON s.run_id = p_run_id AND s.key = l.key
            CROSS JOIN LATERAL unnest(s.dependants) AS d(key)
        )
        SELECT FROM later l JOIN rara_steps s ON s.run_id = p_run_id AND s.key = l.key
        WHERE s.wait ->> 'kind' = 'approval'));
END $$;
SELECT rara_grant('rara_approval_four_eyes');  -- only through rara_approval_decide

CREATE OR REPLACE FUNCTION rara_approval_decide(p_run_id bigint, p_step_key text,
                                                p_approve boolean, p_reason text,
                                                p_identity text DEFAULT NULL)
RETURNS TABLE (step_id bigint, decision text, decided_by text, decided_at timestamptz,
               recorded boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_column
DECLARE
    caller name := rara_caller();
    vouched text := nullif(p_identity, '');
    who text;
    run record;
    gate record;
    approval record;
    waiting boolean;
    due timestamptz;
    wanted text := CASE WHEN p_approve THEN 'approved' ELSE 'rejected' END;
    deltas jsonb;
BEGIN
    -- A person's decision on approval step p_step_key of run p_run_id. `who` is the database's
    -- word: the caller's role, or — only from a login that may vouch (rara_caller_person: a
    -- member of rara_vouch) — the person it authenticated, `<person> via <login>`. Made once:
    -- the same decision again answers the first (recorded = false) and writes nothing; the
    -- other decision is refused, naming who made the first and when. Refused too: a worker's
    -- login, anyone not among the gate's approvers, a decision after the gate's deadline
    -- (whether or not a worker fired it yet), and under four-eyes whoever started the run.
    -- An approval ends the step (its result: the decision); a rejection ends the run as the
    -- gate says (onReject: fail, or cancel).
    who := rara_caller_person(vouched);
    -- A worker runs the steps a gate is about: its login never decides one, whatever else it
    -- is a member of (the owner aside).
    IF EXISTS (SELECT FROM pg_roles r WHERE r.rolname = 'rara_worker'
               AND pg_has_role(caller, r.oid, 'MEMBER'))
       AND NOT pg_has_role(caller, current_user, 'MEMBER') THEN
        RAISE EXCEPTION '% is a worker''s login (rara_worker): a worker never decides an approval',
            caller USING ERRCODE = 'insufficient_privilege';
    END IF;
    SELECT r.id, r.namespace, r.started_by INTO run FROM rara_runs r
    WHERE r.id = p_run_id AND rara_namespace_allowed(r.namespace);
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no run %', p_run_id USING ERRCODE = 'no_data_found';
    END IF;
    IF p_reason IS NOT NULL AND length(p_reason) > 2000 THEN
        RAISE EXCEPTION 'the reason is longer than 2000 characters'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT s.id, s.key, s.status, s.wait INTO gate FROM rara_steps s
    WHERE s.run_id = p_run_id AND s.key = p_step_key
    FOR UPDATE;
    -- Whether it waits, and until when, read once the step is locked (as in rara_run_signal:
    -- a run cancel or a firing that committed while this waited for the step would go unseen
    -- by a join in the locking read).
    SELECT w.due_at INTO due FROM rara_waits w WHERE w.step_id = gate.id FOR UPDATE;
    waiting := FOUND;
    IF gate.id IS NULL OR gate.wait ->> 'kind' IS DISTINCT FROM 'approval' THEN
        RAISE EXCEPTION 'run %: % is not an approval step', p_run_id, p_step_key
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT a.* INTO approval FROM rara_approvals a WHERE a.step_id = gate.id FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM rara_wait_refuse(p_run_id, format('approval %s', p_step_key), gate.status,
                                 'a decision');
    END IF;
    IF approval.decision IS NOT NULL THEN
        IF approval.decision <> wanted THEN
            RAISE EXCEPTION 'run %: approval % was % by % at %', p_run_id, p_step_key,
                approval.decision, coalesce(approval.decided_by, 'its deadline'), approval.decided_at
                USING ERRCODE = 'unique_violation';
        END IF;
        step_id := gate.id;
        decision := approval.decision;
        decided_by := approval.decided_by;
        decided_at := approval.decided_at;
        recorded := false;
        RETURN NEXT;
        RETURN;
    END IF;
    -- An approver that names a role is matched by the caller's membership, never by a name
    -- it vouches for (a vouching login is no member of its users' roles); a vouched person
    -- matches only an approver that is no role.
    IF cardinality(approval.approvers) > 0 AND NOT EXISTS (
        SELECT FROM unnest(approval.approvers) AS a(name)
        LEFT JOIN pg_roles r ON r.rolname = a.name
        WHERE CASE WHEN vouched IS NULL THEN r.oid IS NOT NULL AND pg_has_role(caller, r.oid, 'MEMBER')
                   ELSE r.oid IS NULL AND a.name = vouched END) THEN
        RAISE EXCEPTION 'run %: % may not decide approval % (its approvers: %)', p_run_id, who,
            p_step_key, array_to_string(approval.approvers, ', ')
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'a role among the approvers is matched by the login''s membership; '
                         'a person a login vouches for, only by a name that is no role';
    END IF;
    IF NOT waiting THEN  -- a run cancel took it (its rara_approvals row stays)
        PERFORM rara_wait_refuse(p_run_id, format('approval %s', p_step_key), gate.status,
                                 'a decision');
    END IF;
    IF due <= now() THEN  -- its deadline passed: rara_waits_fire ends it as its rule says
        RAISE EXCEPTION 'run %: approval % passed its deadline (%): no decision after it', p_run_id,
            p_step_key, due USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Four-eyes: who started the run (the same role, or the same person vouched for) does
    -- not also approve or reject it. The owner is not held to it (it may write any row).
    IF run.started_by IS NOT NULL
       AND split_part(run.started_by, ' via ', 1) = coalesce(vouched, caller)
       AND NOT pg_has_role(caller, current_user, 'MEMBER')
       AND rara_approval_four_eyes(p_run_id, p_step_key, gate.wait) THEN
        RAISE EXCEPTION 'run %: % started this run and may not also decide approval % '
                        '(fourEyes: another person decides)', p_run_id, who, p_step_key
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    UPDATE rara_approvals a SET decision = wanted, decided_by = who,
                                decided_login = caller, decided_at = now(),
                                reason = p_reason
    WHERE a.step_id = gate.id;
    IF p_approve THEN
        deltas := rara_wait_end(gate.id, 'succeeded', jsonb_build_object(
            'decision', wanted, 'decided_by', who, 'reason', p_reason), NULL);
        PERFORM rara_run_count(deltas);
    ELSIF gate.wait ->> 'on_reject' = 'cancel' THEN
        PERFORM rara_wait_cancel_run(gate.id, jsonb_build_object(
            'code', 'REJECTED', 'message', 'rejected by ' || who || coalesce(': ' || p_reason, '')));
    ELSE
        deltas := rara_wait_end(gate.id, 'failed', NULL, jsonb_build_object(
            'code', 'REJECTED', 'message', 'rejected by ' || who
                || coalesce(': ' || p_reason, '')));
        PERFORM rara_run_count(deltas);
    END IF;
    step_id := gate.id;
    decision := wanted;
    decided_by := who;
    decided_at := now();
    recorded := true;
    RETURN NEXT;
END $$;
SELECT rara_grant('rara_approval_decide', 'rara_client', 'rara_operator');

CREATE OR REPLACE FUNCTION rara_run_phase(p_run_id bigint, p_status rara_run_status)
RETURNS TABLE (phase text, waiting_for jsonb)
LANGUAGE plpgsql STABLE SECURITY INVOKER AS $$
BEGIN
    -- A run's phase as people read it (docs/waits.md, "Waiting runs"): its status, except that
    -- an unfinished paused run is `paused` (docs/state-machines.md, "Paused runs"), and that
    -- an unfinished run with no step (a map's children included) ready or running and at
    -- least one open wait is `waiting`, with what it waits for (`waiting_for`: each open wait
    -- of the run, {step, kind: timer | signal | approval, signal, due_at}, oldest first).
    -- Steps blocked on their dependencies wait for those, not for anyone. Derived at each
    -- read, never stored: rara_runs.status keeps the state machine (db/functions/states.sql),
    -- and no write of the lease or of a step's end pays for it. The one rule of every reader:
    -- the dashboard, `rara runs list/show`, Client.wait, the operator's WorkflowRun phase and
    -- wait_list_for_person. SECURITY INVOKER: the caller's row-level security decides which
    -- runs and waits it reads. PL/pgSQL, not SQL: db/schema.sql creates functions before the
    -- tables they read. An ended run costs no read; an unfinished one a probe of the run by
    -- its key and one of rara_waits by run, and of its steps only when it has an open wait.
    phase := p_status::text;
    IF p_status IN ('pending', 'running')
       AND (SELECT r.paused_at IS NOT NULL FROM rara_runs r WHERE r.id = p_run_id) THEN
        -- Paused (rara_run_set_paused, pauses.sql) before waiting: whatever else it waits
        -- for, what it would run next waits for its resume first.
        phase := 'paused';
    ELSIF p_status IN ('pending', 'running') THEN
        waiting_for := (
            SELECT jsonb_agg(jsonb_build_object('step', s.key, 'kind', w.kind,
                                                'signal', w.signal, 'due_at', w.due_at)
                             ORDER BY w.began_at, w.step_id)
            FROM rara_waits w JOIN rara_steps s ON s.id = w.step_id
            WHERE w.run_id = p_run_id);
        IF waiting_for IS NOT NULL AND EXISTS (
                SELECT FROM rara_steps o
                WHERE o.run_id = p_run_id AND o.status IN ('ready', 'running')) THEN
            waiting_for := NULL;
        END IF;
        IF waiting_for IS NOT NULL THEN
            phase := 'waiting';
        END IF;
    END IF;
    RETURN NEXT;
END $$;
SELECT rara_grant('rara_run_phase', 'rara_worker', 'rara_operator', 'rara_client', 'rara_reader');

-- A step's wait rule, checked (made by migration 0021; here since the rule changes: a
-- function file says what each of its functions is now). rara_spec_steps (0021) calls it for
-- each step of a spec being registered.
CREATE OR REPLACE FUNCTION rara_spec_wait(p_step jsonb, p_what text) RETURNS jsonb
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
    WHERE k NOT IN ('show', 'approvers', 'timeout', 'onReject', 'onTimeout', 'fourEyes');
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
    IF coalesce(jsonb_typeof(approval -> 'fourEyes'), 'boolean') <> 'boolean' THEN
        RAISE EXCEPTION '%.approval.fourEyes: must be true or false', p_what
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- four_eyes only when set: unset, the gate's place decides (rara_approval_four_eyes), and
    -- the step rows of a spec written before it stay what they were.
    RETURN jsonb_build_object(
        'kind', 'approval',
        'show', coalesce(nullif(approval -> 'show', 'null'), '[]'),
        'approvers', coalesce(nullif(approval -> 'approvers', 'null'), '[]'),
        'timeout_ms', rara_duration_ms(approval -> 'timeout', p_what || '.approval.timeout'),
        'on_reject', coalesce(approval ->> 'onReject', 'fail'),
        'on_timeout', coalesce(approval ->> 'onTimeout', 'fail'))
        || CASE WHEN approval ? 'fourEyes'
                THEN jsonb_build_object('four_eyes', approval -> 'fourEyes') ELSE '{}' END;
END $$;
SELECT rara_grant('rara_spec_wait');  -- only through rara_spec_steps
