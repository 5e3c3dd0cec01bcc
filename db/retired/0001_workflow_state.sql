-- rara 0001: the durable state of workflows.
--
-- PostgreSQL owns all control state. The state machines below are mirrored in
-- rara/states.py (one table in code); the triggers here refuse any transition the table does
-- not allow, so a bug in a client cannot corrupt a run. tests/db/test_state_machines.py tries
-- every (from, to) pair against both.
--
-- 0004 drops or replaces some of what this file makes; each such object says so where it is
-- made, "(0004: …)". db/schema.sql shows the schema all migrations leave.

CREATE TYPE rara_run_status AS ENUM (
    'pending',    -- created, no step leased yet
    'running',    -- at least one step leased at some point, not all steps terminal
    'succeeded',  -- every step succeeded
    'failed',     -- a step failed for good; its dependants were cancelled
    'cancelled'   -- cancel was asked and every step is terminal
);

CREATE TYPE rara_step_status AS ENUM (
    'blocked',    -- waiting for dependencies
    'ready',      -- may be leased once available_at <= now()
    'running',    -- leased: leased_by/lease_token/lease_expires_at are set
    'succeeded',
    'failed',
    'cancelled'
);

CREATE TYPE rara_attempt_outcome AS ENUM (
    'running',        -- the attempt holds (or held, until the reaper notices) the lease
    'succeeded',
    'failed',         -- handler error; retried or final depending on the step
    'timed_out',      -- per-attempt timeout or heartbeat timeout
    'lease_expired',  -- owner vanished (SIGKILL, eviction, partition); the reaper recovered it
    'released',       -- graceful shutdown gave the lease back; not counted as a failure
    'cancelled'
);

-- A definition name; retiring it keeps every version (runs pin versions).
CREATE TABLE rara_definitions (
    name        text PRIMARY KEY,
    created_at  timestamptz NOT NULL DEFAULT now(),
    retired_at  timestamptz
);

-- Immutable versions: the trigger below refuses UPDATE and DELETE.
CREATE TABLE rara_definition_versions (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text NOT NULL REFERENCES rara_definitions (name),
    version     integer NOT NULL CHECK (version >= 1),
    digest      text NOT NULL CHECK (digest ~ '^sha256:[0-9a-f]{64}$'),
    spec        jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT rara_definition_versions_name_version_key UNIQUE (name, version),
    CONSTRAINT rara_definition_versions_name_digest_key UNIQUE (name, digest)
);

CREATE FUNCTION rara_refuse_version_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'definition versions are immutable (% refused on %@%)',
        TG_OP, OLD.name, OLD.version
        USING ERRCODE = 'integrity_constraint_violation';
END $$;

CREATE TRIGGER rara_definition_versions_immutable
    BEFORE UPDATE OR DELETE ON rara_definition_versions
    FOR EACH ROW EXECUTE FUNCTION rara_refuse_version_change();
CREATE TRIGGER rara_definition_versions_no_truncate
    BEFORE TRUNCATE ON rara_definition_versions
    FOR EACH STATEMENT EXECUTE FUNCTION rara_refuse_version_change();

CREATE TABLE rara_runs (
    id                     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- (0004: drops this foreign key; a version can never go away.)
    definition_version_id  bigint NOT NULL REFERENCES rara_definition_versions (id),
    input                  jsonb NOT NULL DEFAULT '{}',
    status                 rara_run_status NOT NULL DEFAULT 'pending',
    idempotency_key        text,
    cancel_requested       boolean NOT NULL DEFAULT false,
    error                  jsonb,
    created_at             timestamptz NOT NULL DEFAULT now(),
    started_at             timestamptz,
    finished_at            timestamptz,
    CONSTRAINT rara_runs_idempotency_key_key UNIQUE (idempotency_key),
    CONSTRAINT rara_runs_finished_iff_terminal
        CHECK ((status IN ('succeeded', 'failed', 'cancelled')) = (finished_at IS NOT NULL)),
    CONSTRAINT rara_runs_started_unless_pending
        CHECK ((status = 'pending') = (started_at IS NULL) OR status = 'cancelled')
);
-- Runs not yet ended. (0004: dropped; its status predicate kept run updates from being HOT.)
CREATE INDEX rara_runs_active ON rara_runs (id) WHERE status IN ('pending', 'running');

-- Steps are the hot table: fillfactor leaves room on each page so the lease/heartbeat/complete
-- updates stay HOT (no index churn on columns that are not indexed).
CREATE TABLE rara_steps (
    id                    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id                bigint NOT NULL REFERENCES rara_runs (id) ON DELETE CASCADE,
    key                   text NOT NULL,
    depends_on            text[] NOT NULL DEFAULT '{}',
    pending_deps          integer NOT NULL DEFAULT 0 CHECK (pending_deps >= 0),
    capability            text NOT NULL CHECK (capability ~ '^[a-z0-9][a-z0-9._-]*@[0-9]+$'),
    executor              text NOT NULL CHECK (executor IN ('inprocess', 'grpc')),
    priority              integer NOT NULL DEFAULT 0,  -- (0004: bounded to -1000..1000)
    payload               jsonb NOT NULL DEFAULT '{}',
    max_attempts          integer NOT NULL CHECK (max_attempts >= 1),
    retry_initial_ms      integer NOT NULL CHECK (retry_initial_ms >= 0),
    retry_max_ms          integer NOT NULL CHECK (retry_max_ms >= 0),
    retry_coefficient     double precision NOT NULL CHECK (retry_coefficient >= 1),
    timeout_ms            integer CHECK (timeout_ms > 0),
    heartbeat_timeout_ms  integer CHECK (heartbeat_timeout_ms > 0),
    status                rara_step_status NOT NULL,
    attempt               integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),  -- leases taken
    releases              integer NOT NULL DEFAULT 0 CHECK (releases >= 0),  -- given back on shutdown
    available_at          timestamptz NOT NULL DEFAULT now(),
    leased_by             text,
    lease_token           uuid,
    lease_expires_at      timestamptz,
    heartbeat_at          timestamptz,
    cancel_requested      boolean NOT NULL DEFAULT false,
    result                jsonb,
    error                 jsonb,
    started_at            timestamptz,
    finished_at           timestamptz,
    CONSTRAINT rara_steps_run_key_key UNIQUE (run_id, key),
    -- the lease columns are set exactly while running
    CONSTRAINT rara_steps_lease_iff_running CHECK (
        (status = 'running') = (leased_by IS NOT NULL AND lease_token IS NOT NULL
                                AND lease_expires_at IS NOT NULL)),
    CONSTRAINT rara_steps_finished_iff_terminal CHECK (
        (status IN ('succeeded', 'failed', 'cancelled')) = (finished_at IS NOT NULL)),
    CONSTRAINT rara_steps_result_only_if_succeeded CHECK (result IS NULL OR status = 'succeeded'),
    -- a released attempt (graceful shutdown) does not use up the retry budget
    CONSTRAINT rara_steps_attempts_bounded CHECK (attempt - releases <= max_attempts)
) WITH (fillfactor = 70);

-- The lease: one index range per capability, already in lease order, only ready rows, so the
-- lease stays an index scan however deep the queue (a million ready steps).
-- (0004: rebuilt on (capability, -priority, available_at, id), so a lease cursor can start
-- its range.)
CREATE INDEX rara_steps_ready ON rara_steps (capability, priority DESC, available_at, id)
    WHERE status = 'ready';
-- The reaper: running rows by expiry. (0004: rebuilt with the predicate
-- `lease_expires_at IS NOT NULL`, which no fenced write implies.)
CREATE INDEX rara_steps_running_expiry ON rara_steps (lease_expires_at) WHERE status = 'running';
-- Cancel and aggregation by run. (0004: dropped; the (run_id, key) unique index serves both.)
CREATE INDEX rara_steps_run ON rara_steps (run_id);

-- Attempt history: one row per lease taken. The ownership checker (tests/history.py) reads it.
CREATE TABLE rara_attempts (
    -- (0004: drops this foreign key; a trigger deletes the attempts of deleted steps.)
    step_id      bigint NOT NULL REFERENCES rara_steps (id) ON DELETE CASCADE,
    attempt      integer NOT NULL CHECK (attempt >= 1),
    run_id       bigint NOT NULL,
    worker       text NOT NULL,
    lease_token  uuid NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    ended_at     timestamptz,
    ended_by     text,      -- who closed it: the owner, or 'reaper:<worker>', or 'cancel'
    outcome      rara_attempt_outcome NOT NULL DEFAULT 'running',
    error        jsonb,
    PRIMARY KEY (step_id, attempt),
    CONSTRAINT rara_attempts_ended_iff_closed CHECK ((outcome = 'running') = (ended_at IS NULL))
) WITH (fillfactor = 80);

-- Progress events: per (step, attempt) a strictly increasing seq; a replayed seq is one row.
CREATE TABLE rara_events (
    step_id     bigint NOT NULL REFERENCES rara_steps (id) ON DELETE CASCADE,
    attempt     integer NOT NULL,
    seq         integer NOT NULL CHECK (seq >= 1),
    kind        text NOT NULL CHECK (kind IN ('progress', 'checkpoint', 'log')),
    fraction    double precision CHECK (fraction BETWEEN 0 AND 1),
    message     text NOT NULL DEFAULT '',
    metrics     jsonb NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (step_id, attempt, seq)
);

-- Content-addressed blobs known to the database (the bytes live in the artifact store).
CREATE TABLE rara_artifacts (
    digest      text PRIMARY KEY CHECK (digest ~ '^sha256:[0-9a-f]{64}$'),
    size        bigint NOT NULL CHECK (size >= 0),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- The manifest: what an attempt produced, written in the same transaction as its result.
CREATE TABLE rara_step_artifacts (
    step_id     bigint NOT NULL REFERENCES rara_steps (id) ON DELETE CASCADE,
    attempt     integer NOT NULL,
    name        text NOT NULL CHECK (name ~ '^[A-Za-z0-9._/-]{1,200}$'),
    digest      text NOT NULL REFERENCES rara_artifacts (digest),
    size        bigint NOT NULL,
    media_type  text NOT NULL,
    PRIMARY KEY (step_id, attempt, name)
);

-- Checkpoints: small JSON state plus an optional blob; the next attempt resumes from the latest.
CREATE TABLE rara_checkpoints (
    step_id     bigint NOT NULL REFERENCES rara_steps (id) ON DELETE CASCADE,
    attempt     integer NOT NULL,
    seq         integer NOT NULL,
    state       jsonb NOT NULL,
    digest      text REFERENCES rara_artifacts (digest),
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (step_id, attempt, seq)
);

-- Live workers and what they serve (routing refuses runs nobody can execute).
CREATE TABLE rara_workers (
    id            text PRIMARY KEY,
    capabilities  text[] NOT NULL,
    started_at    timestamptz NOT NULL DEFAULT now(),
    heartbeat_at  timestamptz NOT NULL DEFAULT now(),
    stopped_at    timestamptz
);

-- ---------------------------------------------------------------------------------------------
-- State machines, enforced by the database. Mirror of rara/states.py.
CREATE FUNCTION rara_step_transition_allowed(old rara_step_status, new rara_step_status)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT (old, new) IN (
        ('blocked', 'ready'), ('blocked', 'cancelled'),
        ('ready', 'running'), ('ready', 'cancelled'),
        ('running', 'succeeded'), ('running', 'failed'), ('running', 'cancelled'),
        ('running', 'ready')
    )
$$;

CREATE FUNCTION rara_run_transition_allowed(old rara_run_status, new rara_run_status)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT (old, new) IN (
        ('pending', 'running'), ('pending', 'cancelled'),
        ('running', 'succeeded'), ('running', 'failed'), ('running', 'cancelled')
    )
$$;

CREATE FUNCTION rara_check_step_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT rara_step_transition_allowed(OLD.status, NEW.status) THEN
        RAISE EXCEPTION 'illegal step transition % -> % (step %)', OLD.status, NEW.status, OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'rara_step_transition';
    END IF;
    RETURN NEW;
END $$;

CREATE FUNCTION rara_check_run_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT rara_run_transition_allowed(OLD.status, NEW.status) THEN
        RAISE EXCEPTION 'illegal run transition % -> % (run %)', OLD.status, NEW.status, OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'rara_run_transition';
    END IF;
    RETURN NEW;
END $$;

-- WHEN keeps the trigger off the hot path for updates that do not change status (heartbeats).
CREATE TRIGGER rara_steps_transition BEFORE UPDATE OF status ON rara_steps
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION rara_check_step_transition();
CREATE TRIGGER rara_runs_transition BEFORE UPDATE OF status ON rara_runs
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION rara_check_run_transition();

-- Wake idle workers: a step became ready (NOTIFY is a hint; workers also poll). Identical
-- payloads in one transaction are folded into one notification by PostgreSQL.
CREATE FUNCTION rara_notify_ready() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('rara_ready', NEW.capability);
    RETURN NULL;
END $$;

CREATE TRIGGER rara_steps_notify_ready_insert AFTER INSERT ON rara_steps
    FOR EACH ROW WHEN (NEW.status = 'ready') EXECUTE FUNCTION rara_notify_ready();
CREATE TRIGGER rara_steps_notify_ready_update AFTER UPDATE OF status ON rara_steps
    FOR EACH ROW WHEN (NEW.status = 'ready' AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION rara_notify_ready();

-- Retry backoff, the one formula: min(initial * coefficient^(attempt-1), max), jittered down by
-- up to `jitter` (0..1) so a burst of failures does not retry in lockstep.
CREATE FUNCTION rara_retry_delay(initial_ms integer, max_ms integer, coefficient double precision,
                                 attempt integer, jitter double precision)
RETURNS interval LANGUAGE sql VOLATILE AS $$
    SELECT make_interval(secs => least(initial_ms * power(coefficient, greatest(attempt - 1, 0)),
                                       max_ms)::double precision
                                 * (1 - jitter * random()) / 1000.0)
$$;

-- Tell watchers (clients waiting on a run, `rara runs watch`) that a run changed status.
-- (0004: rebuilds the trigger to fire for ends only: succeeded, failed, cancelled.)
CREATE FUNCTION rara_notify_run() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('rara_run', NEW.id::text || ':' || NEW.status::text);
    RETURN NULL;
END $$;

CREATE TRIGGER rara_runs_notify AFTER UPDATE OF status ON rara_runs
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION rara_notify_run();
