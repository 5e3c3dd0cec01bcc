"""Status stamps (rara.operator.conditions): what WorkflowRun and WorkflowSchedule statuses
show, whatever time zone the database session hands timestamps back in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from rara.operator.conditions import rfc3339


def test_a_stamp_is_utc_whatever_the_zone_it_came_in() -> None:
    berlin_summer = timezone(timedelta(hours=2))
    assert rfc3339(datetime(2026, 7, 1, 4, 0, 5, 999, tzinfo=berlin_summer)) == (
        "2026-07-01T02:00:05Z"
    )
    assert rfc3339(datetime(2026, 7, 1, 2, 0, 5, tzinfo=UTC)) == "2026-07-01T02:00:05Z"
    assert rfc3339(None) is None
