-- rara 0023: a run that begins to wait for a person says so (issue 35; docs/waits.md).
--
-- `rara runs watch`, Client.wait(until_person=True), the demo and the dashboard stop or
-- redraw when a run can only be moved on by a signal or a decision. A step begins to wait in
-- the transaction of the step it depended on, which notifies nobody (no step became ready, no
-- run ended), so until now they learned it at their next poll. rara_wait_begin (0021) now also
-- sends `rara_run` with "<run id>:waiting" when the wait is a signal's or an approval's. Timer
-- waits stay silent on that channel: time moves them on, and nobody stops for them.

CREATE OR REPLACE FUNCTION rara_wait_begin() RETURNS trigger
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
    IF rule ->> 'kind' IN ('signal', 'approval') THEN
        -- Watchers of the run: it may now wait for a person (one notification per wait that
        -- begins, at commit; identical ones in a transaction are folded into one).
        PERFORM pg_notify('rara_run', NEW.run_id::text || ':waiting');
    END IF;
    RETURN NULL;
END $$;
