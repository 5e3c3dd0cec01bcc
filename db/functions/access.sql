-- Who may act in which namespace (migration 0018, docs/namespaces.md "Isolation"): the switch
-- that turns isolation on, and the checks every SECURITY DEFINER function that acts in a
-- namespace makes first. The rule itself — which namespaces the caller has; every one while
-- isolation is off — is rara_caller_namespaces (0018), the same function the tables' read
-- policies call, so what a role may see and what it may do never disagree. Then who the caller
-- acts as: its role, or the person a login that may vouch names (rara_caller_person,
-- rara_caller_starter).
-- Repeatable (rara.pg.migrate): edit in place.

-- The role a statement runs as, also from inside a SECURITY DEFINER function.
CREATE OR REPLACE FUNCTION rara_caller() RETURNS name
LANGUAGE sql STABLE AS $$
    SELECT CASE current_setting('role') WHEN 'none' THEN session_user
                ELSE current_setting('role')::name END
$$;

-- The caller's namespaces ('{*}': every one; every role's while isolation is off). SECURITY
-- DEFINER so that it reads the access table whoever calls it; it answers only for the caller.
-- Called once per statement by the read policies (an uncorrelated subquery: an InitPlan).
CREATE OR REPLACE FUNCTION rara_caller_namespaces() RETURNS text[]
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    -- (PL/pgSQL: its body names a table, which a dump of the schema creates after it.)
    IF pg_has_role(rara_caller(), current_user, 'MEMBER')  -- the owner (current_user here)
       OR NOT (SELECT c.relrowsecurity FROM pg_class c WHERE c.oid = 'rara_runs'::regclass) THEN
        RETURN '{*}';
    END IF;
    RETURN (SELECT coalesce(array_agg(DISTINCT a.namespace), '{}')
            FROM rara_namespace_access a JOIN pg_roles r ON r.rolname = a.role
            WHERE pg_has_role(rara_caller(), r.oid, 'MEMBER'));
END $$;

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

CREATE OR REPLACE FUNCTION rara_caller_vouches() RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    -- Whether the caller may name the person it acts for (db/migrations/0025): a member of
    -- rara_vouch (the dashboard's login, the operator), or the schema's owner (current_user
    -- inside the definer functions that call this), who may write any row anyway.
    -- (PL/pgSQL, as the next: a dump of the schema may create what it calls after it.)
    RETURN pg_has_role(rara_caller(), current_user, 'MEMBER')
        OR EXISTS (SELECT FROM pg_roles r WHERE r.rolname = 'rara_vouch'
                   AND pg_has_role(rara_caller(), r.oid, 'MEMBER'));
END $$;
SELECT rara_grant('rara_caller_vouches');  -- only through the functions below

CREATE OR REPLACE FUNCTION rara_caller_person(p_identity text)
RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    vouched text := nullif(p_identity, '');
BEGIN
    -- Who the caller acts as, in the database's words: its role (rara_caller()), or, from a
    -- login that may vouch (rara_caller_vouches), the person it authenticated, written
    -- `<person> via <login>`. A person named by any other caller is refused, naming it:
    -- a client decides, starts and is recorded as itself.
    IF vouched IS NULL THEN
        RETURN rara_caller();
    END IF;
    IF NOT rara_caller_vouches() THEN
        RAISE EXCEPTION '% may not act for another person (identity %): only a member of '
                        'rara_vouch (the dashboard''s login, the operator) vouches for one',
            rara_caller(), left(vouched, 200)
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'leave the identity out: the decision is recorded as your login';
    END IF;
    IF length(vouched) > 200 OR vouched ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION 'identity %: at most 200 characters, none a control character',
            quote_literal(left(vouched, 200)) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN vouched || ' via ' || rara_caller();
END $$;
SELECT rara_grant('rara_caller_person');  -- only through rara_approval_decide

CREATE OR REPLACE FUNCTION rara_caller_starter() RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    named text := nullif(current_setting('rara.identity', true), '');
BEGIN
    -- Who starts or resumes a run (rara_runs.started_by, for an approval's four-eyes): the
    -- caller's role, or `<person> via <login>` when a login that may vouch (the dashboard's)
    -- names the person in the session setting rara.identity. From any other login the setting
    -- is ignored: the run is recorded as started by that login, which is all it could claim.
    IF named IS NOT NULL AND rara_caller_vouches() THEN
        RETURN left(named, 200) || ' via ' || rara_caller();
    END IF;
    RETURN rara_caller();
END $$;
SELECT rara_grant('rara_caller_starter');  -- only through rara_run_start, rara_run_resume
