"""The ownership checker: reads ``rara_attempts`` and proves the lease protocol held.

``check_history(conn)`` raises AssertionError naming the first violations of:
  1. the ownership intervals [started_at, ended_at) of one step never overlap (no two live
     owners of one step at any time; an open attempt extends to infinity);
  2. every ``succeeded`` attempt was closed by its own worker (``ended_by == worker``);
  3. a succeeded step has exactly one succeeded attempt, and it is the step's last attempt;
     a step that did not succeed has none;
  4. attempt numbers of a step are 1..n without gaps, and only a running step has an open one.
Reused by the chaos suite (tests/e2e).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise
from typing import Any

import psycopg


@dataclass(frozen=True)
class Attempt:
    step_id: int
    attempt: int
    worker: str
    started_at: datetime
    ended_at: datetime | None
    ended_by: str | None
    outcome: str


def load_attempts(conn: psycopg.Connection[Any]) -> dict[int, list[Attempt]]:
    rows = conn.execute(
        "SELECT step_id, attempt, worker, started_at, ended_at, ended_by, outcome::text "
        "FROM rara_attempts ORDER BY step_id, attempt").fetchall()
    by_step: dict[int, list[Attempt]] = defaultdict(list)
    for row in rows:
        by_step[row[0]].append(Attempt(*row))
    return by_step


def check_history(conn: psycopg.Connection[Any], *, limit: int = 10) -> dict[str, int]:
    """Assert the invariants above; returns counts (steps, attempts, succeeded) for reports."""
    by_step = load_attempts(conn)
    steps = {r[0]: (r[1], r[2]) for r in conn.execute(
        "SELECT id, status::text, attempt FROM rara_steps").fetchall()}
    problems: list[str] = []
    succeeded = 0
    for step_id, attempts in by_step.items():
        numbers = [a.attempt for a in attempts]
        if numbers != list(range(1, len(numbers) + 1)):
            problems.append(f"step {step_id}: attempt numbers {numbers} have gaps")
        ordered = sorted(attempts, key=lambda a: a.started_at)
        for prev, nxt in pairwise(ordered):
            if prev.ended_at is None or prev.ended_at > nxt.started_at:
                problems.append(f"step {step_id}: attempt {prev.attempt} ({prev.worker}, ended "
                                f"{prev.ended_at}) overlaps attempt {nxt.attempt} ({nxt.worker}, "
                                f"started {nxt.started_at})")
        wins = [a for a in attempts if a.outcome == "succeeded"]
        for win in wins:
            if win.ended_by != win.worker:
                problems.append(f"step {step_id}: attempt {win.attempt} owned by {win.worker} "
                                f"was completed by {win.ended_by}")
        status, last = steps.get(step_id, ("missing", 0))
        if status == "succeeded":
            succeeded += 1
            if len(wins) != 1 or wins[0].attempt != last:
                problems.append(f"step {step_id}: succeeded with {len(wins)} succeeded attempts "
                                f"(last attempt {last})")
        elif wins:
            problems.append(f"step {step_id}: status {status} but an attempt succeeded")
        open_ = [a.attempt for a in attempts if a.ended_at is None]
        if open_ and status != "running":
            problems.append(f"step {step_id}: {status} with open attempts {open_}")
    assert not problems, f"{len(problems)} history violations:\n  " + "\n  ".join(problems[:limit])
    return {"steps": len(by_step), "attempts": sum(len(a) for a in by_step.values()),
            "succeeded": succeeded}
