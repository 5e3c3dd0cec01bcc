"""Tick arithmetic in a real time zone: daylight saving's gap and repeat (Europe/Berlin, 2026:
clocks go 02:00 -> 03:00 on 29 March and 03:00 -> 02:00 on 25 October), the starting
deadline, and the bound on one pass."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from rara.schedules import ticks

BERLIN = ZoneInfo("Europe/Berlin")


def _utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def _daily(cron: str, start: datetime, days: int) -> list[datetime]:
    found = ticks.between(cron, "Europe/Berlin", start, start + timedelta(days=days), 100)
    return [t.astimezone(BERLIN) for t in found]


def test_a_local_time_the_clocks_skip_fires_once_at_the_jump() -> None:
    # 02:30 does not exist on 29 March: that day's tick is 03:00 CEST (01:00 UTC), once.
    local = _daily("30 2 * * *", _utc(2026, 3, 27, 12), 4)
    assert [t.isoformat() for t in local] == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-30T02:30:00+02:00",
        "2026-03-31T02:30:00+02:00",
    ]


def test_a_local_time_that_occurs_twice_fires_once_at_its_first_occurrence() -> None:
    # 02:30 happens at 00:30 UTC (CEST) and again at 01:30 UTC (CET) on 25 October.
    found = ticks.between(
        "30 2 * * *", "Europe/Berlin", _utc(2026, 10, 24, 12), _utc(2026, 10, 26, 12), 10
    )
    assert found == [_utc(2026, 10, 25, 0, 30), _utc(2026, 10, 26, 1, 30)]


def test_a_wildcard_hour_fires_in_both_passes_of_the_repeated_hour() -> None:
    # Every 30 minutes: the repeated hour's ticks are distinct instants, 30 minutes apart.
    found = ticks.between(
        "*/30 * * * *", "Europe/Berlin", _utc(2026, 10, 24, 23, 30), _utc(2026, 10, 25, 2, 0), 20
    )
    assert found == [_utc(2026, 10, 24, 23, 30) + timedelta(minutes=30 * i) for i in range(6)]
    assert len(set(found)) == len(found)


def test_ticks_are_strictly_after_the_moment_a_schedule_starts() -> None:
    now = _utc(2026, 1, 1, 0, 0, 0).replace(microsecond=400_000)
    assert ticks.first_tick_after("* * * * * *", "UTC", now) == _utc(2026, 1, 1, 0, 0, 1)
    assert ticks.first_tick_after("0 * * * *", "UTC", _utc(2026, 1, 1, 1)) == _utc(2026, 1, 1, 2)


def test_ticks_older_than_the_deadline_are_counted_not_fired() -> None:
    start = _utc(2026, 1, 1, 0, 0, 0)
    now = start + timedelta(seconds=100)
    plan = ticks.plan("* * * * * *", "UTC", start, now, deadline_seconds=10, max_fire=1000)
    assert plan.missed == 90  # 00:00:00 … 00:01:29
    assert plan.fire == [now - timedelta(seconds=s) for s in range(10, -1, -1)]
    assert plan.next_tick == now + timedelta(seconds=1)


def test_one_pass_fires_a_bounded_number_and_leaves_the_rest_due() -> None:
    start = _utc(2026, 1, 1)
    plan = ticks.plan("* * * * * *", "UTC", start, start + timedelta(hours=1), 3600, 100)
    assert len(plan.fire) == 100
    assert plan.next_tick == start + timedelta(seconds=100)


def test_a_long_outage_is_counted_in_a_bounded_pass() -> None:
    start = _utc(2026, 1, 1)
    now = start + timedelta(days=3)
    plan = ticks.plan("* * * * * *", "UTC", start, now, 5, 100)
    assert plan.missed >= ticks.MAX_MISSED_COUNTED
    assert plan.fire == [now - timedelta(seconds=s) for s in range(5, -1, -1)]
