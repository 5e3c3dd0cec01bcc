-- rara 0031: the database's return, computed once per server life instead of at every
-- heartbeat and reaper call (rara_db_return; docs/lease-protocol.md, "Outages").
--
-- rara_db_return read the wal writer's start from pg_stat_activity, and the first read of it in
-- a transaction copies the status of every backend of the server: ~300 µs with 150 backends,
-- in every heartbeat and every reaper call of every worker, so a fleet's cost of it grew with
-- workers times connections. The answer changes only when the server starts, restarts after a
-- crash or is promoted; it is kept here with what identifies that life of the server, and
-- computed again when they differ. One row, written only by rara_db_return (as the functions'
-- owner: a login that could write it could keep expired leases alive); read by rara_reader, as
-- every table.
CREATE TABLE rara_db_life (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    postmaster_start timestamptz NOT NULL,  -- pg_postmaster_start_time(): a start or a restart
    wal_stats_reset timestamptz,            -- pg_stat_wal's stats_reset: set anew after a crash
    db_return timestamptz NOT NULL          -- what rara_db_return answers for that life
);
