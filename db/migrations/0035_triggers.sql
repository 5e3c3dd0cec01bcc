-- rara 0035: triggers, which start a run of a definition when something happens (docs/triggers.md).
--
-- A trigger is applied, paused and deleted through db/functions/triggers.sql by the roles that
-- manage workflows (rara_client, rara_operator), like a schedule. Its kind says what starts a
-- run (a signed webhook delivery, a change of objects, a promoted release, a run's end, a
-- definition gone stale);
-- `config` holds the kind's part of the
-- spec as applied. Each
-- event a trigger accepted is a row of rara_trigger_events under the event's own key (a
-- webhook's delivery id): the row and the run start in one transaction, and the run's
-- idempotency key is built from the same key, so an event delivered again finds its run and
-- starts nothing. Read under the namespace policies. Needs no owner.
CREATE TABLE rara_triggers (
    namespace text NOT NULL,
    name text NOT NULL CHECK (name ~ '^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$'),
    kind text NOT NULL CHECK (kind IN ('webhook', 'objects', 'release', 'run', 'stale')),
    definition text NOT NULL,
    version integer CHECK (version >= 1),  -- NULL: the latest version at each event
    input jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(input) = 'object'),
    config jsonb NOT NULL CHECK (jsonb_typeof(config) = 'object'),
    suspended boolean NOT NULL DEFAULT false,
    spec jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    -- Watched triggers (every kind but webhook): when the next watching pass is due (NULL for
    -- webhooks); for objects, the passes that found a change (each one's number is its
    -- event's key, so the same change made twice, v1 → v2 → v1 → v2, is two events), and the
    -- last pass that could not watch.
    next_poll timestamptz,
    passes bigint NOT NULL DEFAULT 0 CHECK (passes >= 0),
    watch_error text CHECK (length(watch_error) <= 2000),
    watch_error_at timestamptz,
    PRIMARY KEY (namespace, name),
    CONSTRAINT rara_triggers_watched CHECK ((kind <> 'webhook') = (next_poll IS NOT NULL))
);
CREATE INDEX rara_triggers_due ON rara_triggers (next_poll) WHERE NOT suspended;

-- What an objects trigger last saw of each object under its folder or prefix: the digest of
-- its bytes, and a fingerprint the store gives without reading them (size and mtime, size
-- and ETag) that says when they must be read again. A watching pass holds the trigger's row
-- (rara_trigger_watch_claim, FOR UPDATE SKIP LOCKED): two watchers never judge one trigger
-- at once, and the later one compares with what the earlier one recorded.
CREATE TABLE rara_trigger_objects (
    namespace text NOT NULL,
    trigger text NOT NULL,
    key text NOT NULL CHECK (length(key) BETWEEN 1 AND 1024),
    digest text NOT NULL CHECK (digest ~ '^sha256:[0-9a-f]{64}$'),
    size bigint NOT NULL CHECK (size >= 0),
    fingerprint text NOT NULL CHECK (length(fingerprint) <= 200),
    changed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, trigger, key),
    FOREIGN KEY (namespace, trigger) REFERENCES rara_triggers (namespace, name) ON DELETE CASCADE
);

-- One row per distinct event a trigger was given: the run it started, or why none. `seen`
-- counts the deliveries of that event (a sender's retries, a second watcher).
CREATE TABLE rara_trigger_events (
    namespace text NOT NULL,
    trigger text NOT NULL,
    event_key text NOT NULL CHECK (length(event_key) BETWEEN 1 AND 200),
    outcome text NOT NULL CHECK (outcome IN ('started', 'refused', 'batched')),
    run_id bigint REFERENCES rara_runs (id) ON DELETE SET NULL,
    -- A debounced webhook's event: the batch it joined (outcome 'batched' until the batch's
    -- run starts, then the batch's outcome).
    batch_id bigint,
    reason text CHECK (length(reason) <= 2000),
    seen integer NOT NULL DEFAULT 1 CHECK (seen >= 1),
    first_at timestamptz NOT NULL DEFAULT now(),
    last_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, trigger, event_key),
    FOREIGN KEY (namespace, trigger) REFERENCES rara_triggers (namespace, name) ON DELETE CASCADE,
    CONSTRAINT rara_trigger_events_outcome_reason
        CHECK ((outcome = 'refused') = (reason IS NOT NULL))
);
-- A debounced webhook trigger's open burst of events for one key: due to start its one run
-- `windowSeconds` after its last event, and at most `maxDelaySeconds` after its first, so a
-- steady stream still runs. `inputs` holds each event's input, in arrival order; the run gets
-- them all. Closed (run_id or refusal set) by the watcher's pass that starts the run.
CREATE TABLE rara_trigger_batches (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    namespace text NOT NULL,
    trigger text NOT NULL,
    batch_key text NOT NULL CHECK (length(batch_key) <= 200),
    inputs jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(inputs) = 'array'),
    opened_at timestamptz NOT NULL DEFAULT now(),
    last_at timestamptz NOT NULL DEFAULT now(),
    due_at timestamptz NOT NULL,
    closed_at timestamptz,
    run_id bigint REFERENCES rara_runs (id) ON DELETE SET NULL,
    reason text CHECK (length(reason) <= 2000),
    FOREIGN KEY (namespace, trigger) REFERENCES rara_triggers (namespace, name) ON DELETE CASCADE
);
-- One open burst per trigger and key; the watcher finds the due ones by due_at.
CREATE UNIQUE INDEX rara_trigger_batches_open ON rara_trigger_batches (namespace, trigger, batch_key)
    WHERE closed_at IS NULL;
CREATE INDEX rara_trigger_batches_due ON rara_trigger_batches (due_at) WHERE closed_at IS NULL;
ALTER TABLE rara_trigger_events ADD FOREIGN KEY (batch_id)
    REFERENCES rara_trigger_batches (id) ON DELETE CASCADE;

CREATE INDEX rara_trigger_events_recent ON rara_trigger_events (namespace, trigger, last_at);
CREATE INDEX rara_trigger_events_run ON rara_trigger_events (run_id) WHERE run_id IS NOT NULL;

CREATE POLICY rara_triggers_read ON rara_triggers FOR SELECT
    USING ((SELECT rara_caller_namespaces()) @> '{*}'
           OR namespace = ANY ((SELECT rara_caller_namespaces())::text[]));
CREATE POLICY rara_trigger_events_read ON rara_trigger_events FOR SELECT
    USING ((SELECT rara_caller_namespaces()) @> '{*}'
           OR namespace = ANY ((SELECT rara_caller_namespaces())::text[]));
CREATE POLICY rara_trigger_batches_read ON rara_trigger_batches FOR SELECT
    USING ((SELECT rara_caller_namespaces()) @> '{*}'
           OR namespace = ANY ((SELECT rara_caller_namespaces())::text[]));
CREATE POLICY rara_trigger_objects_read ON rara_trigger_objects FOR SELECT
    USING ((SELECT rara_caller_namespaces()) @> '{*}'
           OR namespace = ANY ((SELECT rara_caller_namespaces())::text[]));

-- Isolation on already (an upgrade): the new tables too, as rara_namespace_isolation would.
DO $$
BEGIN
    IF (SELECT c.relrowsecurity FROM pg_class c WHERE c.oid = 'rara_runs'::regclass) THEN
        ALTER TABLE rara_triggers ENABLE ROW LEVEL SECURITY;
        ALTER TABLE rara_trigger_events ENABLE ROW LEVEL SECURITY;
        ALTER TABLE rara_trigger_objects ENABLE ROW LEVEL SECURITY;
        ALTER TABLE rara_trigger_batches ENABLE ROW LEVEL SECURITY;
    END IF;
END $$;
