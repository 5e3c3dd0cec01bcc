-- Who reads what: rara_reader (the read-only viewer; every process role is its member, 0007)
-- reads every table of the schema, and of the tables that hold lease tokens every column but
-- the token. A token is the lease's capability: whoever holds it may end, extend or report on
-- the attempt (db/functions/lease.sql), so only the worker that leased the step ever learns it
-- (step_lease returns it to that worker alone). Run after every migration (rara.pg.migrate), so
-- a column a migration adds is readable at once; no role holds a table-wide write.
DO $$
DECLARE
    tab regclass;
    readable text;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'rara_reader') THEN
        RETURN;  -- no roles (the migrating user could not create them): the owner reads
    END IF;
    FOR tab IN
        SELECT c.oid::regclass FROM pg_class c
        WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p', 'v')
        ORDER BY c.relname
    LOOP
        EXECUTE format('REVOKE ALL ON %s FROM rara_reader', tab);
        IF EXISTS (SELECT FROM pg_attribute
                   WHERE attrelid = tab AND attname = 'lease_token' AND NOT attisdropped) THEN
            SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) INTO readable
            FROM pg_attribute
            WHERE attrelid = tab AND attnum > 0 AND NOT attisdropped AND attname <> 'lease_token';
            EXECUTE format('GRANT SELECT (%s) ON %s TO rara_reader', readable, tab);
        ELSE
            EXECUTE format('GRANT SELECT ON %s TO rara_reader', tab);
        END IF;
    END LOOP;
END $$;
