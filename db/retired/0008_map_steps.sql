-- rara 0008: map steps (issue 17, item 1; docs/map-steps.md).
--
-- A map step expands, once its upstream succeeded, into one child step per element of a list
-- taken from an upstream result or from the run input. The map step's own row is a join: it is
-- never leased; it waits `blocked` while its children run and ends `succeeded` when they all
-- succeeded, or `failed` when one of them failed for good (then its unfinished children and
-- its downstream are cancelled). A child is an ordinary step row — its own lease, attempts,
-- retries, progress, checkpoints and artifacts — keyed `<map key>[<index>]`, whose input
-- carries its element (`item`) and index. The functions that do this are db/functions/maps.sql.

ALTER TABLE rara_steps
    -- The map step's list: its source ('$input', or the key of an upstream step whose result
    -- holds it) then the JSON path inside it. NULL: not a map step.
    ADD COLUMN map_over text[],
    -- At most this many children ready or running at once (NULL: no limit).
    ADD COLUMN map_max_parallel integer CHECK (map_max_parallel >= 1),
    -- A map over the run input: that input without the list, which is what every child
    -- starts from (each child is given its element; none needs the whole list, which would
    -- make every lease of a child cost the size of the map).
    ADD COLUMN map_input jsonb,
    -- The map step's counts: its children, the next index to make ready (those at and after
    -- it wait `blocked` for a slot under map_max_parallel), and how many ended each way.
    ADD COLUMN map_total integer,
    ADD COLUMN map_next integer,
    ADD COLUMN map_succeeded integer NOT NULL DEFAULT 0,
    ADD COLUMN map_failed integer NOT NULL DEFAULT 0,
    -- A child: its map step and its index in the list.
    ADD COLUMN map_parent bigint,
    ADD COLUMN map_index integer,
    ADD CONSTRAINT rara_steps_map_child CHECK ((map_parent IS NULL) = (map_index IS NULL)),
    ADD CONSTRAINT rara_steps_map_counts CHECK (
        map_total IS NULL OR map_succeeded + map_failed <= map_total);

-- A child by its map step and index: the next children to make ready, a map's children in
-- index order for its downstream, and the count of its running children for `runs watch`.
CREATE INDEX rara_steps_map_children ON rara_steps (map_parent, map_index)
    WHERE map_parent IS NOT NULL;

-- A map step ends without running: blocked -> succeeded | failed, for map steps only (every
-- other step's moves are unchanged; rara.states holds the same rule).
CREATE OR REPLACE FUNCTION rara_check_step_transition() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT (rara_step_transition_allowed(OLD.status, NEW.status)
            OR (NEW.map_over IS NOT NULL AND OLD.status = 'blocked'
                AND NEW.status IN ('succeeded', 'failed'))) THEN
        RAISE EXCEPTION 'illegal step transition % -> % (step %)', OLD.status, NEW.status, OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'rara_step_transition';
    END IF;
    RETURN NEW;
END $$;
