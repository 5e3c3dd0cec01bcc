-- Who may act in which namespace (migration 0018, docs/namespaces.md "Isolation"): the switch
-- that turns isolation on, and the checks every SECURITY DEFINER function that acts in a
-- namespace makes first. The rule itself — which namespaces the caller has; every one while
-- isolation is off — is rara_caller_namespaces (0018), the same function the tables' read
-- policies call, so what a role may see and what it may do never disagree.
-- Repeatable (rara.pg.migrate): edit in place.

-- Every role that reads evaluates the read policies, which call this.
SELECT rara_grant('rara_caller_namespaces', 'rara_reader', 'rara_worker', 'rara_client',
                  'rara_operator');
SELECT rara_grant('rara_caller');  -- only through rara_caller_namespaces

CREATE OR REPLACE FUNCTION rara_namespace_isolation(p_on boolean)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    tables regclass[];
    tab regclass;
    patience integer := 600;  -- tries, 50 ms apart at most: about 30 s
    caller_timeout text := current_setting('lock_timeout');
    was boolean := (SELECT c.relrowsecurity FROM pg_class c WHERE c.oid = 'rara_runs'::regclass);
BEGIN
    -- Isolation between namespaces on (or off again) for this database: row-level security
    -- enabled on every table with a read policy (migrations 0018, 0019), which is also the
    -- switch rara_caller_namespaces reads. The owner's (`rara access isolate|open`): granted
    -- to nobody. Returns whether it was on.
    SELECT array_agg(DISTINCT p.polrelid::regclass) INTO tables FROM pg_policy p
    JOIN pg_class c ON c.oid = p.polrelid
    WHERE c.relnamespace = current_schema()::regnamespace AND p.polname = c.relname || '_read';
    -- Each ALTER takes its table's ACCESS EXCLUSIVE lock. A running fleet takes those tables in
    -- other orders (a start: runs, steps, then the trigger's lanes; a lease: steps, lanes, then
    -- runs), so taking them one by one, each waiting, deadlocks with it. All of them are taken
    -- first, in one statement, waiting at most 100 ms for each — well under deadlock_timeout,
    -- so a wait never becomes a deadlock that PostgreSQL settles by failing a worker's
    -- statement — and, when one is busy, all given back at once (the block's rollback) and
    -- tried again.
    LOOP
        BEGIN
            PERFORM set_config('lock_timeout', '100ms', true);
            EXECUTE 'LOCK TABLE ' || array_to_string(tables, ', ') || ' IN ACCESS EXCLUSIVE MODE';
            EXIT;
        EXCEPTION WHEN lock_not_available THEN
            patience := patience - 1;
            IF patience = 0 THEN
                RAISE EXCEPTION 'the fleet kept rara''s tables busy for 30 s: try again'
                    USING ERRCODE = 'lock_not_available';
            END IF;
            PERFORM pg_sleep(random() * 0.05);
        END;
    END LOOP;
    PERFORM set_config('lock_timeout', caller_timeout, true);
    FOREACH tab IN ARRAY tables LOOP
        EXECUTE format('ALTER TABLE %s %s ROW LEVEL SECURITY', tab,
                       CASE WHEN p_on THEN 'ENABLE' ELSE 'DISABLE' END);
    END LOOP;
    RETURN was;
END $$;
SELECT rara_grant('rara_namespace_isolation');  -- the owner's

CREATE OR REPLACE FUNCTION rara_namespace_allowed(p_namespace text)
RETURNS boolean
LANGUAGE sql STABLE AS $$
    -- Whether the caller may read and act in p_namespace ('*': in every one, as an act on the
    -- whole fleet needs).
    SELECT rara_caller_namespaces() && ARRAY['*', p_namespace]
$$;
SELECT rara_grant('rara_namespace_allowed');  -- only through the definer functions

CREATE OR REPLACE FUNCTION rara_namespace_check(p_namespace text)
RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
    -- Refuses an act in p_namespace that the caller may not do, naming both. An act addressed
    -- by a run's id instead finds no run (rara_run_cancel, rara_run_resume): what a role
    -- cannot read it cannot name either.
    IF rara_namespace_allowed(p_namespace) THEN
        RETURN;
    END IF;
    IF p_namespace = '*' THEN
        RAISE EXCEPTION 'role % may not change what the whole fleet shares', rara_caller()
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'capability limits and the step cache need every namespace: '
                         'rara access grant ROLE ''*''';
    END IF;
    RAISE EXCEPTION 'role % may not act in namespace %', rara_caller(), p_namespace
        USING ERRCODE = 'insufficient_privilege',
              HINT = format('the owner grants it: rara access grant ROLE %s', p_namespace);
END $$;
SELECT rara_grant('rara_namespace_check');  -- only through the definer functions
