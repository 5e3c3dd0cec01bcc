-- rara 0002: database roles, least privilege per process kind.
--
-- Group roles (NOLOGIN); deployments create login roles that are members of one of them:
--   rara_worker    leases and completes steps, writes events/checkpoints/manifests; it cannot
--                  create or change definitions, nor create runs.
--   rara_operator  registers definition versions, retires definitions, starts runs, reads the
--                  backlog; it cannot lease or complete steps.
--   rara_client    applications and the CLI: definitions, runs, cancel, reads.
-- Roles are cluster-wide: created only if missing, and skipped (with a notice) when the
-- migrating user may not create roles — grants then stay with the owner.

DO $$
DECLARE
    role_name text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = current_user
                   AND (rolsuper OR rolcreaterole)) THEN
        RAISE NOTICE 'rara: % may not create roles; skipping role set-up', current_user;
        RETURN;
    END IF;
    FOREACH role_name IN ARRAY ARRAY['rara_worker', 'rara_operator', 'rara_client'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = role_name) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', role_name);
        END IF;
    END LOOP;

    EXECUTE 'GRANT USAGE ON SCHEMA public TO rara_worker, rara_operator, rara_client';

    -- worker
    EXECUTE 'GRANT SELECT ON rara_definitions, rara_definition_versions, rara_runs, rara_steps,
             rara_attempts, rara_events, rara_artifacts, rara_step_artifacts, rara_checkpoints,
             rara_workers TO rara_worker';
    EXECUTE 'GRANT UPDATE ON rara_steps, rara_runs, rara_attempts, rara_workers TO rara_worker';
    EXECUTE 'GRANT INSERT ON rara_attempts, rara_events, rara_artifacts, rara_step_artifacts,
             rara_checkpoints, rara_workers TO rara_worker';

    -- operator
    EXECUTE 'GRANT SELECT ON ALL TABLES IN SCHEMA public TO rara_operator';
    EXECUTE 'GRANT INSERT, UPDATE ON rara_definitions TO rara_operator';
    EXECUTE 'GRANT INSERT ON rara_definition_versions, rara_runs, rara_steps TO rara_operator';

    -- client (CLI, applications)
    EXECUTE 'GRANT SELECT ON ALL TABLES IN SCHEMA public TO rara_client';
    EXECUTE 'GRANT INSERT, UPDATE ON rara_definitions TO rara_client';
    EXECUTE 'GRANT INSERT ON rara_definition_versions, rara_runs, rara_steps TO rara_client';
    EXECUTE 'GRANT UPDATE ON rara_runs, rara_steps TO rara_client';  -- cancel
END $$;
