"""Tick arithmetic: which instants a cron expression names in a time zone, and what a firing
pass does with those that are due. Pure: no database, the clock is the caller's (the
database's, so every firing process agrees).

Daylight saving follows cronsim, which follows Debian's cron (docs/schedules.md, "Daylight
saving"): a local time the clocks skip fires once, at the instant the clocks jump to; a local
time that occurs twice fires once, at its first occurrence — unless the expression's hour is
a wildcard or a range, whose ticks are distinct instants in both passes and each fire.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

# Missed ticks are counted one by one (cronsim: ~5 us each) up to this many per pass; past it
# the count goes on from the deadline's edge, so an outage of a 1 s schedule costs one bounded
# pass, and missed_ticks is then a lower bound.
MAX_MISSED_COUNTED = 100_000
_SECOND = timedelta(seconds=1)


def cron_problem(cron: str) -> str | None:
    """Why ``cron`` is no expression the firing can plan, in the words the document check
    and the database's (rara_schedule_timing_problem, which accepts exactly this) both use;
    None: it parses. Text outside ASCII is refused: Python's upper() makes names of some."""
    if not cron.isascii():
        return f"{cron!r} is not a cron expression: only ASCII characters"
    try:
        CronSim(cron, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        return f"{cron!r} is not a cron expression: {exc}"
    return None


def zone_problem(zone: str) -> str | None:
    """Why ``zone`` is no time zone the ticks can be computed in; None: it is one."""
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        return f"{zone!r} is not an IANA time zone (e.g. 'UTC', 'Europe/Berlin')"
    return None


def ticks_from(cron: str, zone: str, start: datetime) -> Iterator[datetime]:
    """The ticks at or after ``start`` (UTC, whole seconds: cron has no finer field)."""
    local = (start - _SECOND).astimezone(ZoneInfo(zone))
    for tick in CronSim(cron, local):
        yield tick.astimezone(UTC)


def first_tick_after(cron: str, zone: str, instant: datetime) -> datetime:
    """The first tick strictly after ``instant``: a schedule applied or resumed now starts
    there, so applying never fires a tick of the past."""
    start = instant.replace(microsecond=0) + _SECOND
    return next(ticks_from(cron, zone, start))


@dataclass(frozen=True)
class Plan:
    """What a firing pass does for one schedule."""

    fire: list[datetime] = field(default_factory=list)  # due, within the deadline, in order
    missed: int = 0  # older than the deadline: counted, not fired
    next_tick: datetime | None = None  # the first tick this pass leaves undecided


def plan(
    cron: str,
    zone: str,
    next_tick: datetime,
    now: datetime,
    deadline_seconds: int,
    max_fire: int,
) -> Plan:
    """The ticks from ``next_tick`` (the first undecided) up to ``now``: those older than
    ``now - deadline_seconds`` are missed, the rest fire, at most ``max_fire`` of them (the
    rest are the next pass's: a pass stays bounded however long the outage)."""
    cutoff = now - timedelta(seconds=deadline_seconds)
    fire: list[datetime] = []
    missed = 0
    ticks = ticks_from(cron, zone, next_tick)
    for tick in ticks:
        if tick > now:
            return Plan(fire, missed, tick)
        if tick < cutoff:
            missed += 1
            if missed % MAX_MISSED_COUNTED == 0:
                ticks = ticks_from(cron, zone, cutoff)  # counted enough; jump to the edge
                return _rest(ticks, fire, missed, now, max_fire)
            continue
        fire.append(tick)
        if len(fire) == max_fire:
            return Plan(fire, missed, next(ticks))
    return Plan(fire, missed, None)  # an expression with no more ticks


def _rest(
    ticks: Iterator[datetime], fire: list[datetime], missed: int, now: datetime, max_fire: int
) -> Plan:
    for tick in ticks:
        if tick > now or len(fire) == max_fire:
            return Plan(fire, missed, tick)
        fire.append(tick)
    return Plan(fire, missed, None)


def between(cron: str, zone: str, start: datetime, end: datetime, limit: int) -> list[datetime]:
    """The ticks in [start, end], at most ``limit`` + 1 (so a caller can tell it is over)."""
    found: list[datetime] = []
    for tick in ticks_from(cron, zone, start):
        if tick > end or len(found) > limit:
            break
        found.append(tick)
    return found
