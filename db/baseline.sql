-- rara's baseline: the schema of a new database, as migrations 0001-0029 left it.
--
-- rara.pg.migrate applies this file to an empty database (recorded as version 29, `baseline`),
-- then the migrations of db/migrations/ (0030 on), then the function files of db/functions/.
-- A database the retired chain 0001-0029 built (db/retired/) is recognised by its checksums
-- and re-stamped as at this baseline: tests/db/test_baseline.py builds a database both ways
-- and compares their catalogs. So this file changes only in its comments and layout (its
-- statement checksum is recorded in every database); a change of schema is a new migration.
--
-- What is not here: the functions (db/functions/, run after the migrations, also grant the
-- reads and EXECUTE), row-level security being on (`rara migrate` turns isolation between
-- namespaces on for a new database), and rara's own tables rara_schema_migrations and
-- rara_schema_functions (the runner's).

-- The group roles (NOLOGIN; docs/least-privilege.md). Deployments make login roles that are
-- members of one of them:
--   rara_reader    reads (the web UI's read-only mode); every process role is a member
--   rara_worker    leases and ends steps
--   rara_operator  registers definitions, starts runs; a member of rara_vouch
--   rara_client    applications and the CLI
--   rara_vouch     holds no privilege: membership is the right to name the person a login
--                  authenticated (an approval's decider)
-- Roles are cluster-wide: an owner that may create roles (a superuser or CREATEROLE) makes
-- those missing; any other owner must find each made and be granted it WITH ADMIN OPTION by a
-- superuser (`rara access bootstrap-sql OWNER`), and is refused here, naming the role, if not.
DO $$
DECLARE
    role_name text;
    may_create boolean := EXISTS (SELECT FROM pg_roles WHERE rolname = current_user
                                  AND (rolsuper OR rolcreaterole));
BEGIN
    FOREACH role_name IN ARRAY
        ARRAY['rara_reader', 'rara_worker', 'rara_operator', 'rara_client', 'rara_vouch']
    LOOP
        IF may_create AND NOT EXISTS (SELECT FROM pg_roles WHERE rolname = role_name) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', role_name);
        END IF;
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
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO rara_worker, rara_operator, rara_client,'
                   ' rara_reader', current_schema());
    FOREACH role_name IN ARRAY ARRAY['rara_worker', 'rara_operator', 'rara_client'] LOOP
        IF NOT pg_has_role(role_name, 'rara_reader', 'MEMBER') THEN
            EXECUTE format('GRANT rara_reader TO %I', role_name);
        END IF;
    END LOOP;
    IF NOT pg_has_role('rara_operator', 'rara_vouch', 'MEMBER') THEN
        GRANT rara_vouch TO rara_operator;
    END IF;
END $$;

-- A function is executable by PUBLIC unless revoked: none the migrating role makes is;
-- rara_grant (db/functions/base.sql) grants each to the roles that call it.
ALTER DEFAULT PRIVILEGES REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;

-- JIT compiled the hot path's generic plans for longer than they ran (53 of 58 ms).
DO $$ BEGIN
    EXECUTE format('ALTER DATABASE %I SET jit = off', current_database());
END $$;

-- The states of runs, steps and attempts (the transitions allowed: db/functions/states.sql).

CREATE TYPE rara_attempt_outcome AS ENUM (
    'running',
    'succeeded',
    'failed',
    'timed_out',
    'lease_expired',
    'released',
    'cancelled'
);

CREATE TYPE rara_run_status AS ENUM (
    'pending',
    'running',
    'succeeded',
    'failed',
    'cancelled'
);

CREATE TYPE rara_step_status AS ENUM (
    'blocked',
    'ready',
    'running',
    'succeeded',
    'failed',
    'cancelled'
);

-- The functions the tables' defaults, triggers and policies name must exist before them. Their
-- definitions are db/functions/'s (access.sql, states.sql, lanes.sql, waits.sql, ...), which
-- replace these stand-ins, body, attributes and grants, in the same transaction, after the
-- migrations. A stand-in refuses to run: no migration writes rows through them (on a database
-- being upgraded the real ones are in place). A statement's trigger fires on no rows too, so a
-- trigger's stand-in lets a statement pass and refuses each row.
CREATE FUNCTION rara_caller() RETURNS name LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'rara: rara_caller is db/functions/access.sql''s, not yet applied';
END $$;
CREATE FUNCTION rara_caller_namespaces() RETURNS text[] LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'rara: rara_caller_namespaces is db/functions/access.sql''s, not yet applied';
END $$;
DO $do$
DECLARE
    name text;
BEGIN
    FOREACH name IN ARRAY ARRAY['rara_check_run_transition', 'rara_check_step_transition',
        'rara_delete_attempts_of_deleted_steps', 'rara_lanes_add', 'rara_notify_queued',
        'rara_notify_ready', 'rara_notify_run', 'rara_refuse_release_change',
        'rara_refuse_version_change', 'rara_wait_begin']
    LOOP
        EXECUTE format($f$
            CREATE FUNCTION %I() RETURNS trigger LANGUAGE plpgsql AS $body$
            BEGIN
                IF TG_LEVEL = 'ROW' THEN
                    RAISE EXCEPTION 'rara: trigger %% of %% runs a stand-in (db/functions/ not applied)',
                        TG_NAME, TG_TABLE_NAME;
                END IF;
                RETURN NULL;
            END $body$ $f$, name);
    END LOOP;
END $do$;

-- A definition's name in a namespace; retiring it keeps every version (runs pin versions).
CREATE TABLE rara_definitions (
    name text NOT NULL,
    created_at timestamptz DEFAULT now() NOT NULL,
    retired_at timestamptz,
    namespace text NOT NULL,
    CONSTRAINT rara_definitions_namespace_check
        CHECK (namespace ~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'),
    CONSTRAINT rara_definitions_pkey PRIMARY KEY (namespace, name)
);

-- The registered versions of a definition: immutable (the triggers below refuse
-- UPDATE, DELETE and TRUNCATE); `steps` is the spec's step list as the functions read it.
CREATE TABLE rara_definition_versions (
    id bigint GENERATED ALWAYS AS IDENTITY,
    name text NOT NULL,
    version integer NOT NULL,
    digest text NOT NULL,
    spec jsonb NOT NULL,
    created_at timestamptz DEFAULT now() NOT NULL,
    steps jsonb NOT NULL,
    namespace text NOT NULL,
    CONSTRAINT rara_definition_versions_digest_check CHECK (digest ~ '^sha256:[0-9a-f]{64}$'),
    CONSTRAINT rara_definition_versions_version_check CHECK (version >= 1),
    CONSTRAINT rara_definition_versions_name_digest_key UNIQUE (namespace, name, digest),
    CONSTRAINT rara_definition_versions_name_version_key UNIQUE (namespace, name, version),
    CONSTRAINT rara_definition_versions_pkey PRIMARY KEY (id)
);

-- One run of one definition version: its input, status, counts of its steps, result.
CREATE TABLE rara_runs (
    id bigint GENERATED ALWAYS AS IDENTITY,
    definition_version_id bigint NOT NULL,
    input jsonb DEFAULT '{}'::jsonb NOT NULL,
    status rara_run_status DEFAULT 'pending'::rara_run_status NOT NULL,
    idempotency_key text,
    cancel_requested boolean DEFAULT false NOT NULL,
    error jsonb,
    created_at timestamptz DEFAULT now() NOT NULL,
    started_at timestamptz,
    finished_at timestamptz,
    steps_total integer DEFAULT 0 NOT NULL,
    steps_succeeded integer DEFAULT 0 NOT NULL,
    steps_failed integer DEFAULT 0 NOT NULL,
    steps_cancelled integer DEFAULT 0 NOT NULL,
    namespace text NOT NULL,
    started_by text DEFAULT rara_caller(),
    CONSTRAINT rara_runs_finished_iff_terminal
        CHECK ((status = ANY (ARRAY['succeeded'::rara_run_status, 'failed'::rara_run_status, 'cancelled'::rara_run_status])) = (finished_at IS NOT NULL)),
    CONSTRAINT rara_runs_started_unless_pending
        CHECK (((status = 'pending'::rara_run_status) = (started_at IS NULL)) OR (status = 'cancelled'::rara_run_status)),
    CONSTRAINT rara_runs_step_counts
        CHECK ((steps_succeeded >= 0) AND (steps_failed >= 0) AND (steps_cancelled >= 0) AND (((steps_succeeded + steps_failed) + steps_cancelled) <= steps_total)),
    CONSTRAINT rara_runs_idempotency_key_key UNIQUE (namespace, idempotency_key),
    CONSTRAINT rara_runs_pkey PRIMARY KEY (id)
)
WITH (fillfactor='80');
CREATE INDEX rara_runs_by_namespace ON rara_runs (namespace, id);

-- The hot table: one row per step of a run (map items are steps too), with its lease.
-- fillfactor leaves room on each page so lease, heartbeat and end stay HOT updates.
CREATE TABLE rara_steps (
    id bigint GENERATED ALWAYS AS IDENTITY,
    run_id bigint NOT NULL,
    key text NOT NULL,
    depends_on text[] DEFAULT '{}'::text[] NOT NULL,
    pending_deps integer DEFAULT 0 NOT NULL,
    capability text NOT NULL,
    executor text NOT NULL,
    priority integer DEFAULT 0 NOT NULL,
    payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    max_attempts integer NOT NULL,
    retry_initial_ms integer NOT NULL,
    retry_max_ms integer NOT NULL,
    retry_coefficient double precision NOT NULL,
    timeout_ms integer,
    heartbeat_timeout_ms integer,
    status rara_step_status NOT NULL,
    attempt integer DEFAULT 0 NOT NULL,
    releases integer DEFAULT 0 NOT NULL,
    available_at timestamptz DEFAULT now() NOT NULL,
    leased_by text,
    lease_token uuid,
    lease_expires_at timestamptz,
    heartbeat_at timestamptz,
    cancel_requested boolean DEFAULT false NOT NULL,
    result jsonb,
    error jsonb,
    started_at timestamptz,
    finished_at timestamptz,
    dependants text[] DEFAULT '{}'::text[] NOT NULL,
    map_over text[],
    map_max_parallel integer,
    map_input jsonb,
    map_total integer,
    map_next integer,
    map_succeeded integer DEFAULT 0 NOT NULL,
    map_failed integer DEFAULT 0 NOT NULL,
    map_parent bigint,
    map_index integer,
    cache jsonb,
    reused_from jsonb,
    namespace text NOT NULL,
    concurrency_key text,
    concurrency_max integer,
    wait jsonb,
    CONSTRAINT rara_steps_attempt_check CHECK (attempt >= 0),
    CONSTRAINT rara_steps_attempts_bounded CHECK ((attempt - releases) <= max_attempts),
    CONSTRAINT rara_steps_capability_check CHECK (capability ~ '^[a-z0-9][a-z0-9._-]*@[0-9]+$'),
    CONSTRAINT rara_steps_concurrency_both
        CHECK ((concurrency_key IS NULL) = (concurrency_max IS NULL)),
    CONSTRAINT rara_steps_concurrency_max_check
        CHECK ((concurrency_max >= 1) AND (concurrency_max <= 10000)),
    CONSTRAINT rara_steps_executor_check CHECK (executor = ANY (ARRAY['inprocess', 'grpc'])),
    CONSTRAINT rara_steps_finished_iff_terminal
        CHECK ((status = ANY (ARRAY['succeeded'::rara_step_status, 'failed'::rara_step_status, 'cancelled'::rara_step_status])) = (finished_at IS NOT NULL)),
    CONSTRAINT rara_steps_heartbeat_timeout_ms_check CHECK (heartbeat_timeout_ms > 0),
    CONSTRAINT rara_steps_lease_iff_running
        CHECK ((status = 'running'::rara_step_status) = ((leased_by IS NOT NULL) AND (lease_token IS NOT NULL) AND (lease_expires_at IS NOT NULL))),
    CONSTRAINT rara_steps_map_child CHECK ((map_parent IS NULL) = (map_index IS NULL)),
    CONSTRAINT rara_steps_map_counts
        CHECK ((map_total IS NULL) OR ((map_succeeded + map_failed) <= map_total)),
    CONSTRAINT rara_steps_map_max_parallel_check CHECK (map_max_parallel >= 1),
    CONSTRAINT rara_steps_max_attempts_check CHECK (max_attempts >= 1),
    CONSTRAINT rara_steps_pending_deps_check CHECK (pending_deps >= 0),
    CONSTRAINT rara_steps_priority_range
        CHECK ((priority >= '-1000'::integer) AND (priority <= 1000)),
    CONSTRAINT rara_steps_releases_check CHECK (releases >= 0),
    CONSTRAINT rara_steps_result_only_if_succeeded
        CHECK ((result IS NULL) OR (status = 'succeeded'::rara_step_status)),
    CONSTRAINT rara_steps_retry_coefficient_check
        CHECK (retry_coefficient >= (1)::double precision),
    CONSTRAINT rara_steps_retry_initial_ms_check CHECK (retry_initial_ms >= 0),
    CONSTRAINT rara_steps_retry_max_ms_check CHECK (retry_max_ms >= 0),
    CONSTRAINT rara_steps_timeout_ms_check CHECK (timeout_ms > 0),
    CONSTRAINT rara_steps_pkey PRIMARY KEY (id),
    CONSTRAINT rara_steps_run_key_key UNIQUE (run_id, key)
)
WITH (fillfactor='70');
CREATE INDEX rara_steps_map_children ON rara_steps (map_parent, map_index)
    WHERE (map_parent IS NOT NULL);
CREATE INDEX rara_steps_ready ON rara_steps (capability, executor, namespace, ((- priority)), available_at, id)
    WHERE (status = 'ready'::rara_step_status);
CREATE INDEX rara_steps_running_by_key ON rara_steps (concurrency_key)
    WHERE ((lease_expires_at IS NOT NULL) AND (concurrency_key IS NOT NULL));
CREATE INDEX rara_steps_running_cache_key ON rara_steps (((cache ->> 'key')))
    WHERE ((status = 'running'::rara_step_status) AND (cache IS NOT NULL));
CREATE INDEX rara_steps_running_expiry ON rara_steps (lease_expires_at)
    WHERE (lease_expires_at IS NOT NULL);

-- Attempt history: one row per lease taken, closed with its outcome. The ownership
-- checker (tests/history.py) reads it.
CREATE TABLE rara_attempts (
    step_id bigint NOT NULL,
    attempt integer NOT NULL,
    run_id bigint NOT NULL,
    worker text NOT NULL,
    lease_token uuid NOT NULL,
    started_at timestamptz DEFAULT now() NOT NULL,
    ended_at timestamptz,
    ended_by text,
    outcome rara_attempt_outcome DEFAULT 'running'::rara_attempt_outcome NOT NULL,
    error jsonb,
    CONSTRAINT rara_attempts_attempt_check CHECK (attempt >= 1),
    CONSTRAINT rara_attempts_ended_iff_closed
        CHECK ((outcome = 'running'::rara_attempt_outcome) = (ended_at IS NULL)),
    CONSTRAINT rara_attempts_pkey PRIMARY KEY (step_id, attempt)
)
WITH (fillfactor='80');

-- Progress events: per (step, attempt) a strictly increasing seq; a replayed seq is one row.
CREATE TABLE rara_events (
    step_id bigint NOT NULL,
    attempt integer NOT NULL,
    seq integer NOT NULL,
    kind text NOT NULL,
    fraction double precision,
    message text DEFAULT '' NOT NULL,
    metrics jsonb DEFAULT '{}'::jsonb NOT NULL,
    created_at timestamptz DEFAULT now() NOT NULL,
    CONSTRAINT rara_events_fraction_check
        CHECK ((fraction >= (0)::double precision) AND (fraction <= (1)::double precision)),
    CONSTRAINT rara_events_kind_check CHECK (kind = ANY (ARRAY['progress', 'checkpoint', 'log'])),
    CONSTRAINT rara_events_seq_check CHECK (seq >= 1),
    CONSTRAINT rara_events_pkey PRIMARY KEY (step_id, attempt, seq)
);

-- Content-addressed blobs known to the database (the bytes live in the artifact store).
CREATE TABLE rara_artifacts (
    digest text NOT NULL,
    size bigint NOT NULL,
    created_at timestamptz DEFAULT now() NOT NULL,
    CONSTRAINT rara_artifacts_digest_check CHECK (digest ~ '^sha256:[0-9a-f]{64}$'),
    CONSTRAINT rara_artifacts_size_check CHECK (size >= 0),
    CONSTRAINT rara_artifacts_pkey PRIMARY KEY (digest)
);

-- The manifest: what an attempt produced, written in the same transaction as its result.
CREATE TABLE rara_step_artifacts (
    step_id bigint NOT NULL,
    attempt integer NOT NULL,
    name text NOT NULL,
    digest text NOT NULL,
    size bigint NOT NULL,
    media_type text NOT NULL,
    CONSTRAINT rara_step_artifacts_name_check CHECK (name ~ '^[A-Za-z0-9._/-]{1,200}$'),
    CONSTRAINT rara_step_artifacts_pkey PRIMARY KEY (step_id, attempt, name)
);
ALTER TABLE rara_step_artifacts
    ADD CONSTRAINT rara_step_artifacts_media_type_check CHECK ((char_length(media_type) <= 255) AND (media_type ~ '^[ -~]*$') AND (media_type ~ '^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}( *; *[A-Za-z0-9!#$&^_.+-]+=([A-Za-z0-9!#$&^_.+-]+|"[^"\\[:cntrl:]]*"))*$')) NOT VALID;
CREATE INDEX rara_step_artifacts_digest ON rara_step_artifacts (digest);

-- Checkpoints: small JSON state plus an optional blob; the next attempt resumes from the latest.
CREATE TABLE rara_checkpoints (
    step_id bigint NOT NULL,
    attempt integer NOT NULL,
    seq integer NOT NULL,
    state jsonb NOT NULL,
    digest text,
    created_at timestamptz DEFAULT now() NOT NULL,
    CONSTRAINT rara_checkpoints_pkey PRIMARY KEY (step_id, attempt, seq)
);

-- Live workers and what they serve (routing refuses runs nobody can execute).
CREATE TABLE rara_workers (
    id text NOT NULL,
    capabilities text[] NOT NULL,
    started_at timestamptz DEFAULT now() NOT NULL,
    heartbeat_at timestamptz DEFAULT now() NOT NULL,
    stopped_at timestamptz,
    login name,
    executors jsonb DEFAULT '[]'::jsonb NOT NULL,
    CONSTRAINT rara_workers_executors_is_array CHECK (jsonb_typeof(executors) = 'array'),
    CONSTRAINT rara_workers_pkey PRIMARY KEY (id)
);

-- At most max_running steps of a capability run at once, fleet-wide.
CREATE TABLE rara_capability_limits (
    capability text NOT NULL,
    max_running integer NOT NULL,
    updated_at timestamptz DEFAULT now() NOT NULL,
    CONSTRAINT rara_capability_limits_capability_check
        CHECK (capability ~ '^[a-z0-9][a-z0-9._-]*@[0-9]+$'),
    CONSTRAINT rara_capability_limits_max_running_check CHECK (max_running >= 0),
    CONSTRAINT rara_capability_limits_pkey PRIMARY KEY (capability)
);

-- A map step's list of items, in slices; a map expands its items from here.
CREATE TABLE rara_map_lists (
    map_id bigint NOT NULL,
    first_index integer NOT NULL,
    items jsonb NOT NULL,
    CONSTRAINT rara_map_lists_first_index_check CHECK (first_index >= 0),
    CONSTRAINT rara_map_lists_items_check CHECK (jsonb_typeof(items) = 'array'),
    CONSTRAINT rara_map_lists_pkey PRIMARY KEY (map_id, first_index)
);

-- The step cache: a step's result by its cache key, reused by a later step with the same key.
CREATE TABLE rara_step_cache (
    key text NOT NULL,
    capability text NOT NULL,
    step_key text NOT NULL,
    parts jsonb NOT NULL,
    result jsonb,
    manifest jsonb DEFAULT '[]'::jsonb NOT NULL,
    source_run bigint NOT NULL,
    source_step bigint NOT NULL,
    source_attempt integer NOT NULL,
    created_at timestamptz DEFAULT now() NOT NULL,
    expires_at timestamptz,
    base text NOT NULL,
    reads jsonb DEFAULT '{}'::jsonb NOT NULL,
    namespace text NOT NULL,
    CONSTRAINT rara_step_cache_base_check CHECK (base ~ '^sha256:[0-9a-f]{64}$'),
    CONSTRAINT rara_step_cache_key_check CHECK (key ~ '^sha256:[0-9a-f]{64}$'),
    CONSTRAINT rara_step_cache_manifest_check CHECK (jsonb_typeof(manifest) = 'array'),
    CONSTRAINT rara_step_cache_parts_check CHECK (jsonb_typeof(parts) = 'object'),
    CONSTRAINT rara_step_cache_reads_check CHECK (jsonb_typeof(reads) = 'object'),
    CONSTRAINT rara_step_cache_pkey PRIMARY KEY (key, namespace, capability)
);
CREATE INDEX rara_step_cache_by_base ON rara_step_cache (base, namespace, capability, created_at);
CREATE INDEX rara_step_cache_by_step ON rara_step_cache (capability, step_key, created_at);

-- Schedules: a cron expression that starts runs of a definition, with its policies.
CREATE TABLE rara_schedules (
    name text NOT NULL,
    definition text NOT NULL,
    version integer,
    cron text NOT NULL,
    time_zone text NOT NULL,
    input jsonb DEFAULT '{}'::jsonb NOT NULL,
    concurrency_policy text NOT NULL,
    starting_deadline_seconds integer NOT NULL,
    suspended boolean DEFAULT false NOT NULL,
    successful_runs_kept integer NOT NULL,
    failed_runs_kept integer NOT NULL,
    spec jsonb NOT NULL,
    next_tick timestamptz NOT NULL,
    last_tick timestamptz,
    last_run_id bigint,
    missed_ticks bigint DEFAULT 0 NOT NULL,
    created_at timestamptz DEFAULT now() NOT NULL,
    updated_at timestamptz DEFAULT now() NOT NULL,
    namespace text NOT NULL,
    refused_reason text,
    refused_at timestamptz,
    CONSTRAINT rara_schedules_concurrency_policy_check
        CHECK (concurrency_policy = ANY (ARRAY['Allow', 'Forbid', 'Replace'])),
    CONSTRAINT rara_schedules_failed_runs_kept_check CHECK (failed_runs_kept >= 0),
    CONSTRAINT rara_schedules_input_check CHECK (jsonb_typeof(input) = 'object'),
    CONSTRAINT rara_schedules_name_check CHECK (name ~ '^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$'),
    CONSTRAINT rara_schedules_refused_both CHECK ((refused_reason IS NULL) = (refused_at IS NULL)),
    CONSTRAINT rara_schedules_starting_deadline_seconds_check
        CHECK (starting_deadline_seconds >= 1),
    CONSTRAINT rara_schedules_successful_runs_kept_check CHECK (successful_runs_kept >= 0),
    CONSTRAINT rara_schedules_version_check CHECK (version >= 1),
    CONSTRAINT rara_schedules_pkey PRIMARY KEY (namespace, name)
);
CREATE INDEX rara_schedules_due ON rara_schedules (next_tick)
    WHERE ((NOT suspended) AND (refused_at IS NULL));

-- Each decided tick: the run it started, or why none (skipped by Forbid, or refused). A
-- manual trigger is a row of its own (outcome `triggered`, tick = when).
CREATE TABLE rara_schedule_ticks (
    schedule text NOT NULL,
    tick timestamptz NOT NULL,
    outcome text NOT NULL,
    run_id bigint,
    reason text,
    decided_at timestamptz DEFAULT now() NOT NULL,
    namespace text NOT NULL,
    CONSTRAINT rara_schedule_ticks_outcome_check
        CHECK (outcome = ANY (ARRAY['started', 'skipped', 'refused', 'triggered', 'backfilled'])),
    CONSTRAINT rara_schedule_ticks_pkey PRIMARY KEY (namespace, schedule, tick)
);
CREATE INDEX rara_schedule_ticks_run ON rara_schedule_ticks (run_id) WHERE (run_id IS NOT NULL);

-- What a step read (artifacts by digest): part of its cache key, and lineage.
CREATE TABLE rara_step_reads (
    step_id bigint NOT NULL,
    digest text NOT NULL,
    CONSTRAINT rara_step_reads_pkey PRIMARY KEY (step_id, digest)
);
CREATE INDEX rara_step_reads_digest ON rara_step_reads (digest);

-- Which roles act in which namespaces ('*': all) while isolation is on.
CREATE TABLE rara_namespace_access (
    role name NOT NULL,
    namespace text NOT NULL,
    granted_at timestamptz DEFAULT now() NOT NULL,
    CONSTRAINT rara_namespace_access_namespace_check
        CHECK ((namespace = '*') OR (namespace ~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$')),
    CONSTRAINT rara_namespace_access_pkey PRIMARY KEY (role, namespace)
);

-- A namespace's weight in the fair-share draw of the lease.
CREATE TABLE rara_namespace_shares (
    namespace text NOT NULL,
    weight integer NOT NULL,
    updated_at timestamptz DEFAULT now() NOT NULL,
    CONSTRAINT rara_namespace_shares_namespace_check
        CHECK (namespace ~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'),
    CONSTRAINT rara_namespace_shares_weight_check CHECK ((weight >= 1) AND (weight <= 10000)),
    CONSTRAINT rara_namespace_shares_pkey PRIMARY KEY (namespace)
);

-- Lanes of the fair-share draw: per (capability, executor) the namespaces' intervals, each
-- as long as its weight, tiling [0, sum of weights); kept by rara_lanes_rebalance.
CREATE TABLE rara_lanes (
    capability text NOT NULL,
    executor text NOT NULL,
    namespace text NOT NULL,
    weight integer DEFAULT 1 NOT NULL,
    low double precision DEFAULT 0 NOT NULL,
    CONSTRAINT rara_lanes_pkey PRIMARY KEY (capability, executor, namespace)
);
CREATE INDEX rara_lanes_draw ON rara_lanes (capability, executor, low);

-- A namespace's quota: at most this many of its steps run at once.
CREATE TABLE rara_namespace_quotas (
    namespace text NOT NULL,
    capability text NOT NULL,
    max_running integer NOT NULL,
    updated_at timestamptz DEFAULT now() NOT NULL,
    CONSTRAINT rara_namespace_quotas_capability_check
        CHECK ((capability = '*') OR (capability ~ '^[a-z0-9][a-z0-9._-]*@[0-9]+$')),
    CONSTRAINT rara_namespace_quotas_max_running_check CHECK (max_running >= 0),
    CONSTRAINT rara_namespace_quotas_namespace_check
        CHECK (namespace ~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'),
    CONSTRAINT rara_namespace_quotas_pkey PRIMARY KEY (namespace, capability)
);

-- Steps waiting for a time, a signal or an approval, and when they are due.
CREATE TABLE rara_waits (
    step_id bigint NOT NULL,
    run_id bigint NOT NULL,
    namespace text NOT NULL,
    kind text NOT NULL,
    signal text,
    due_at timestamptz,
    began_at timestamptz DEFAULT now() NOT NULL,
    CONSTRAINT rara_waits_kind_check CHECK (kind = ANY (ARRAY['timer', 'signal', 'approval'])),
    CONSTRAINT rara_waits_pkey PRIMARY KEY (step_id)
);
CREATE INDEX rara_waits_due ON rara_waits (due_at) WHERE (due_at IS NOT NULL);
CREATE INDEX rara_waits_run ON rara_waits (run_id);

-- Signals accepted, once per (run, key): a repeated key is the same signal.
CREATE TABLE rara_signals (
    run_id bigint NOT NULL,
    key text NOT NULL,
    namespace text NOT NULL,
    name text NOT NULL,
    payload jsonb,
    step_id bigint NOT NULL,
    sent_by text NOT NULL,
    sent_at timestamptz DEFAULT now() NOT NULL,
    CONSTRAINT rara_signals_key_check CHECK ((length(key) >= 1) AND (length(key) <= 200)),
    CONSTRAINT rara_signals_pkey PRIMARY KEY (run_id, key)
);

-- An approval gate: its evidence, frozen when it began waiting, who may decide, and the
-- decision, made once.
CREATE TABLE rara_approvals (
    step_id bigint NOT NULL,
    run_id bigint NOT NULL,
    namespace text NOT NULL,
    step_key text NOT NULL,
    evidence jsonb NOT NULL,
    approvers text[] NOT NULL,
    requested_at timestamptz DEFAULT now() NOT NULL,
    decision text,
    decided_by text,
    decided_login text,
    decided_at timestamptz,
    reason text,
    CONSTRAINT rara_approvals_check CHECK ((decision IS NULL) = (decided_at IS NULL)),
    CONSTRAINT rara_approvals_decision_check
        CHECK (decision = ANY (ARRAY['approved', 'rejected', 'timed_out'])),
    CONSTRAINT rara_approvals_reason_check CHECK (length(reason) <= 2000),
    CONSTRAINT rara_approvals_pkey PRIMARY KEY (step_id)
);
CREATE INDEX rara_approvals_open ON rara_approvals (namespace, requested_at)
    WHERE (decision IS NULL);
CREATE INDEX rara_approvals_run ON rara_approvals (run_id);

-- Releases: the results of a succeeded run, published under a name and number.
CREATE TABLE rara_releases (
    id bigint GENERATED ALWAYS AS IDENTITY,
    namespace text NOT NULL,
    name text NOT NULL,
    number integer NOT NULL,
    run_id bigint NOT NULL,
    definition_version_id bigint NOT NULL,
    results jsonb NOT NULL,
    promoted_by name DEFAULT SESSION_USER NOT NULL,
    promoted_at timestamptz DEFAULT now() NOT NULL,
    note text,
    CONSTRAINT rara_releases_name_check CHECK (name ~ '^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$'),
    CONSTRAINT rara_releases_namespace_check
        CHECK (namespace ~ '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'),
    CONSTRAINT rara_releases_note_check CHECK (char_length(note) <= 4000),
    CONSTRAINT rara_releases_number_check CHECK (number >= 1),
    CONSTRAINT rara_releases_results_check CHECK (jsonb_typeof(results) = 'object'),
    CONSTRAINT rara_releases_name_number_key UNIQUE (namespace, name, number),
    CONSTRAINT rara_releases_pkey PRIMARY KEY (id)
);

-- The artifacts of a release: the manifest rows of its run's succeeded attempts, copied.
CREATE TABLE rara_release_artifacts (
    release_id bigint NOT NULL,
    step_key text NOT NULL,
    name text NOT NULL,
    digest text NOT NULL,
    size bigint NOT NULL,
    media_type text NOT NULL,
    CONSTRAINT rara_release_artifacts_size_check CHECK (size >= 0),
    CONSTRAINT rara_release_artifacts_pkey PRIMARY KEY (release_id, step_key, name)
);
CREATE INDEX rara_release_artifacts_digest ON rara_release_artifacts (digest);

-- The pointer per name: which release readers get for NAME; moved only by the functions.
CREATE TABLE rara_release_current (
    namespace text NOT NULL,
    name text NOT NULL,
    number integer NOT NULL,
    updated_at timestamptz DEFAULT now() NOT NULL,
    CONSTRAINT rara_release_current_pkey PRIMARY KEY (namespace, name)
);

-- Every move of a pointer, oldest first: a promote or a rollback (with its reason).
CREATE TABLE rara_release_moves (
    id bigint GENERATED ALWAYS AS IDENTITY,
    namespace text NOT NULL,
    name text NOT NULL,
    action text NOT NULL,
    from_number integer,
    to_number integer NOT NULL,
    moved_by name DEFAULT SESSION_USER NOT NULL,
    moved_at timestamptz DEFAULT now() NOT NULL,
    reason text,
    CONSTRAINT rara_release_moves_action_check CHECK (action = ANY (ARRAY['promote', 'rollback'])),
    CONSTRAINT rara_release_moves_reason_check CHECK (char_length(reason) <= 4000),
    CONSTRAINT rara_release_moves_pkey PRIMARY KEY (id)
);
CREATE INDEX rara_release_moves_by_name ON rara_release_moves (namespace, name, id);

-- The references between the tables.
ALTER TABLE ONLY rara_approvals
    ADD CONSTRAINT rara_approvals_run_id_fkey FOREIGN KEY (run_id)
        REFERENCES rara_runs(id) ON DELETE CASCADE;
ALTER TABLE ONLY rara_approvals
    ADD CONSTRAINT rara_approvals_step_id_fkey FOREIGN KEY (step_id)
        REFERENCES rara_steps(id) ON DELETE CASCADE;
ALTER TABLE ONLY rara_checkpoints
    ADD CONSTRAINT rara_checkpoints_digest_fkey FOREIGN KEY (digest)
        REFERENCES rara_artifacts(digest);
ALTER TABLE ONLY rara_checkpoints
    ADD CONSTRAINT rara_checkpoints_step_id_fkey FOREIGN KEY (step_id)
        REFERENCES rara_steps(id) ON DELETE CASCADE;
ALTER TABLE ONLY rara_definition_versions
    ADD CONSTRAINT rara_definition_versions_name_fkey FOREIGN KEY (namespace, name)
        REFERENCES rara_definitions(namespace, name);
ALTER TABLE ONLY rara_events
    ADD CONSTRAINT rara_events_step_id_fkey FOREIGN KEY (step_id)
        REFERENCES rara_steps(id) ON DELETE CASCADE;
ALTER TABLE ONLY rara_release_artifacts
    ADD CONSTRAINT rara_release_artifacts_digest_fkey FOREIGN KEY (digest)
        REFERENCES rara_artifacts(digest);
ALTER TABLE ONLY rara_release_artifacts
    ADD CONSTRAINT rara_release_artifacts_release_id_fkey FOREIGN KEY (release_id)
        REFERENCES rara_releases(id);
ALTER TABLE ONLY rara_release_current
    ADD CONSTRAINT rara_release_current_namespace_name_number_fkey FOREIGN KEY (namespace, name, number)
        REFERENCES rara_releases(namespace, name, number);
ALTER TABLE ONLY rara_release_moves
    ADD CONSTRAINT rara_release_moves_namespace_name_to_number_fkey FOREIGN KEY (namespace, name, to_number)
        REFERENCES rara_releases(namespace, name, number);
ALTER TABLE ONLY rara_releases
    ADD CONSTRAINT rara_releases_definition_version_id_fkey FOREIGN KEY (definition_version_id)
        REFERENCES rara_definition_versions(id);
ALTER TABLE ONLY rara_schedule_ticks
    ADD CONSTRAINT rara_schedule_ticks_schedule_fkey FOREIGN KEY (namespace, schedule)
        REFERENCES rara_schedules(namespace, name) ON DELETE CASCADE;
ALTER TABLE ONLY rara_signals
    ADD CONSTRAINT rara_signals_run_id_fkey FOREIGN KEY (run_id)
        REFERENCES rara_runs(id) ON DELETE CASCADE;
ALTER TABLE ONLY rara_signals
    ADD CONSTRAINT rara_signals_step_id_fkey FOREIGN KEY (step_id)
        REFERENCES rara_steps(id) ON DELETE CASCADE;
ALTER TABLE ONLY rara_step_artifacts
    ADD CONSTRAINT rara_step_artifacts_digest_fkey FOREIGN KEY (digest)
        REFERENCES rara_artifacts(digest);
ALTER TABLE ONLY rara_step_artifacts
    ADD CONSTRAINT rara_step_artifacts_step_id_fkey FOREIGN KEY (step_id)
        REFERENCES rara_steps(id) ON DELETE CASCADE;
ALTER TABLE ONLY rara_step_reads
    ADD CONSTRAINT rara_step_reads_step_id_fkey FOREIGN KEY (step_id)
        REFERENCES rara_steps(id) ON DELETE CASCADE;
ALTER TABLE ONLY rara_steps
    ADD CONSTRAINT rara_steps_run_id_fkey FOREIGN KEY (run_id)
        REFERENCES rara_runs(id) ON DELETE CASCADE;
ALTER TABLE ONLY rara_waits
    ADD CONSTRAINT rara_waits_run_id_fkey FOREIGN KEY (run_id)
        REFERENCES rara_runs(id) ON DELETE CASCADE;
ALTER TABLE ONLY rara_waits
    ADD CONSTRAINT rara_waits_step_id_fkey FOREIGN KEY (step_id)
        REFERENCES rara_steps(id) ON DELETE CASCADE;

-- The triggers: state machines, immutable histories, notifications, lanes, waits.
CREATE TRIGGER rara_definition_versions_immutable BEFORE DELETE OR UPDATE ON rara_definition_versions
    FOR EACH ROW
    EXECUTE FUNCTION rara_refuse_version_change();
CREATE TRIGGER rara_definition_versions_no_truncate BEFORE TRUNCATE ON rara_definition_versions
    FOR EACH STATEMENT
    EXECUTE FUNCTION rara_refuse_version_change();
CREATE TRIGGER rara_release_artifacts_immutable BEFORE DELETE OR UPDATE ON rara_release_artifacts
    FOR EACH ROW
    EXECUTE FUNCTION rara_refuse_release_change();
CREATE TRIGGER rara_release_artifacts_no_truncate BEFORE TRUNCATE ON rara_release_artifacts
    FOR EACH STATEMENT
    EXECUTE FUNCTION rara_refuse_release_change();
CREATE TRIGGER rara_release_moves_immutable BEFORE DELETE OR UPDATE ON rara_release_moves
    FOR EACH ROW
    EXECUTE FUNCTION rara_refuse_release_change();
CREATE TRIGGER rara_release_moves_no_truncate BEFORE TRUNCATE ON rara_release_moves
    FOR EACH STATEMENT
    EXECUTE FUNCTION rara_refuse_release_change();
CREATE TRIGGER rara_releases_immutable BEFORE DELETE OR UPDATE ON rara_releases
    FOR EACH ROW
    EXECUTE FUNCTION rara_refuse_release_change();
CREATE TRIGGER rara_releases_no_truncate BEFORE TRUNCATE ON rara_releases
    FOR EACH STATEMENT
    EXECUTE FUNCTION rara_refuse_release_change();
CREATE TRIGGER rara_runs_notify AFTER UPDATE OF status ON rara_runs
    FOR EACH ROW
    WHEN (((old.status IS DISTINCT FROM new.status) AND (new.status = ANY (ARRAY['succeeded'::rara_run_status, 'failed'::rara_run_status, 'cancelled'::rara_run_status]))))
    EXECUTE FUNCTION rara_notify_run();
CREATE TRIGGER rara_runs_transition BEFORE UPDATE OF status ON rara_runs
    FOR EACH ROW
    WHEN ((old.status IS DISTINCT FROM new.status))
    EXECUTE FUNCTION rara_check_run_transition();
CREATE TRIGGER rara_steps_delete_attempts AFTER DELETE ON rara_steps REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT
    EXECUTE FUNCTION rara_delete_attempts_of_deleted_steps();
CREATE TRIGGER rara_steps_lanes AFTER INSERT ON rara_steps REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT
    EXECUTE FUNCTION rara_lanes_add();
CREATE TRIGGER rara_steps_notify_queued AFTER INSERT ON rara_steps REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT
    EXECUTE FUNCTION rara_notify_queued();
CREATE TRIGGER rara_steps_notify_ready_insert AFTER INSERT ON rara_steps
    FOR EACH ROW
    WHEN ((new.status = 'ready'::rara_step_status))
    EXECUTE FUNCTION rara_notify_ready();
CREATE TRIGGER rara_steps_notify_ready_update AFTER UPDATE OF status ON rara_steps
    FOR EACH ROW
    WHEN (((new.status = 'ready'::rara_step_status) AND (old.status IS DISTINCT FROM new.status)))
    EXECUTE FUNCTION rara_notify_ready();
CREATE TRIGGER rara_steps_transition BEFORE UPDATE OF status ON rara_steps
    FOR EACH ROW
    WHEN ((old.status IS DISTINCT FROM new.status))
    EXECUTE FUNCTION rara_check_step_transition();
CREATE TRIGGER rara_wait_begin_inserted AFTER INSERT ON rara_steps
    FOR EACH ROW
    WHEN (((new.wait IS NOT NULL) AND (new.pending_deps = 0) AND (new.status = 'blocked'::rara_step_status)))
    EXECUTE FUNCTION rara_wait_begin();
CREATE TRIGGER rara_wait_begin_unblocked AFTER UPDATE OF pending_deps ON rara_steps
    FOR EACH ROW
    WHEN (((new.wait IS NOT NULL) AND (new.pending_deps = 0) AND (old.pending_deps > 0) AND (new.status = 'blocked'::rara_step_status)))
    EXECUTE FUNCTION rara_wait_begin();

-- Isolation between namespaces: once row-level security is on (rara_namespace_isolation), a
-- role reads the rows of its namespaces only ('*': all of them). A row's namespace is its
-- column, or its run's, step's or release's; a role writes only through the functions, which
-- check the same.
DO $$
DECLARE
    t record;
    namespace text;
BEGIN
    FOR t IN SELECT * FROM (VALUES
        ('rara_approvals', 'own', 'namespace'),
        ('rara_definition_versions', 'own', 'namespace'),
        ('rara_definitions', 'own', 'namespace'),
        ('rara_lanes', 'own', 'namespace'),
        ('rara_namespace_quotas', 'own', 'namespace'),
        ('rara_namespace_shares', 'own', 'namespace'),
        ('rara_release_current', 'own', 'namespace'),
        ('rara_release_moves', 'own', 'namespace'),
        ('rara_releases', 'own', 'namespace'),
        ('rara_runs', 'own', 'namespace'),
        ('rara_schedule_ticks', 'own', 'namespace'),
        ('rara_schedules', 'own', 'namespace'),
        ('rara_signals', 'own', 'namespace'),
        ('rara_step_cache', 'own', 'namespace'),
        ('rara_steps', 'own', 'namespace'),
        ('rara_waits', 'own', 'namespace'),
        ('rara_attempts', 'run', 'run_id'),
        ('rara_release_artifacts', 'release', 'release_id'),
        ('rara_checkpoints', 'step', 'step_id'),
        ('rara_events', 'step', 'step_id'),
        ('rara_map_lists', 'step', 'map_id'),
        ('rara_step_artifacts', 'step', 'step_id'),
        ('rara_step_reads', 'step', 'step_id')
    ) AS v(tab, via, col)
    LOOP
        namespace := CASE t.via
            WHEN 'own' THEN 'namespace'
            WHEN 'run' THEN format('(SELECT r.namespace FROM rara_runs r WHERE r.id = %I.%I)',
                                   t.tab, t.col)
            WHEN 'step' THEN format('(SELECT r.namespace FROM rara_steps s JOIN rara_runs r'
                                    ' ON r.id = s.run_id WHERE s.id = %I.%I)', t.tab, t.col)
            WHEN 'release' THEN format('(SELECT r.namespace FROM rara_releases r'
                                       ' WHERE r.id = %I.%I)', t.tab, t.col)
        END;
        EXECUTE format('CREATE POLICY %I ON %I FOR SELECT USING '
                       '((SELECT rara_caller_namespaces()) @> ''{*}'' '
                       'OR %s = ANY ((SELECT rara_caller_namespaces())::text[]))',
                       t.tab || '_read', t.tab, namespace);
    END LOOP;
END $$;

-- A blob is content-addressed and shared, but its existence is a team's: visible when a
-- visible step wrote or read it, or a visible release holds it.
CREATE POLICY rara_artifacts_read ON rara_artifacts FOR SELECT
    USING ((SELECT rara_caller_namespaces()) @> '{*}'
           OR EXISTS (SELECT FROM rara_step_artifacts m WHERE m.digest = rara_artifacts.digest)
           OR EXISTS (SELECT FROM rara_step_reads d WHERE d.digest = rara_artifacts.digest)
           OR EXISTS (SELECT FROM rara_release_artifacts a
                      WHERE a.digest = rara_artifacts.digest));

-- Who may see whom is the fleet's business.
CREATE POLICY rara_namespace_access_read ON rara_namespace_access FOR SELECT
    USING ((SELECT rara_caller_namespaces()) @> '{*}');

-- Workers and operators serve the fleet: they act in every namespace.
INSERT INTO rara_namespace_access (role, namespace)
SELECT r.rolname, '*' FROM pg_roles r
WHERE r.rolname IN ('rara_worker', 'rara_operator');
