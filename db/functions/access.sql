-- Who may act in which namespace (migration 0018, docs/namespaces.md "Isolation"): the checks
-- every SECURITY DEFINER function that acts in a namespace makes first. The rule itself —
-- which namespaces the caller has — is rara_caller_namespaces (0018), the same function the
-- tables' read policies call, so what a role may see and what it may do never disagree.
-- Repeatable (rara.pg.migrate): edit in place.

-- Every role that reads evaluates the read policies, which call this.
SELECT rara_grant('rara_caller_namespaces', 'rara_reader', 'rara_worker', 'rara_client',
                  'rara_operator');
SELECT rara_grant('rara_caller');  -- only through rara_caller_namespaces

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
