"""The WorkerPool scaling decision, case by case (pure: no clock, no cluster)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rara.operator.scaling import Policy, Window, decide, desired_replicas

T0 = datetime(2026, 1, 1, tzinfo=UTC)
POLICY = Policy(min_replicas=0, max_replicas=5, target_backlog_per_replica=10, cooldown_seconds=60)


@pytest.mark.parametrize(
    ("policy", "backlog", "expected"),
    [
        (POLICY, 0, 0),  # idle: scale to zero is allowed
        (POLICY, 1, 1),  # one waiting step needs a replica (ceil, not round)
        (POLICY, 10, 1),
        (POLICY, 11, 2),
        (POLICY, 1000, 5),  # clamped to max
        (Policy(2, 5, 10, 60), 0, 2),  # clamped to min
        (Policy(0, 0, 10, 60), 50, 0),  # a pool switched off stays off
        (Policy(1, 3, 1, 0), 2, 2),
        (POLICY, -3, 0),  # defensive: a negative count is no backlog
    ],
)
def test_desired_replicas(policy: Policy, backlog: int, expected: int) -> None:
    assert desired_replicas(policy, backlog) == expected


# (backlog, current, seconds since the window opened or None, window peak) ->
# (replicas to set, window kept?)
CASES = [
    # up: at once, whatever the window says
    ("scale up from zero", 25, 0, None, None, 3, False),
    ("scale up ends a window", 40, 2, 30, 1, 4, False),
    ("hold when matched", 20, 2, None, None, 2, False),
    ("hold when matched ends a window", 20, 2, 59, 0, 2, False),
    # down: only after the cooldown
    ("down opens a window", 0, 3, None, None, 3, True),
    ("down waits inside the window", 0, 3, 59, 0, 3, True),
    ("down after the cooldown", 0, 3, 60, 0, 0, False),
    ("down to the window's peak, not below", 5, 3, 90, 2, 2, False),
    ("peak above current is capped", 0, 3, 90, 7, 3, False),
]


@pytest.mark.parametrize(
    ("case", "backlog", "current", "age", "peak", "replicas", "keeps_window"),
    CASES,
    ids=[c[0] for c in CASES],
)
def test_decide(
    case: str,
    backlog: int,
    current: int,
    age: int | None,
    peak: int | None,
    replicas: int,
    keeps_window: bool,
) -> None:
    window = None if age is None else Window(T0 - timedelta(seconds=age), peak or 0)
    decision = decide(POLICY, backlog=backlog, current=current, now=T0, window=window)
    assert decision.replicas == replicas, decision.reason
    assert (decision.window is not None) == keeps_window, decision.reason


def test_window_remembers_the_peak_and_its_start() -> None:
    first = decide(POLICY, backlog=15, current=4, now=T0, window=None)
    assert first.window == Window(T0, 2)
    later = T0 + timedelta(seconds=30)
    second = decide(POLICY, backlog=0, current=4, now=later, window=first.window)
    assert second.window == Window(T0, 2)  # the start does not move; the peak is kept
    assert "cooldown 30s left" in second.reason
    done = decide(
        POLICY, backlog=0, current=4, now=T0 + timedelta(seconds=60), window=second.window
    )
    assert done.replicas == 2
    assert done.window is None


def test_zero_cooldown_scales_down_at_once() -> None:
    policy = Policy(0, 5, 10, cooldown_seconds=0)
    assert decide(policy, backlog=0, current=5, now=T0, window=None).replicas == 0


def test_changes() -> None:
    decision = decide(POLICY, backlog=0, current=0, now=T0, window=None)
    assert not decision.changes(0)
    assert decision.changes(1)
