-- rara 0014: schedules that fire exactly once per tick (issue 33, item 3; docs/schedules.md).
--
-- A schedule starts a run of a definition at each tick of a cron expression in a time zone.
-- Any number of processes fire schedules (rara.schedules.firing): each takes the due rows with
-- FOR UPDATE SKIP LOCKED, starts the run of each due tick under the idempotency key
-- `schedule:<name>:<tick>` and records the tick here, all in one transaction. A process killed
-- before its commit leaves nothing, and the next one decides the same ticks again; one killed
-- after it left the tick decided. So a tick makes one run, whoever fires it and whoever dies.
--
-- Independent of 0013 (it touches no table 0013 adds or changes). Needs no owner rights
-- beyond creating tables; the roles read them through db/functions/reads.sql and write them
-- only through db/functions/schedules.sql.

CREATE TABLE rara_schedules (
    name                 text PRIMARY KEY
                         CHECK (name ~ '^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$'),
    definition           text NOT NULL,
    version              integer CHECK (version >= 1),  -- NULL: the latest at each tick
    cron                 text NOT NULL,
    time_zone            text NOT NULL,
    input                jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(input) = 'object'),
    concurrency_policy   text NOT NULL
                         CHECK (concurrency_policy IN ('Allow', 'Forbid', 'Replace')),
    starting_deadline_seconds integer NOT NULL CHECK (starting_deadline_seconds >= 1),
    suspended            boolean NOT NULL DEFAULT false,
    successful_runs_kept integer NOT NULL CHECK (successful_runs_kept >= 0),
    failed_runs_kept     integer NOT NULL CHECK (failed_runs_kept >= 0),
    -- The document's spec as applied (what `rara schedules show` prints).
    spec                 jsonb NOT NULL,
    -- The earliest tick not yet decided. Firing processes sleep until the smallest one.
    next_tick            timestamptz NOT NULL,
    last_tick            timestamptz,
    last_run_id          bigint,
    -- Ticks older than the starting deadline when a firing process got to them: counted,
    -- never fired.
    missed_ticks         bigint NOT NULL DEFAULT 0,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now()
);

-- The one read of the firing loop: the due rows, and the time of the next.
CREATE INDEX rara_schedules_due ON rara_schedules (next_tick) WHERE NOT suspended;

-- Each decided tick: the run it started, or why none (skipped by Forbid, or refused). The
-- history limits trim the rows of ended runs; the runs themselves stay until `rara runs
-- prune`. A manual trigger is a row of its own (outcome `triggered`, tick = when).
CREATE TABLE rara_schedule_ticks (
    schedule    text NOT NULL REFERENCES rara_schedules (name) ON DELETE CASCADE,
    tick        timestamptz NOT NULL,
    outcome     text NOT NULL
                CHECK (outcome IN ('started', 'skipped', 'refused', 'triggered', 'backfilled')),
    run_id      bigint,
    reason      text,
    decided_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schedule, tick)
);
CREATE INDEX rara_schedule_ticks_run ON rara_schedule_ticks (run_id) WHERE run_id IS NOT NULL;
