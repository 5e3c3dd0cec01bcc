"""The ownership checker: reads ``rara_attempts`` and proves the lease protocol held.

``check_history(conn)`` raises AssertionError naming the first violations of:
  1. the ownership intervals [started_at, ended_at) of one step never overlap (no two live
     owners of one step at any time; an open attempt extends to infinity);
  2. every ``succeeded`` attempt was closed by its own worker (``ended_by == worker``);
  3. a succeeded step has exactly one succeeded attempt, and it is the step's last attempt;
     a step that did not succeed has none;
  4. attempt numbers of a step are 1..n without gaps, and only a running step has an open one;
  7. every run's step counts are its steps' statuses, and it has ended exactly when the one
     rule (rara_run_end_status) says so (``run_count_violations``); a step ended twice would
     be counted twice, so this is also what proves a wait or map step ended once;
  8. a step that runs and succeeded ran: it has its succeeded attempt (only a wait or map step,
     or one a resume reused, succeeds in no attempt); a wait or approval step never ran: no
     attempt, never leased; it waits (a ``rara_waits`` row) exactly while it is blocked with
     its dependencies met, so that something can end it; it ended by one signal at most, and
     an approval gate that ended has its decision: approved if it succeeded
     (``wait_violations``).

``check_writes(conn)`` (also run by ``check_history(conn, writes=True)``) proves that the
fenced writes of an attempt stayed inside its ownership:
  5. every event and checkpoint row names an attempt that exists, and was created after that
     attempt's lease (``started_at``) and before the next attempt of the step began — strict:
     a fenced write holds the step row FOR SHARE, so it commits before the statement that
     ends the attempt, which commits before the next lease — and not after the attempt ended
     (``ended_at``, give or take ``late_tolerance_s``: both are transaction start times);
  6. artifact manifest rows belong to the succeeded attempt of a succeeded step only.

``check_progress_seq(conn)`` checks that the progress events of every succeeded attempt are
numbered 1..n without gaps. Reused by the chaos suite (tests/e2e).
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
        "FROM rara_attempts ORDER BY step_id, attempt"
    ).fetchall()
    by_step: dict[int, list[Attempt]] = defaultdict(list)
    for row in rows:
        by_step[row[0]].append(Attempt(*row))
    return by_step


def check_history(
    conn: psycopg.Connection[Any], *, limit: int = 10, writes: bool = False
) -> dict[str, int]:
    """Assert the invariants above (5 and 6 too with ``writes``); returns counts (steps, attempts,
    succeeded) for reports."""
    by_step = load_attempts(conn)
    steps = {
        r[0]: (r[1], r[2])
        for r in conn.execute("SELECT id, status::text, attempt FROM rara_steps").fetchall()
    }
    problems: list[str] = []
    succeeded = 0
    problems += [
        f"step {step_id}: succeeded without an attempt (it is not a wait, map or reused step)"
        for (step_id,) in conn.execute("""
            SELECT s.id FROM rara_steps s
            WHERE s.status = 'succeeded' AND s.wait IS NULL AND s.map_over IS NULL
              AND s.reused_from IS NULL
              AND NOT EXISTS (SELECT FROM rara_attempts a WHERE a.step_id = s.id)
            ORDER BY s.id""").fetchall()
    ]
    for step_id, attempts in by_step.items():
        numbers = [a.attempt for a in attempts]
        if numbers != list(range(1, len(numbers) + 1)):
            problems.append(f"step {step_id}: attempt numbers {numbers} have gaps")
        ordered = sorted(attempts, key=lambda a: a.started_at)
        for prev, nxt in pairwise(ordered):
            if prev.ended_at is None or prev.ended_at > nxt.started_at:
                problems.append(
                    f"step {step_id}: attempt {prev.attempt} ({prev.worker}, ended "
                    f"{prev.ended_at}) overlaps attempt {nxt.attempt} ({nxt.worker}, "
                    f"started {nxt.started_at})"
                )
        wins = [a for a in attempts if a.outcome == "succeeded"]
        for win in wins:
            if win.ended_by != win.worker:
                problems.append(
                    f"step {step_id}: attempt {win.attempt} owned by {win.worker} "
                    f"was completed by {win.ended_by}"
                )
        status, last = steps.get(step_id, ("missing", 0))
        if status == "succeeded":
            succeeded += 1
            if len(wins) != 1 or wins[0].attempt != last:
                problems.append(
                    f"step {step_id}: succeeded with {len(wins)} succeeded attempts "
                    f"(last attempt {last})"
                )
        elif wins:
            problems.append(f"step {step_id}: status {status} but an attempt succeeded")
        open_ = [a.attempt for a in attempts if a.ended_at is None]
        if open_ and status != "running":
            problems.append(f"step {step_id}: {status} with open attempts {open_}")
    problems += run_count_violations(conn)
    problems += wait_violations(conn)
    assert not problems, f"{len(problems)} history violations:\n  " + "\n  ".join(problems[:limit])
    if writes:
        check_writes(conn, limit=limit)
    return {
        "steps": len(by_step),
        "attempts": sum(len(a) for a in by_step.values()),
        "succeeded": succeeded,
    }


def run_count_violations(conn: psycopg.Connection[Any]) -> list[str]:
    """Invariant 7 (migration 0006): a run's step counts are its steps' statuses, and a run has
    ended exactly when they are all terminal, as the one rule says. One statement, one
    snapshot: the counts move in the transactions that move the steps, so this holds while
    workers run too. A map's children past its window that were never inserted (migration
    0011: elements of its list until a slot frees) are steps of the run all the same: waiting
    while the map runs, cancelled once it failed or was cancelled."""
    rows = conn.execute("""
        SELECT r.id, r.status::text, r.steps_total, r.steps_succeeded, r.steps_failed,
               r.steps_cancelled, c.total, c.succeeded, c.failed, c.cancelled,
               rara_run_end_status(r.cancel_requested, c.total, c.succeeded, c.failed,
                                   c.cancelled)::text AS ending
        FROM rara_runs r
        LEFT JOIN LATERAL (
            SELECT (count(*) + coalesce(sum(s.unborn), 0))::integer AS total,
                   (count(*) FILTER (WHERE status = 'succeeded'))::integer AS succeeded,
                   (count(*) FILTER (WHERE status = 'failed'))::integer AS failed,
                   (count(*) FILTER (WHERE status = 'cancelled')
                    + coalesce(sum(s.unborn) FILTER (WHERE s.status IN ('failed', 'cancelled')),
                               0)
                   )::integer AS cancelled
            FROM (SELECT s.status, coalesce(s.map_total - s.map_next, 0) AS unborn
                  FROM rara_steps s WHERE s.run_id = r.id) s) c ON true
        ORDER BY r.id""").fetchall()
    problems = []
    for run_id, status, *counts, ending in rows:
        kept, actual = counts[:4], counts[4:]
        if kept != actual:
            problems.append(
                f"run {run_id}: counts (total, succeeded, failed, cancelled) {kept}, "
                f"its steps {actual}"
            )
        ended = status in ("succeeded", "failed", "cancelled")
        if (ending if ended else None) != (status if ended else None) or (
            ending is not None and not ended
        ):
            problems.append(f"run {run_id}: {status}, but by its steps {ending or 'not ended'}")
    return problems


def wait_violations(conn: psycopg.Connection[Any]) -> list[str]:
    """Invariant 8 for the wait and approval steps (migration 0021): each message names the
    step and what is wrong. One snapshot, so it holds while workers and senders run too."""
    rows = conn.execute("""
        SELECT s.id, s.status::text, s.wait ->> 'kind', s.attempt, s.leased_by, s.pending_deps,
               r.status::text, w.step_id IS NOT NULL,
               (SELECT count(*) FROM rara_attempts a WHERE a.step_id = s.id),
               (SELECT count(*) FROM rara_signals g WHERE g.step_id = s.id),
               p.step_id IS NOT NULL, p.decision
        FROM rara_steps s JOIN rara_runs r ON r.id = s.run_id
        LEFT JOIN rara_waits w ON w.step_id = s.id
        LEFT JOIN rara_approvals p ON p.step_id = s.id
        WHERE s.wait IS NOT NULL
        ORDER BY s.id""").fetchall()
    problems = []
    for row in rows:
        step_id, status, kind, attempt, leased_by, pending, run, waiting, attempts = row[:9]
        signals, gate, decision = row[9:]
        what = f"{kind} step {step_id} ({status})"
        if attempts or attempt or leased_by is not None:
            problems.append(f"{what}: ran ({attempts} attempts, attempt {attempt}, {leased_by})")
        if waiting != (status == "blocked" and pending == 0):
            problems.append(
                f"{what}: {'waits' if waiting else 'does not wait'} with {pending} "
                f"dependencies pending, its run {run}"
            )
        if signals > (1 if kind == "signal" and status == "succeeded" else 0):
            problems.append(f"{what}: ended by {signals} signals")
        if kind == "approval" and status in ("succeeded", "failed"):
            if decision is None or not gate:
                problems.append(f"{what}: ended without a decision")
            elif (decision == "approved") != (status == "succeeded"):
                problems.append(f"{what}: decision {decision}")
    return problems


def write_violations(conn: psycopg.Connection[Any], *, late_tolerance_s: float = 1.0) -> list[str]:
    """Invariants 5 and 6: fenced writes outside their attempt's ownership, as messages."""
    problems: list[str] = []
    for table in ("rara_events", "rara_checkpoints"):
        rows = conn.execute(
            f"""
            SELECT w.step_id, w.attempt, w.seq, w.created_at, a.worker, a.started_at,
                   a.ended_at, a.outcome::text, n.started_at AS next_started_at
            FROM {table} w
            LEFT JOIN rara_attempts a ON a.step_id = w.step_id AND a.attempt = w.attempt
            LEFT JOIN rara_attempts n ON n.step_id = w.step_id AND n.attempt = w.attempt + 1
            WHERE a.step_id IS NULL
               OR w.created_at <= a.started_at
               OR w.created_at >= n.started_at
               OR w.created_at > a.ended_at + make_interval(secs => %s)
            ORDER BY w.step_id, w.attempt, w.seq""",
            (late_tolerance_s,),
        ).fetchall()
        for step_id, attempt, seq, created, worker, started, ended, outcome, nxt in rows:
            if worker is None:
                problems.append(
                    f"{table} step {step_id} attempt {attempt} seq {seq}: no such attempt"
                )
            else:
                problems.append(
                    f"{table} step {step_id} attempt {attempt} ({worker}, "
                    f"{outcome}) seq {seq} written at {created}, outside its "
                    f"ownership [{started}, {ended}] (next attempt from {nxt})"
                )
    rows = conn.execute("""
        SELECT m.step_id, m.attempt, m.name, s.status::text, s.attempt, a.outcome::text
        FROM rara_step_artifacts m JOIN rara_steps s ON s.id = m.step_id
        LEFT JOIN rara_attempts a ON a.step_id = m.step_id AND a.attempt = m.attempt
        WHERE s.status <> 'succeeded' OR m.attempt <> s.attempt
           OR a.outcome IS DISTINCT FROM 'succeeded'
        ORDER BY m.step_id, m.attempt""").fetchall()
    for step_id, attempt, name, status, last, outcome in rows:
        problems.append(
            f"manifest {name!r} of step {step_id} attempt {attempt} ({outcome}): "
            f"the step is {status} at attempt {last}"
        )
    return problems


def check_writes(
    conn: psycopg.Connection[Any], *, limit: int = 10, late_tolerance_s: float = 1.0
) -> None:
    problems = write_violations(conn, late_tolerance_s=late_tolerance_s)
    assert not problems, f"{len(problems)} fenced writes outside their attempt:\n  " + "\n  ".join(
        problems[:limit]
    )


def progress_gaps(conn: psycopg.Connection[Any]) -> list[str]:
    """Succeeded attempts whose progress events are not numbered 1..n."""
    rows = conn.execute("""
        SELECT a.step_id, a.attempt, array_agg(e.seq ORDER BY e.seq)
        FROM rara_attempts a JOIN rara_events e
          ON e.step_id = a.step_id AND e.attempt = a.attempt AND e.kind = 'progress'
        WHERE a.outcome = 'succeeded'
        GROUP BY a.step_id, a.attempt
        HAVING min(e.seq) <> 1 OR max(e.seq) <> count(*)
        ORDER BY a.step_id""").fetchall()
    return [
        f"step {step_id} attempt {attempt}: progress seqs {seqs}" for step_id, attempt, seqs in rows
    ]


def check_progress_seq(conn: psycopg.Connection[Any], *, limit: int = 10) -> None:
    problems = progress_gaps(conn)
    assert not problems, f"{len(problems)} attempts with progress seq gaps:\n  " + "\n  ".join(
        problems[:limit]
    )
