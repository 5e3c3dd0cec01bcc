"""The chaos tests' history check (tests/support/schedule_history.py) names each way a window
of ticks can break "one run per tick": a clean history passes, and each fault is caught."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rara.schedules.firing import idempotency_key
from tests.support.schedule_history import DecidedTick, tick_violations

NAME = "every-second"
FIRST = datetime(2026, 12, 2, 9, 0, 0, tzinfo=UTC)
TICKS = [FIRST + timedelta(seconds=s) for s in range(5)]


def _clean() -> tuple[list[DecidedTick], dict[int, str]]:
    history = [DecidedTick(t, "started", 100 + i) for i, t in enumerate(TICKS)]
    return history, {100 + i: idempotency_key(NAME, t) for i, t in enumerate(TICKS)}


def test_one_run_per_tick_passes() -> None:
    history, runs = _clean()
    assert tick_violations(NAME, TICKS, history, runs) == []


def test_a_later_tick_outside_the_window_is_no_fault() -> None:
    history, runs = _clean()
    later = FIRST + timedelta(seconds=5)
    history.append(DecidedTick(later, "started", 200))
    runs[200] = idempotency_key(NAME, later)
    assert tick_violations(NAME, TICKS, history, runs) == []


def test_a_tick_never_decided_is_caught() -> None:
    history, runs = _clean()
    del history[2]
    del runs[102]
    [problem] = tick_violations(NAME, TICKS, history, runs)
    assert problem.startswith("1 ticks never decided")


def test_a_tick_that_started_nothing_is_caught() -> None:
    history, runs = _clean()
    history[1] = DecidedTick(TICKS[1], "refused", None)
    del runs[101]
    [problem] = tick_violations(NAME, TICKS, history, runs)
    assert problem.startswith("ticks that started no run")


def test_a_second_run_of_a_tick_is_caught() -> None:
    history, runs = _clean()
    runs[999] = "schedule:every-second:20261202T090001Z-again"  # a run the history lacks
    [problem] = tick_violations(NAME, TICKS, history, runs)
    assert "outside its history" in problem


def test_one_run_recorded_for_two_ticks_is_caught() -> None:
    history, runs = _clean()
    history[3] = DecidedTick(TICKS[3], "started", 102)
    del runs[103]
    problems = tick_violations(NAME, TICKS, history, runs)
    assert any(p.startswith("runs recorded for more than one tick: [102]") for p in problems)


def test_a_run_under_another_tick_key_is_caught() -> None:
    history, runs = _clean()
    runs[104] = idempotency_key(NAME, TICKS[0])
    [problem] = tick_violations(NAME, TICKS, history, runs)
    assert problem.startswith("runs not under their tick's key")
