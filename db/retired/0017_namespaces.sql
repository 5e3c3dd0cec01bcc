-- rara 0017: every name lives in a namespace (issue 34, item 1; docs/namespaces.md,
-- docs/decisions/0010-namespaces.md).
--
-- A namespace is a team's: on Kubernetes the namespace of its resources, elsewhere what the
-- client says (`--namespace`, RARA_NAMESPACE; `default` unless said). Definitions, their
-- versions, runs, schedules and their ticks carry it, and every name is unique within it: the
-- same definition name in two namespaces is two histories, each from version 1; an
-- idempotency key (a schedule's `schedule:<name>:<tick>` among them) is one run per
-- namespace. Runs carry it too, copied from their version by the functions that insert runs,
-- so that the filters of item 2 and the lease's fair share of item 3 read it from the run.
--
-- Every existing row moves to `default`: the column is added with that default (a catalog
-- change, no table rewrite, whatever the size), and the default is then dropped so that no
-- writer can forget to say which namespace (the existing rows keep `default`). Keys and
-- references are rebuilt on (namespace, name).
--
-- Not in a namespace, and why: steps, attempts, events and artifacts belong to their run;
-- workers serve the fleet (item 2 says which namespaces a deployment serves); capability
-- limits are the fleet's capacity (per-namespace quotas are item 3's); the step cache is keyed
-- by content (item 2 decides whether teams share entries).
--
-- The functions whose signature gains p_namespace are dropped here (db/functions/*.sql makes
-- them again, p_namespace last with `default`, so a process of the previous release keeps
-- calling them by their named parameters during a rolling upgrade).

ALTER TABLE rara_definitions
    ADD COLUMN namespace text NOT NULL DEFAULT 'default'
        CONSTRAINT rara_definitions_namespace_check
        CHECK (namespace ~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$');
ALTER TABLE rara_definition_versions ADD COLUMN namespace text NOT NULL DEFAULT 'default';
ALTER TABLE rara_runs ADD COLUMN namespace text NOT NULL DEFAULT 'default';
ALTER TABLE rara_schedules ADD COLUMN namespace text NOT NULL DEFAULT 'default';
ALTER TABLE rara_schedule_ticks ADD COLUMN namespace text NOT NULL DEFAULT 'default';
ALTER TABLE rara_definitions ALTER COLUMN namespace DROP DEFAULT;
ALTER TABLE rara_definition_versions ALTER COLUMN namespace DROP DEFAULT;
ALTER TABLE rara_runs ALTER COLUMN namespace DROP DEFAULT;
ALTER TABLE rara_schedules ALTER COLUMN namespace DROP DEFAULT;
ALTER TABLE rara_schedule_ticks ALTER COLUMN namespace DROP DEFAULT;

-- Definitions and versions: (namespace, name).
ALTER TABLE rara_definition_versions
    DROP CONSTRAINT rara_definition_versions_name_fkey,
    DROP CONSTRAINT rara_definition_versions_name_digest_key,
    DROP CONSTRAINT rara_definition_versions_name_version_key;
ALTER TABLE rara_definitions
    DROP CONSTRAINT rara_definitions_pkey,
    ADD CONSTRAINT rara_definitions_pkey PRIMARY KEY (namespace, name);
ALTER TABLE rara_definition_versions
    ADD CONSTRAINT rara_definition_versions_name_version_key
        UNIQUE (namespace, name, version),
    ADD CONSTRAINT rara_definition_versions_name_digest_key
        UNIQUE (namespace, name, digest),
    ADD CONSTRAINT rara_definition_versions_name_fkey
        FOREIGN KEY (namespace, name) REFERENCES rara_definitions (namespace, name);

-- Runs: an idempotency key is unique within its namespace; a namespace's runs, newest first
-- (the UI's and the CLI's lists), without reading the others'.
ALTER TABLE rara_runs
    DROP CONSTRAINT rara_runs_idempotency_key_key,
    ADD CONSTRAINT rara_runs_idempotency_key_key UNIQUE (namespace, idempotency_key);
CREATE INDEX rara_runs_by_namespace ON rara_runs (namespace, id);

-- Schedules and their ticks: (namespace, name).
ALTER TABLE rara_schedule_ticks
    DROP CONSTRAINT rara_schedule_ticks_schedule_fkey,
    DROP CONSTRAINT rara_schedule_ticks_pkey;
ALTER TABLE rara_schedules
    DROP CONSTRAINT rara_schedules_pkey,
    ADD CONSTRAINT rara_schedules_pkey PRIMARY KEY (namespace, name);
ALTER TABLE rara_schedule_ticks
    ADD CONSTRAINT rara_schedule_ticks_pkey PRIMARY KEY (namespace, schedule, tick),
    ADD CONSTRAINT rara_schedule_ticks_schedule_fkey FOREIGN KEY (namespace, schedule)
        REFERENCES rara_schedules (namespace, name) ON DELETE CASCADE;

DROP FUNCTION IF EXISTS rara_definition_register(text, jsonb);
DROP FUNCTION IF EXISTS rara_definition_retire(text);
DROP FUNCTION IF EXISTS rara_run_start(text, integer, text, jsonb, text, boolean,
                                       double precision);
DROP FUNCTION IF EXISTS rara_schedule_apply(text, text, integer, text, text, jsonb, text,
                                            integer, boolean, integer, integer, jsonb,
                                            timestamptz);
DROP FUNCTION IF EXISTS rara_schedule_suspend(text, boolean, timestamptz);
DROP FUNCTION IF EXISTS rara_schedule_delete(text);
DROP FUNCTION IF EXISTS rara_schedule_claim(integer);
DROP FUNCTION IF EXISTS rara_schedule_decide(text, jsonb, integer, timestamptz);
