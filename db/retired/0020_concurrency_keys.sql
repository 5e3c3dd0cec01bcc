-- rara 0020: concurrency limits by key (issue 34, item 4; docs/limits.md, "Per key").
--
-- A step may say `concurrency: {key: input.customer, max: 2}`: at most 2 of its attempts run at
-- once per value of the run input's `customer`, in its namespace — an API that takes two
-- clients per customer, a tenant's database that takes two loads. Steps that name the same
-- `group` share the limit per value. Each step row carries its key (namespace/group=value,
-- computed when the run starts) and its max; the lease admits no more per key than max minus
-- the attempts of that key running (rara_step_lease), with the same lock-then-count as the
-- capability limits, per key.

ALTER TABLE rara_steps
    ADD COLUMN concurrency_key text,
    ADD COLUMN concurrency_max integer CHECK (concurrency_max BETWEEN 1 AND 10000),
    ADD CONSTRAINT rara_steps_concurrency_both
        CHECK ((concurrency_key IS NULL) = (concurrency_max IS NULL));

-- The running attempts of each key: what the lease counts. Only keyed steps have entries,
-- and only while running (the predicate of rara_steps_running_expiry, which no fenced write
-- implies: migration 0004).
CREATE INDEX rara_steps_running_by_key ON rara_steps (concurrency_key)
    WHERE lease_expires_at IS NOT NULL AND concurrency_key IS NOT NULL;
