-- rara 0027: an owner without CREATEROLE (security issue "Trust on the new surfaces", item 7;
-- docs/least-privilege.md, "The owner").
--
-- On PostgreSQL 15 a CREATEROLE role may grant itself any role that is not a superuser,
-- predefined ones included: the owner that CREATEROLE was recommended for granted itself
-- pg_execute_server_program and pg_read_server_files, ran a program as the server's OS user
-- and read pg_authid. So the recommended owner now has no CREATEROLE: a superuser makes rara's
-- group roles once per server and grants the owner ADMIN OPTION on each (`rara access
-- bootstrap-sql OWNER`), and the owner manages who is in them and nothing else.
--
-- Migrations 0002, 0007 and 0025 set the group roles up only for an owner that may create
-- roles (a superuser or CREATEROLE), and skipped it, with a notice, otherwise. For such an
-- owner this migration does what they skipped — usage of the schema for each group role,
-- rara_reader's members, rara_vouch's — on roles the superuser made; it changes nothing where
-- they ran. The reads and the functions' EXECUTE are granted by db/functions/, as ever. An owner
-- that may not create roles and finds a group role missing, or holds one without ADMIN OPTION,
-- is refused here, naming the role: a database whose processes have no roles to log in with
-- is not one rara can serve.

DO $$
DECLARE
    role_name text;
    may_create boolean := EXISTS (SELECT FROM pg_roles WHERE rolname = current_user
                                  AND (rolsuper OR rolcreaterole));
BEGIN
    FOREACH role_name IN ARRAY
        ARRAY['rara_reader', 'rara_worker', 'rara_operator', 'rara_client', 'rara_vouch']
    LOOP
        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = role_name) THEN
            RAISE EXCEPTION 'rara: group role % does not exist, and % may not create it',
                role_name, current_user
                USING ERRCODE = 'undefined_object',
                      HINT = format('a superuser runs once what `rara access bootstrap-sql %s` '
                                    'prints (docs/least-privilege.md, "The owner")',
                                    current_user);
        END IF;
        IF NOT may_create AND NOT pg_has_role(current_user, role_name, 'MEMBER WITH ADMIN OPTION')
        THEN
            RAISE EXCEPTION 'rara: % holds group role % without ADMIN OPTION', current_user,
                role_name
                USING ERRCODE = 'insufficient_privilege',
                      HINT = format('a superuser runs once what `rara access bootstrap-sql %s` '
                                    'prints (docs/least-privilege.md, "The owner")',
                                    current_user);
        END IF;
    END LOOP;
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO rara_reader, rara_worker, rara_operator,'
                   ' rara_client', current_schema());
    FOREACH role_name IN ARRAY ARRAY['rara_worker', 'rara_operator', 'rara_client'] LOOP
        IF NOT pg_has_role(role_name, 'rara_reader', 'MEMBER') THEN
            EXECUTE format('GRANT rara_reader TO %I', role_name);
        END IF;
    END LOOP;
    IF NOT pg_has_role('rara_operator', 'rara_vouch', 'MEMBER') THEN
        GRANT rara_vouch TO rara_operator;
    END IF;
END $$;
