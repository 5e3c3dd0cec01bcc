"""Schedules: a run of a definition at each tick of a cron expression, exactly once per tick
(docs/schedules.md)."""
