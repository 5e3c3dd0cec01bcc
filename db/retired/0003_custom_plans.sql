-- rara 0003: always plan rara's statements for their actual parameters.
--
-- psycopg prepares a statement after a few executions, and PostgreSQL may then switch to a
-- generic plan. For rara's batched statements (unnest of array parameters joined to
-- rara_steps) the generic plan guesses the arrays' size and picks joins that were measured
-- 8x slower (progress write of 100 attempts: 5.8 ms custom, 49.6 ms generic). Custom plans
-- keep the parse saved by preparing and plan each execution for its real arrays.
-- Per database (needs its owner); skipped with a notice otherwise.
-- (0004 resets plan_cache_mode and turns JIT off instead: the time was JIT compilation.)
DO $$
BEGIN
    EXECUTE format('ALTER DATABASE %I SET plan_cache_mode = force_custom_plan', current_database());
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'rara: cannot set plan_cache_mode on %; set it for rara''s role instead',
        current_database();
END $$;
