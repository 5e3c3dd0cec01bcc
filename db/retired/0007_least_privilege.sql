-- rara 0007: least privilege (issue 23; the argument: docs/least-privilege.md).
--
-- Until now the process roles of 0002 held table-wide writes: rara_client could UPDATE any
-- step to `succeeded` with a forged result, rara_worker could end or re-open work it did not
-- own; the transition triggers check the shape of a change, not who makes it. From here on
-- every state change is a SECURITY DEFINER function of db/functions/ (applied after the
-- migrations, repeatably: rara.pg.migrate) that checks the caller's right itself — a step's
-- end, progress, checkpoint and heartbeat only with its current lease token, a cancel only as
-- a cancel, definitions only by the roles that register them — and the roles hold EXECUTE on
-- those, SELECT where they read, and no INSERT, UPDATE or DELETE on any table. Who may read
-- what (every column but the lease tokens) is db/functions/reads.sql, re-run after every
-- migration so that a new column is granted with its table.
--
-- New here: rara_reader, the role of read-only viewers (the web UI's read-only mode), and the
-- one that holds the reads: the process roles are its members, so each read is granted once.

-- A function is executable by PUBLIC unless revoked: functions the migrating role makes from
-- now on are not, and rara_grant below revokes it of each function again, by name.
ALTER DEFAULT PRIVILEGES REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;

-- EXECUTE on every function named `routine` (all its signatures) for those of `roles` that
-- exist, and for nobody else: the roles are cluster-wide and may be missing where the migrating
-- user could not create them (0002), and then only the owner runs anything.
CREATE FUNCTION rara_grant(routine text, VARIADIC roles text[] DEFAULT '{}') RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    signature regprocedure;
    grantee text;
BEGIN
    FOR signature IN
        SELECT p.oid::regprocedure FROM pg_proc p
        WHERE p.proname = routine AND p.pronamespace = current_schema()::regnamespace
    LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', signature);
        FOREACH grantee IN ARRAY roles LOOP
            IF EXISTS (SELECT FROM pg_roles WHERE rolname = grantee) THEN
                EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', signature, grantee);
            END IF;
        END LOOP;
    END LOOP;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'rara_grant: no function named %', routine;
    END IF;
END $$;
REVOKE ALL ON FUNCTION rara_grant(text, text[]) FROM PUBLIC;

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = current_user
                   AND (rolsuper OR rolcreaterole)) THEN
        RAISE NOTICE 'rara: % may not create roles; skipping role set-up', current_user;
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'rara_reader') THEN
        CREATE ROLE rara_reader NOLOGIN;
    END IF;
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO rara_reader', current_schema());
    GRANT rara_reader TO rara_worker, rara_operator, rara_client;
    -- Every write 0002 granted goes; the reads are db/functions/reads.sql's.
    EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA %I'
                   ' FROM rara_worker, rara_operator, rara_client, rara_reader',
                   current_schema());
    EXECUTE format('REVOKE ALL ON ALL SEQUENCES IN SCHEMA %I'
                   ' FROM rara_worker, rara_operator, rara_client, rara_reader',
                   current_schema());
END $$;
