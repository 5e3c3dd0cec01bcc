"""`rara runs watch`: live per-step progress bars, woken by LISTEN/NOTIFY, then a summary."""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Any

import psycopg
from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TextColumn
from rich.table import Table

from rara.cache import describe_reuse
from rara.cli.common import attempts, literal, visible
from rara.errors import NotFound
from rara.pg import artifacts, runs
from rara.pg import steps as step_sql
from rara.pg import waits as wait_sql
from rara.pg.queries import value
from rara.pg.steps import StepProgressRow
from rara.states import RunStatus
from rara.waits import run_phase_text, shown_status

_DONE_STYLE = {"succeeded": "green", "failed": "red", "cancelled": "yellow"}


def fetch(
    conn: psycopg.Connection[Any], run_id: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    run = runs.get(conn, run_id)
    if run is None:
        raise NotFound(f"no run {run_id}")
    steps = step_sql.list_progress(conn, run_id)
    return asdict(run), [
        {**asdict(s), "status": shown_status(s.status, s.wait_kind)} for s in steps
    ]


def watch(
    url: str, run_id: int, console: Console, timeout: float | None = None, *,
    through_waits: bool = False,
) -> RunStatus:  # fmt: skip
    """Show live progress until the run ends; returns its final status. Or, unless
    ``through_waits``, until only a person can move it on (a signal, an approval: nothing
    ready or running, no timer); returns its status then, not terminal
    (``Client.awaiting_person`` says what it waits for).

    On a terminal: a bar per step, redrawn in place. In a pipe or a log file (no terminal to
    redraw): one plain line per change of a step's status or attempt, which reads well in CI
    logs and `| tee`."""
    # The step's key and message are data (a worker writes the message): never markup, control
    # characters as escapes (``visible``); the status column's markup is rara's own.
    progress = Progress(
        TextColumn("{task.fields[key]:<10}", markup=False),
        BarColumn(bar_width=None if console.width >= 100 else 20),
        TextColumn("{task.fields[status]:<9}"),
        # The step's own time from the database's timestamps, not how long this view has
        # watched it (rich's elapsed column would say 0:00:00 for a step seen already running).
        TextColumn("{task.fields[elapsed]:>8}", markup=False),
        TextColumn("{task.fields[message]}", markup=False),
        console=console,
    )
    tasks: dict[str, TaskID] = {}
    seen: dict[str, tuple[str, int]] = {}
    live = console.is_terminal
    deadline = None if timeout is None else time.monotonic() + timeout
    with (
        psycopg.connect(url, autocommit=True) as conn,
        psycopg.connect(url, autocommit=True) as listener,
        Live(Group(progress), console=console, refresh_per_second=8, transient=False)
        if live
        else nullcontext(),
    ):
        # A run's end, or a wait for a person begun (rara_wait_begin); progress is polled.
        listener.execute("LISTEN rara_run")
        while True:
            run, steps = fetch(conn, run_id)
            now = _database_now(conn)
            for step in steps:
                if live:
                    _update(progress, tasks, step, now)
                else:
                    _log_change(console, seen, step, now)
            status = RunStatus(run["status"])
            person = [] if status.terminal or through_waits else wait_sql.for_person(conn, run_id)
            if status.terminal or person:
                if live:
                    console.print()  # what follows starts on a line of its own
                return status
            if deadline is not None and time.monotonic() > deadline:
                # Its phase: "still waiting for timer of step nap until …", not "running".
                said = run_phase_text(run["phase"] or status.value, run["waiting_for"])
                raise TimeoutError(f"run {run_id} still {said} after {timeout}s")
            # NOTIFY wakes us at once; the timeout is the polling fallback.
            for _ in listener.notifies(timeout=0.5, stop_after=1):
                pass


def _log_change(
    console: Console, seen: dict[str, tuple[str, int]], step: dict[str, Any], now: datetime
) -> None:
    """One plain line when a step's status or attempt changes (the pipe form of the view)."""
    state = (step["status"], step["attempt"])
    if seen.get(step["key"]) == state:
        return
    seen[step["key"]] = state
    status, attempt = state
    line = f"{step['key']} {status}"
    if attempt:
        line += f" (attempt {attempt}/{step['max_attempts']})"
    if took := elapsed(step, now):
        line += f" {took}"
    if status in ("failed", "cancelled") and step["error"]:
        line += f": {step['error'].get('message', '')}"
    if reused := describe_reuse(step.get("reused_from")):
        line += f" (reused from {reused})"
    console.print(literal(line), soft_wrap=True)


def _database_now(conn: psycopg.Connection[Any]) -> datetime:
    now = value(conn, "database_now", datetime)
    assert now is not None
    return now


def elapsed(step: dict[str, Any], now: datetime) -> str:
    """H:MM:SS since the step started, to its end or to ``now`` (the database's clock)."""
    started, finished = step["started_at"], step["finished_at"]
    if started is None:
        return ""
    seconds = int(max((finished or now) - started, timedelta()).total_seconds())
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _update(
    progress: Progress, tasks: dict[str, TaskID], step: dict[str, Any], now: datetime
) -> None:
    key = step["key"]
    if key not in tasks:
        tasks[key] = progress.add_task(
            key, total=1.0, key=visible(key), status="", message="", elapsed=""
        )
        progress.stop_task(tasks[key])
    status = step["status"]
    fraction = 1.0 if status == "succeeded" else (step["fraction"] or 0.0)
    message = step["message"] or ""
    if status == "running" and step["attempt"] > 1:
        message = f"attempt {step['attempt']}/{step['max_attempts']} {message}"
    if status in ("failed", "cancelled") and step["error"]:
        message = shorten(str(step["error"].get("message", "")), 60)
    if reused := describe_reuse(step.get("reused_from")):
        message = f"reused from {reused}"
    style = _DONE_STYLE.get(status)
    if status == "running" and not progress.tasks[tasks[key]].started:
        progress.start_task(tasks[key])
    if style and not progress.tasks[tasks[key]].finished:
        progress.stop_task(tasks[key])
    progress.update(
        tasks[key],
        completed=fraction,
        elapsed=elapsed(step, now),
        message=visible(message),
        status=f"[{style}]{escape(status)}[/{style}]" if style else escape(status),
    )


def summary(url: str, run_id: int) -> Table:
    """Per step: status, attempts, duration, key result fields, and the artifacts; a map's
    children in its row, and the caption says how many steps that makes in all (the count
    `rara runs list` and the dashboard give)."""
    with psycopg.connect(url, autocommit=True) as conn:
        steps = step_sql.list_progress(conn, run_id)
        counted = runs.status_many(conn, [run_id])
        made: dict[str, list[str]] = {}
        for a in artifacts.list_for_run(conn, run_id):
            made.setdefault(a.key, []).append(f"{a.name} {a.digest[7:19]}… {a.size}B")
    table = Table(
        "step", "status", "attempts", "time", "result", "artifacts", title=f"run {run_id}"
    )
    maps = ", ".join(s.key for s in steps if s.is_map)
    if counted and counted[0].total != len(steps) and maps:
        table.caption = literal(
            f"{counted[0].total} steps in all, each child of {maps} counted as a step"
        )
    for s in steps:
        took = ""
        if s.started_at and s.finished_at:
            took = f"{(s.finished_at - s.started_at).total_seconds():.1f}s"
        table.add_row(  # printed on the caller's console: the data as ``literal``
            literal(s.key),
            f"{s.status} (reused)" if s.reused_from else shown_status(s.status, s.wait_kind),
            literal(_attempts(s)),
            took,
            literal(_brief(s.result if s.status == "succeeded" else s.error)),
            literal("\n".join(made.get(s.key, []))),
        )
    return table


def _attempts(step: StepProgressRow) -> str:
    if step.is_map:  # never leased itself: its children's tally (map: 4/4 done)
        return step.message or ""
    return attempts(step.capability, step.attempt, step.max_attempts)


def _brief(value: Any, limit: int = 70) -> str:
    if not isinstance(value, dict):
        return "" if value is None else shorten(str(value), limit)
    parts = [
        f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
        for k, v in value.items()
        if not isinstance(v, dict | list)
    ]
    return shorten(", ".join(parts), limit, sep=", ")


def shorten(text: str, limit: int, sep: str = " ") -> str:
    """``text`` in at most ``limit`` characters, cut after a whole word (or ``sep``-separated
    item) and marked with an ellipsis: never a silent cut mid-word (``resumed_from_``)."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    if text[len(cut) :].startswith(sep):  # the cut falls between two items
        return cut.rstrip(" ,") + "…"
    at = cut.rfind(sep)
    return (cut[:at] if at > 0 else cut).rstrip(" ,") + "…"
