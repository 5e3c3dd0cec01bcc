-- rara 0011: a map's children are inserted as slots free (issue 17, items 2 and 6;
-- docs/map-steps.md, "The window").
--
-- Until now a map step inserted all its children at expansion, those past its window
-- (maxParallel) `blocked`, and made them `ready` one by one as slots freed. That second write
-- is not a HOT update (`status` is in rara_steps_ready's predicate): it cost the server
-- ~15-20 us per child, what separated a map's drain from one-step runs'. Now only the window
-- is inserted at expansion; the rest of the list waits here, cut in slices of at most 100
-- elements, and each freed slot inserts the next child `ready` from its slice — one write per
-- child, as for any step. A slice is read whole (a few KB: a list is at most one result,
-- 1 MiB), never the whole list, so refilling costs the same at index 99,000 as at 1,000.
--
-- The children that are not yet rows are counted all the same: the run's steps_total had
-- every child added at expansion (rara_map_expand), and a map that fails or is cancelled
-- counts those it never inserted as cancelled (rara_map_fail, rara_run_cancel).
-- Slices are deleted when their map ends, however it ends; no role reads or writes them
-- (only the SECURITY DEFINER functions of db/functions/maps.sql).

CREATE TABLE rara_map_lists (
    map_id       bigint NOT NULL,
    -- The index (in the map's list) of the slice's first element.
    first_index  integer NOT NULL CHECK (first_index >= 0),
    items        jsonb NOT NULL CHECK (jsonb_typeof(items) = 'array'),
    PRIMARY KEY (map_id, first_index)
);

-- Maps expanded before this migration and still running have their children past map_next as
-- `blocked` rows (never leased: no attempt, event or artifact refers to them). They move into
-- slices of one element each, so that every map follows the one rule of maps.sql.
INSERT INTO rara_map_lists (map_id, first_index, items)
SELECT c.map_parent, c.map_index, jsonb_build_array(c.payload -> 'map' -> 'item')
FROM rara_steps c
WHERE c.map_parent IS NOT NULL AND c.status = 'blocked';
DELETE FROM rara_steps c WHERE c.map_parent IS NOT NULL AND c.status = 'blocked';
