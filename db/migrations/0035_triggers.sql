-- rara 0035: triggers, which start a run of a definition when something happens (docs/triggers.md).
--
-- A trigger is applied, paused and deleted through db/functions/triggers.sql by the roles that
-- manage workflows (rara_client, rara_operator), like a schedule. Its kind says what starts a
-- run (a signed webhook delivery); `config` holds the kind's part of the spec as applied. Each
-- event a trigger accepted is a row of rara_trigger_events under the event's own key (a
-- webhook's delivery id): the row and the run start in one transaction, and the run's
-- idempotency key is built from the same key, so an event delivered again finds its run and
-- starts nothing. Read under the namespace policies. Needs no owner.
CREATE TABLE rara_triggers (
    namespace text NOT NULL,
    name text NOT NULL CHECK (name ~ '^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$'),
    kind text NOT NULL CHECK (kind IN ('webhook')),
    definition text NOT NULL,
    version integer CHECK (version >= 1),  -- NULL: the latest version at each event
    input jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(input) = 'object'),
    config jsonb NOT NULL CHECK (jsonb_typeof(config) = 'object'),
    suspended boolean NOT NULL DEFAULT false,
    spec jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, name)
);

-- One row per distinct event a trigger was given: the run it started, or why none. `seen`
-- counts the deliveries of that event (a sender's retries, a second watcher).
CREATE TABLE rara_trigger_events (
    namespace text NOT NULL,
    trigger text NOT NULL,
    event_key text NOT NULL CHECK (length(event_key) BETWEEN 1 AND 200),
    outcome text NOT NULL CHECK (outcome IN ('started', 'refused')),
    run_id bigint REFERENCES rara_runs (id) ON DELETE SET NULL,
    reason text CHECK (length(reason) <= 2000),
    seen integer NOT NULL DEFAULT 1 CHECK (seen >= 1),
    first_at timestamptz NOT NULL DEFAULT now(),
    last_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, trigger, event_key),
    FOREIGN KEY (namespace, trigger) REFERENCES rara_triggers (namespace, name) ON DELETE CASCADE,
    CONSTRAINT rara_trigger_events_outcome_reason
        CHECK ((outcome = 'refused') = (reason IS NOT NULL))
);
CREATE INDEX rara_trigger_events_recent ON rara_trigger_events (namespace, trigger, last_at);
CREATE INDEX rara_trigger_events_run ON rara_trigger_events (run_id) WHERE run_id IS NOT NULL;

CREATE POLICY rara_triggers_read ON rara_triggers FOR SELECT
    USING ((SELECT rara_caller_namespaces()) @> '{*}'
           OR namespace = ANY ((SELECT rara_caller_namespaces())::text[]));
CREATE POLICY rara_trigger_events_read ON rara_trigger_events FOR SELECT
    USING ((SELECT rara_caller_namespaces()) @> '{*}'
           OR namespace = ANY ((SELECT rara_caller_namespaces())::text[]));

-- Isolation on already (an upgrade): the new tables too, as rara_namespace_isolation would.
DO $$
BEGIN
    IF (SELECT c.relrowsecurity FROM pg_class c WHERE c.oid = 'rara_runs'::regclass) THEN
        ALTER TABLE rara_triggers ENABLE ROW LEVEL SECURITY;
        ALTER TABLE rara_trigger_events ENABLE ROW LEVEL SECURITY;
    END IF;
END $$;
