-- rara 0030: typed rows for the stages of the lease and of an end (docs/lease-protocol.md,
-- "The lease's stages"), and the reaper's turn (docs/lease-protocol.md, "Reaper").
--
-- rara_step_lease was one scope of parallel arrays (a capability's limit and its free slots, a
-- quota's key and its free slots, a drawn lane's capability, executor, namespace, count and
-- weight, a candidate's id, namespace, capability, key and key max...), each array indexed in
-- step with the others. It is now a coordinator calling one function per stage
-- (db/functions/lease_stages.sql), and what the stages hand each other is one array of rows
-- of these types. Types only: no table, no data; the stages are defined in their file, and
-- rara_lease_room, whose arguments were the parallel arrays, takes the bounds instead (its
-- old signature is dropped here). Needs no owner.

-- What may still run: a capability's limit (namespace NULL) or a namespace's quota on one
-- capability or on all of them (capability '*'), and how many more steps it lets run now.
CREATE TYPE rara_lease_bound AS (namespace text, capability text, free integer);

-- A lane the lease probes: a (capability, executor kind) pair in one namespace, the slots it
-- was drawn for and its namespace's weight.
CREATE TYPE rara_lease_lane AS (capability text, executor text, namespace text, drawn integer,
                                weight integer);

-- A worker's cursor in a lane: the lease key (-priority, available_at, id) of the last step it
-- leased there; the lane's scan starts after it.
CREATE TYPE rara_lease_cursor AS (capability text, executor text, namespace text, rank integer,
                                  at timestamptz, id bigint);

-- A ready step a probe found (and locked), with what the admission stages judge it by.
CREATE TYPE rara_lease_candidate AS (id bigint, capability text, executor text, namespace text,
                                     concurrency_key text, concurrency_max integer);

-- A success whose fence matched in an end: what the end's optional parts write from.
CREATE TYPE rara_step_ended AS (id bigint, attempt integer, run_id bigint, key text,
                                capability text);

DROP FUNCTION IF EXISTS rara_lease_room(text[], integer[], text[], integer[], text, text);

-- The reaper's turn: when a worker last took it, and which. Every worker calls the reaper
-- (rara_step_reap_expired) every few seconds; the database hands the turn to one caller a
-- second fleet-wide (rara_reap_turn), and the others return at once, without scanning for
-- expired leases. One row, written only by those functions; no role may read or write it.
CREATE TABLE rara_reaper_turn (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    taken_at timestamptz NOT NULL DEFAULT '-infinity',
    taken_by text
);
INSERT INTO rara_reaper_turn DEFAULT VALUES;
