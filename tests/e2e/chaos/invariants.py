"""What must hold after the chaos, read from PostgreSQL and the file ledger, and the summary.

Definitions used in the summary:

* duplicates: effects beyond the first per idempotency key (DB ledger for in-process steps,
  file ledger for grpc steps); must be 0.
* lost work: succeeded steps without any effect; must be 0.
* zombie effects: effects made by an attempt at a moment it did not own its step (outside
  ``[started_at, ended_at]`` of the attempt the effect names, or by another worker than
  that attempt's); must be 0 — a handler that goes on after its lease is gone could do its
  side effect while the next owner does too.
* adopted effects: the effect was done by an attempt that did not win (killed between effect
  and completion); the winner saw the key and skipped it. Informational.
* recovery (per kill): for each attempt that was running on the victim when it was killed
  (worker: attempts of that process closed by the reaper; executor: grpc attempts open at the
  kill that did not succeed), the time from the kill until the step's next attempt was leased
  (``re-lease``) and until the step succeeded (``completed``). For a SIGTERM: from the release
  to the next lease. For the PostgreSQL restart: from the restart's start to the first
  attempt completed after it. The summary reports the worst of each.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from tests.e2e.chaos.fleet import (
    EXECUTOR_SIGKILL,
    KINDS,
    POSTGRES_RESTART,
    WORKER_SIGKILL,
    WORKER_SIGTERM,
    ChaosEvent,
)
from tests.support.history import check_history, progress_gaps, write_violations


@dataclass(frozen=True)
class Effect:
    key: str
    attempt: int
    worker: str | None  # None: file ledger (the executor does not know the worker)
    at: datetime


def db_effects(conn: psycopg.Connection[Any]) -> dict[str, list[Effect]]:
    found: dict[str, list[Effect]] = defaultdict(list)
    for key, attempt, worker, at in conn.execute(
        "SELECT key, attempt, worker, at FROM chaos_ledger ORDER BY id"
    ).fetchall():
        found[key].append(Effect(key, attempt, worker, at))
    return found


def file_effects(directory: Path) -> dict[str, list[Effect]]:
    found: dict[str, list[Effect]] = defaultdict(list)
    for name in os.listdir(directory):
        if name.startswith(".tmp-"):  # plugins.TMP_PREFIX: an effect that never happened
            continue
        key, _, attempt = name.rpartition(".")
        stamp = float((directory / name).read_text().split()[1])
        found[key].append(Effect(key, int(attempt), None, datetime.fromtimestamp(stamp, UTC)))
    return found


def _ts(value: float) -> datetime:
    return datetime.fromtimestamp(value, UTC)


def _seconds(later: datetime, earlier: datetime) -> float:
    return (later - earlier).total_seconds()


def evaluate(
    conn: psycopg.Connection[Any],
    *,
    file_ledger: Path,
    runs_expected: int,
    events: list[ChaosEvent],
    checkpointing: set[str],
) -> tuple[dict[str, Any], list[str]]:
    """Every invariant; returns (summary, problems). An empty problem list is a pass."""
    problems: list[str] = []
    runs = dict(conn.execute("SELECT status::text, count(*) FROM rara_runs GROUP BY 1").fetchall())
    if runs != {"succeeded": runs_expected}:
        problems.append(f"runs by status {runs}, expected {runs_expected} succeeded")
    steps = conn.execute(
        "SELECT id, run_id, key, executor, status::text, attempt, result, "
        "finished_at FROM rara_steps ORDER BY id"
    ).fetchall()
    by_status = Counter(s[4] for s in steps)
    if set(by_status) != {"succeeded"}:
        problems.append(f"steps by status {dict(by_status)}")
    running = conn.execute(
        "SELECT count(*) FROM rara_steps WHERE status = 'running' OR lease_token IS NOT NULL"
    ).fetchone()
    open_attempts = conn.execute(
        "SELECT count(*) FROM rara_attempts WHERE outcome = 'running'"
    ).fetchone()
    leases_left = int(running[0] if running else 0) + int(open_attempts[0] if open_attempts else 0)
    if leases_left:
        problems.append(f"{leases_left} leases/attempts left running")
    wins = dict(
        conn.execute(
            "SELECT step_id, count(*) FROM rara_attempts WHERE outcome = 'succeeded' GROUP BY 1"
        ).fetchall()
    )
    not_one = [s[0] for s in steps if wins.get(s[0], 0) != 1]
    if not_one:
        problems.append(
            f"{len(not_one)} steps without exactly one succeeded attempt: {not_one[:10]}"
        )
    try:
        history = check_history(conn)
    except AssertionError as exc:
        problems.append(str(exc))
        history = {}
    late = write_violations(conn)
    problems += late[:10]
    gaps = progress_gaps(conn)
    problems += gaps[:10]

    # -- the effect ledgers -----------------------------------------------------------------
    attempts = {
        (r[0], r[1]): r[2:]
        for r in conn.execute(
            "SELECT step_id, attempt, worker, started_at, ended_at, outcome::text "
            "FROM rara_attempts"
        ).fetchall()
    }
    effects = {"inprocess": db_effects(conn), "grpc": file_effects(file_ledger)}
    keys = set()
    duplicates = lost = zombies = adopted = 0
    for step_id, run_id, key, executor, status, last, _result, _ in steps:
        idem = f"{run_id}:{key}"
        keys.add(idem)
        found = effects[executor].get(idem, [])
        if status == "succeeded" and not found:
            lost += 1
            problems.append(f"lost work: step {step_id} ({idem}) succeeded without an effect")
        if len(found) > 1:
            duplicates += len(found) - 1
            problems.append(
                f"duplicate effects of {idem}: {[(e.attempt, e.worker, str(e.at)) for e in found]}"
            )
        for effect in found:
            owner = attempts.get((step_id, effect.attempt))
            if owner is None:
                zombies += 1
                problems.append(
                    f"effect of {idem} names attempt {effect.attempt}, which never existed"
                )
                continue
            worker, started, ended, _outcome = owner
            outside = effect.at < started or (ended is not None and effect.at > ended)
            if outside or (effect.worker is not None and effect.worker != worker):
                zombies += 1
                problems.append(
                    f"zombie effect of {idem}: attempt {effect.attempt} by "
                    f"{effect.worker or 'the executor'} at {effect.at}, but that "
                    f"attempt was {worker}'s during [{started}, {ended}]"
                )
            if effect.attempt != last:
                adopted += 1
    strays = [k for ledger in effects.values() for k in ledger if k not in keys]
    if strays:
        problems.append(f"effects for keys of no step: {strays[:5]}")

    # -- checkpoints: the winner resumed from the latest checkpoint of an earlier attempt -------
    resumed = 0
    latest = {
        (r[0], r[1]): r[2]
        for r in conn.execute(
            "SELECT DISTINCT ON (step_id, attempt) step_id, attempt, state FROM rara_checkpoints "
            "ORDER BY step_id, attempt, seq DESC"
        ).fetchall()
    }
    for step_id, _run_id, key, _executor, status, last, result, _ in steps:
        if key not in checkpointing or status != "succeeded":
            continue
        earlier = [a for (s, a) in latest if s == step_id and a < last]
        expected = int(latest[(step_id, max(earlier))]["next"]) if earlier else 0
        got = (result or {}).get("resumed_from")
        if got != expected:
            problems.append(
                f"step {step_id} ({key}) resumed from {got}, its latest earlier "
                f"checkpoint says {expected}"
            )
        resumed += bool(expected)

    summary: dict[str, Any] = {
        "runs": sum(runs.values()),
        "runs_succeeded": runs.get("succeeded", 0),
        "steps": len(steps),
        "steps_succeeded": by_status.get("succeeded", 0),
        "attempts": history.get("attempts", len(attempts)),
        "attempt_outcomes": dict(Counter(a[3] for a in attempts.values())),
        "kills": {kind: sum(1 for e in events if e.kind == kind) for kind in KINDS},
        "duplicates": duplicates,
        "lost_work": lost,
        "zombie_effects": zombies,
        "adopted_effects": adopted,
        "leases_left_running": leases_left,
        "progress_seq_gaps": len(gaps),
        "writes_outside_ownership": len(late),
        "resumed_from_checkpoint": resumed,
        "events": conn.execute("SELECT count(*) FROM rara_events").fetchone()[0],  # type: ignore[index]
        "checkpoints": conn.execute("SELECT count(*) FROM rara_checkpoints").fetchone()[0],  # type: ignore[index]
    }
    summary["recovery"] = recovery(conn, events, steps)
    return summary, problems


def recovery(
    conn: psycopg.Connection[Any], events: list[ChaosEvent], steps: list[Any]
) -> dict[str, Any]:
    """Worst re-lease / completion times per kind of kill (see the module docstring)."""
    executor_of = {s[0]: s[3] for s in steps}
    finished = {s[0]: s[7] for s in steps}
    rows = conn.execute(
        "SELECT step_id, attempt, worker, started_at, ended_at, outcome::text "
        "FROM rara_attempts ORDER BY step_id, attempt"
    ).fetchall()
    by_step: dict[int, list[Any]] = defaultdict(list)
    for row in rows:
        by_step[row[0]].append(row)
    nxt = {(r[0], r[1]): r for r in rows}
    out: dict[str, Any] = {}

    def worst(kind: str, pairs: list[tuple[float, float | None, str]], victims: int) -> None:
        relets = [p[0] for p in pairs]
        dones = [p[1] for p in pairs if p[1] is not None]
        out[kind] = {
            "kills": victims,
            "interrupted_attempts": len(pairs),
            "worst_relet_s": round(max(relets), 3) if relets else None,
            "worst_completed_s": round(max(dones), 3) if dones else None,
            "worst_relet": max(pairs)[2] if pairs else None,
        }

    for kind in (WORKER_SIGKILL, EXECUTOR_SIGKILL, WORKER_SIGTERM):
        pairs: list[tuple[float, float | None, str]] = []
        mine = [e for e in events if e.kind == kind]
        for event in mine:
            at = _ts(event.at)
            for step_id, attempt, worker, started, ended, outcome in rows:
                if kind == WORKER_SIGKILL:
                    hit = worker == event.victim and outcome == "lease_expired"
                elif kind == EXECUTOR_SIGKILL:
                    hit = (
                        executor_of.get(step_id) == "grpc"
                        and started <= at
                        and (ended is None or ended >= at)
                        and outcome != "succeeded"
                    )
                else:
                    hit = worker == event.victim and outcome == "released"
                if not hit:
                    continue
                origin = ended if kind == WORKER_SIGTERM else at
                follow = nxt.get((step_id, attempt + 1))
                relet = _seconds(follow[3], origin) if follow else float("inf")
                done = finished.get(step_id)
                pairs.append(
                    (
                        relet,
                        _seconds(done, origin) if done else None,
                        f"step {step_id} attempt {attempt} ({worker}, {event.kind} "
                        f"{event.victim}) -> {follow[2] if follow else None}",
                    )
                )
        worst(kind, pairs, len(mine))
    for event in events:
        if event.kind != POSTGRES_RESTART:
            continue
        at = _ts(event.at)
        first = conn.execute(
            "SELECT min(ended_at) FROM rara_attempts WHERE outcome = 'succeeded' AND ended_at > %s",
            (at,),
        ).fetchone()
        outage = (event.back_at or event.at) - event.at
        out[POSTGRES_RESTART] = {
            "kills": 1,
            "server_down_s": round(outage, 3),
            "first_completion_after_s": round(_seconds(first[0], at), 3)
            if first and first[0]
            else None,
        }
    return out


def format_summary(summary: dict[str, Any], *, seed: int, wall: float) -> str:
    kills = summary["kills"]
    rec = summary["recovery"]

    def r(kind: str, field: str) -> str:
        value = rec.get(kind, {}).get(field)
        return "-" if value is None else f"{value:.2f}s"

    lines = [
        f"chaos summary (seed {seed}, replay with RARA_CHAOS_SEED={seed}), wall {wall:.1f}s",
        f"  runs {summary['runs']} ({summary['runs_succeeded']} succeeded), steps "
        f"{summary['steps']} ({summary['steps_succeeded']} succeeded), attempts "
        f"{summary['attempts']} {summary['attempt_outcomes']}",
        "  kills: " + ", ".join(f"{kind} {kills[kind]}" for kind in KINDS),
        f"  duplicates {summary['duplicates']}, lost work {summary['lost_work']}, zombie "
        f"effects {summary['zombie_effects']}, adopted effects {summary['adopted_effects']}, "
        f"leases left running {summary['leases_left_running']}",
        f"  progress seq gaps {summary['progress_seq_gaps']}, writes outside ownership "
        f"{summary['writes_outside_ownership']}, events {summary['events']}, checkpoints "
        f"{summary['checkpoints']}, resumed from a checkpoint {summary['resumed_from_checkpoint']}",
        f"  worst recovery (kill -> next lease / -> step succeeded): worker SIGKILL "
        f"{r(WORKER_SIGKILL, 'worst_relet_s')} / {r(WORKER_SIGKILL, 'worst_completed_s')}; "
        f"executor SIGKILL {r(EXECUTOR_SIGKILL, 'worst_relet_s')} / "
        f"{r(EXECUTOR_SIGKILL, 'worst_completed_s')}; worker SIGTERM (release -> next lease) "
        f"{r(WORKER_SIGTERM, 'worst_relet_s')}; postgres restart (-> first completion) "
        f"{r(POSTGRES_RESTART, 'first_completion_after_s')}",
    ]
    return "\n".join(lines)
