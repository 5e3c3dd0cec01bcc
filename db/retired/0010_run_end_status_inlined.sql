-- rara 0010: the parent aggregation's rule (rara_run_end_status) inlined, as 0006 meant it to be
-- (issue 23, item 4; docs/least-privilege.md, "What it costs").
--
-- 0006's body cast its CASE of text literals to rara_run_status: a text-to-enum conversion
-- (enum_in) is only STABLE, so the planner refused to inline the IMMUTABLE function and every
-- run row a step end counted called it twice as a separate SQL function, its body parsed and
-- planned again in every statement that used it (rara_run_count: two calls per run, about
-- 5 us each). Each literal typed on its own is an enum constant: the body is now immutable
-- and inlined (tests/db/test_run_counts.py checks the plan). The rule is unchanged.

CREATE OR REPLACE FUNCTION rara_run_end_status(cancel_requested boolean, total integer,
                                               succeeded integer, failed integer,
                                               cancelled integer)
    RETURNS rara_run_status LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN succeeded + failed + cancelled < total THEN NULL::rara_run_status
                WHEN failed > 0 THEN 'failed'::rara_run_status
                WHEN cancel_requested OR cancelled > 0 THEN 'cancelled'::rara_run_status
                ELSE 'succeeded'::rara_run_status END
$$;
