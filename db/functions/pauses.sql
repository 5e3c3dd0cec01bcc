-- Pausing a run (docs/state-machines.md, "Paused runs"): rara_run_set_paused, what
-- rara_client (people, tools, the UI) and rara_operator (a WorkflowRun's spec.paused) may do.
-- The hold itself — a paused run's steps made ready later — is rara_check_step_transition's
-- (states.sql), and a map child's insert's (maps.sql). Called through db/queries/runs.sql (rara.pg.runs).
-- Repeatable (rara.pg.migrate): edit in place.

CREATE OR REPLACE FUNCTION rara_run_set_paused(p_run_id bigint, p_paused boolean)
RETURNS TABLE (outcome text, steps integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    woken text[];  -- the capabilities of the steps a resume released
BEGIN
    -- Pause (p_paused) or resume a run. Paused: its ready steps are held (available_at
    -- 'infinity', their own kept in held_available_at), and so is every step that becomes
    -- ready while it is paused (rara_check_step_transition); its running steps go on and end as
    -- usual. Resumed: the held steps get their available_at back, leasable at once in their
    -- place in the queue (a backoff not yet run out still runs out), and the workers that
    -- serve them are woken (rara_ready: a step put back before a worker's cursor is found by
    -- the scan from the start that the notification brings, docs/lease-protocol.md).
    -- outcome: 'paused' | 'resumed', with how many steps were held or released; 'unchanged'
    -- (already so: idempotent); 'ended' (the run has ended); no row: no such run, or one of a
    -- namespace the caller may not act in (what it cannot read it cannot name).
    PERFORM 1 FROM rara_runs WHERE id = p_run_id AND rara_namespace_allowed(namespace);
    IF NOT FOUND THEN
        RETURN;
    END IF;
    -- The run's open steps' locks first, in id order, then the run row: the order a step's end
    -- takes them (as rara_run_cancel does). A transaction that made one of them ready has
    -- committed by then, and the UPDATE below sees its step ready; one that makes one ready
    -- after waits for this one's commit, and sees its run_paused.
    PERFORM 1 FROM rara_steps
    WHERE run_id = p_run_id AND status IN ('blocked', 'ready', 'running') ORDER BY id FOR UPDATE;
    UPDATE rara_runs SET paused_at = CASE WHEN p_paused THEN now() END
    WHERE id = p_run_id AND status IN ('pending', 'running')
      AND (paused_at IS NULL) = p_paused;
    IF NOT FOUND THEN
        outcome := CASE WHEN EXISTS (SELECT FROM rara_runs WHERE id = p_run_id
                                     AND status IN ('pending', 'running'))
                        THEN 'unchanged' ELSE 'ended' END;
        steps := 0;
        RETURN NEXT;
        RETURN;
    END IF;
    IF p_paused THEN
        -- Every open step is marked (what becomes ready later is held by the trigger), the
        -- ready ones held now.
        WITH marked AS (
            UPDATE rara_steps SET run_paused = true,
                   held_available_at = CASE WHEN status = 'ready' THEN available_at END,
                   available_at = CASE WHEN status = 'ready' THEN 'infinity'
                                       ELSE available_at END
            WHERE run_id = p_run_id AND status IN ('blocked', 'ready', 'running')
            RETURNING status
        )
        SELECT count(*) FILTER (WHERE m.status = 'ready') INTO steps FROM marked m;
        outcome := 'paused';
    ELSE
        WITH released AS (
            UPDATE rara_steps SET run_paused = false,
                   available_at = coalesce(held_available_at, available_at),
                   held_available_at = NULL
            WHERE run_id = p_run_id AND run_paused
            RETURNING capability, status
        )
        SELECT count(*) FILTER (WHERE r.status = 'ready'),
               coalesce(array_agg(DISTINCT r.capability) FILTER (WHERE r.status = 'ready'), '{}')
        INTO steps, woken FROM released r;
        PERFORM pg_notify('rara_ready', c) FROM unnest(woken) AS c;
        outcome := 'resumed';
    END IF;
    RETURN NEXT;
END $$;
SELECT rara_grant('rara_run_set_paused', 'rara_client', 'rara_operator');
