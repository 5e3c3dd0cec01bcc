-- rara 0009: concurrency limits per capability (issue 17, item 3; docs/limits.md).
--
-- A capability may run at most max_running attempts at once across the whole fleet, however
-- many workers serve it — a GPU pool that may run 2 adaptations at once, an API a step calls
-- that takes 4 clients. The lease enforces it (rara_step_lease: the limit's row locked, the
-- running attempts counted, no more leased than the free slots), and the operator scales a
-- pool by the backlog the limit lets run (step_backlog), so the two agree. Set with
-- `rara limits set CAPABILITY N` (rara_capability_limit_set); 0 pauses a capability.

CREATE TABLE rara_capability_limits (
    capability   text PRIMARY KEY CHECK (capability ~ '^[a-z0-9][a-z0-9._-]*@[0-9]+$'),
    max_running  integer NOT NULL CHECK (max_running >= 0),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
