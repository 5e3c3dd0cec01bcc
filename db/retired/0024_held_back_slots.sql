-- rara 0024: held-back slots (issue 34; docs/namespaces.md, "Held-back slots"). A worker may
-- keep slots back for namespaces with nothing running on it, so that a team's first step does
-- not wait for a slot to free behind another team's backlog.
--
-- - The lease gains p_except_namespaces (last, NULL by default: a worker of the previous
--   release leases as before): the namespaces whose lanes give nothing to this lease. The
--   functions (repeatable) create the new one; the old signature goes.
-- - NOTIFY rara_queued, payload a capability, once per INSERT statement that queued ready
--   steps of it: a run's start or resume, a map's slice. A namespace's first work always
--   arrives this way, never through an end, so a worker whose other slots are full leases into
--   a held-back slot only on these: one lease per start, not one per end batch. rara_ready is
--   still sent as before (a worker of the previous release listens to it alone).

DROP FUNCTION IF EXISTS rara_step_lease(text, text[], text[], integer[], timestamptz[],
                                        bigint[], integer, double precision, text[]);

-- (one statement per INSERT, however many steps it inserts; a wake-up, never an authority:
-- docs/least-privilege.md)
CREATE FUNCTION rara_notify_queued() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('rara_queued', q.capability)
    FROM (SELECT DISTINCT i.capability FROM inserted i WHERE i.status = 'ready') AS q;
    RETURN NULL;
END $$;
REVOKE ALL ON FUNCTION rara_notify_queued() FROM PUBLIC;
CREATE TRIGGER rara_steps_notify_queued AFTER INSERT ON rara_steps
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION rara_notify_queued();
