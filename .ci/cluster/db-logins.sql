-- The owner and the processes' own logins in the kind cluster's PostgreSQL
-- (docs/least-privilege.md, "Threat model" and "Logins"): install-rara.sh runs this as the
-- server's superuser, through psql, after PostgreSQL is Ready and before `helm upgrade
-- --install`, with :owner_password, :worker_password and :operator_password set to the
-- passwords in Secrets rara-db, rara-db-worker and rara-db-operator. Idempotent.
--
-- The owner, whose URL the chart gives the migration Job only, is the one docs/least-privilege.md
-- recommends ("The owner"): neither SUPERUSER nor CREATEROLE (on PostgreSQL 15 a CREATEROLE
-- role may grant itself the server's predefined roles), owning the database (and so, on
-- PostgreSQL 15, its public schema), with ADMIN OPTION on rara's group roles, as `rara access
-- bootstrap-sql rara_owner` prints. Every SECURITY DEFINER function runs as it; its
-- compromise is rara's data, not the server.
--
-- Why the group roles are made here, before the migrations: the chart's pods connect as these
-- logins as soon as the migration Job (a pre-install hook) is done, so each login must exist
-- and be a member of its group by then, and membership needs the group role. Migrations 0002
-- and 0007 create a group role only when it is missing (IF NOT EXISTS on pg_roles) and grant
-- to it either way, so a group role made NOLOGIN here is the one they fill. Granting
-- membership after the install instead would leave the pods failing until then, and
-- `helm --wait` waiting on them.
\set ON_ERROR_STOP on

SELECT format('CREATE ROLE %I NOLOGIN', g)
  FROM unnest(ARRAY['rara_worker', 'rara_operator', 'rara_client', 'rara_reader',
                    'rara_vouch']) AS g
 WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = g)
\gexec
GRANT rara_reader TO rara_worker, rara_operator, rara_client;
GRANT rara_vouch TO rara_operator;

SELECT 'CREATE ROLE rara_owner LOGIN NOSUPERUSER NOCREATEROLE'
 WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'rara_owner')
\gexec
ALTER ROLE rara_owner NOSUPERUSER NOCREATEROLE;  -- one made with CREATEROLE before
GRANT rara_reader, rara_worker, rara_operator, rara_client, rara_vouch TO rara_owner
    WITH ADMIN OPTION;
ALTER DATABASE rara OWNER TO rara_owner;

-- Each login a member of its group role and of nothing else (the role holds no grants of its
-- own: migrations grant to the groups).
SELECT format('CREATE ROLE %I LOGIN IN ROLE %I', login, grp)
  FROM (VALUES ('rara_worker_login', 'rara_worker'),
               ('rara_operator_login', 'rara_operator')) AS l (login, grp)
 WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = login)
\gexec

-- The passwords of the Secrets, set again on every install (a re-made Secret wins).
ALTER ROLE rara_owner PASSWORD :'owner_password';
ALTER ROLE rara_worker_login PASSWORD :'worker_password';
ALTER ROLE rara_operator_login PASSWORD :'operator_password';
