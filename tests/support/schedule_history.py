"""The history check of a schedule under chaos: every tick of a window made exactly one run.

Pure, on rows the caller read: with psycopg from the suite's own PostgreSQL
(tests/schedules/test_firing_chaos.py), with psql inside a kind cluster
(tests/e2e/kind/test_kind_chaos.py). One rule, so both say the same thing by "exactly once".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from rara.schedules.firing import idempotency_key


@dataclass(frozen=True)
class DecidedTick:
    """A row of rara_schedule_ticks."""

    tick: datetime
    outcome: str
    run_id: int | None


def tick_violations(
    schedule: str,
    expected: Sequence[datetime],
    decided: Sequence[DecidedTick],
    run_keys: Mapping[int, str],
) -> list[str]:
    """What breaks "one run per tick" (empty: nothing).

    ``expected``: every tick of the window, in order; ``decided``: the schedule's history rows
    (all of them, the window's and any later); ``run_keys``: run id -> idempotency key of every
    run whose key names this schedule. Each expected tick must be decided as ``started``, with
    a run of its own under the key of (schedule, tick), and no run of the schedule may be
    missing from the history (a tick fired twice would be one)."""
    problems: list[str] = []
    by_tick = {d.tick: d for d in decided}
    missing = [t for t in expected if t not in by_tick]
    if missing:
        problems.append(f"{len(missing)} ticks never decided, first {missing[:5]}")
    window = [by_tick[t] for t in expected if t in by_tick]
    not_started = [(d.tick, d.outcome) for d in window if d.outcome != "started" or not d.run_id]
    if not_started:
        problems.append(f"ticks that started no run: {not_started[:5]}")
    shared = [r for r, n in Counter(d.run_id for d in decided if d.run_id).items() if n > 1]
    if shared:
        problems.append(f"runs recorded for more than one tick: {shared[:5]}")
    wrong_key = [
        (d.tick, d.run_id, run_keys.get(d.run_id))
        for d in window
        if d.run_id and run_keys.get(d.run_id) != idempotency_key(schedule, d.tick)
    ]
    if wrong_key:
        problems.append(f"runs not under their tick's key (tick, run, key): {wrong_key[:5]}")
    outside = sorted(set(run_keys) - {d.run_id for d in decided})
    if outside:
        problems.append(f"runs of the schedule outside its history (a tick twice?): {outside[:5]}")
    return problems
