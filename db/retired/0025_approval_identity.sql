-- rara 0025: who decides an approval, and who started the run, are the database's word
-- (security issue "Trust on the new surfaces", item 1; docs/waits.md, "Who may decide";
-- docs/least-privilege.md, "Vouching").
--
-- rara_approval_decide took the decider's name from its caller (p_identity), from any role
-- granted the function: a client that was no approver passed an approver's name, or a group
-- role's, and the gate was approved. Now a caller decides as itself (rara_caller()), and only
-- a member of rara_vouch may name the person it authenticated instead (db/functions/waits.sql).
--
-- - rara_vouch: a group role (NOLOGIN) that holds no privilege; membership is the right to
--   vouch. Granted here to rara_operator (the operator records kubectl's approvals as the
--   user the chart's admission policy checked, docs/waits.md "On Kubernetes"); the dashboard's
--   login is granted it by hand (docs/ui.md), never a group that people's logins share.
--   Made only when missing, like the roles of 0002 and 0007, and skipped with a notice when
--   the migrating user may not create roles: then no login vouches (a decision naming a
--   person is refused) until the owner makes it.
-- - rara_runs.started_by: the role that started a run (rara_caller(), also from inside the
--   definer functions that insert runs), for an approval gate's four-eyes rule. Runs started
--   before this migration keep NULL: who started them is not known, and four-eyes lets their
--   gates be decided as before.

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = current_user
                   AND (rolsuper OR rolcreaterole)) THEN
        RAISE NOTICE 'rara: % may not create roles; skipping rara_vouch', current_user;
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'rara_vouch') THEN
        CREATE ROLE rara_vouch NOLOGIN;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'rara_operator') THEN
        GRANT rara_vouch TO rara_operator;
    END IF;
END $$;

-- (no default for the rows there are: ADD COLUMN with it would stamp them all with the
-- migrating login)
ALTER TABLE rara_runs ADD COLUMN started_by text;
ALTER TABLE rara_runs ALTER COLUMN started_by SET DEFAULT rara_caller();
