"""The Fleet page as data: its three tables (backlog by capability, workers, the remote
executors they reach) as rows of cells, each cell a text and a CSS class. The page renders it
and the live hub sends it (topic ``fleet``), so the page and its live updates show one thing,
formatted once, here."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from rara.pg.queries import AsyncConn
from rara.ui import data
from rara.ui.data import BacklogLine, ExecutorLine, WorkerLine
from rara.ui.render import took, when

FLEET = "fleet"  # the live topic
SILENT_SECONDS = 30  # a worker this long without a heartbeat is shown as silent


def _cell(text: object, cls: str = "") -> dict[str, str]:
    return {"text": "" if text is None else str(text), "cls": cls}


def _state(w: WorkerLine, now: datetime) -> dict[str, str]:
    if w.stopped_at is not None:
        return _cell(f"stopped {when(w.stopped_at)}", "muted")
    if (now - w.heartbeat_at).total_seconds() > SILENT_SECONDS:
        return _cell("silent", "st st-failed")
    return _cell("live", "st st-succeeded")


def _executor_state(e: ExecutorLine, now: datetime) -> dict[str, str]:
    # What the worker last saw: a silent worker's view of its endpoints is stale.
    if (now - e.heartbeat_at).total_seconds() > SILENT_SECONDS:
        return _cell("worker silent", "muted")
    if not e.live:
        return _cell("down", "st st-failed")
    return _cell("live", "st st-succeeded")


async def fleet_state(conn: AsyncConn) -> dict[str, Any]:
    """The page's tables now: what the page renders and the live hub sends."""
    return fleet_tables(
        await data.worker_list(conn),
        await data.backlog_list(conn),
        await data.executor_list(conn),
        await data.now(conn),
    )


def fleet_tables(
    workers: Sequence[WorkerLine],
    backlog: Sequence[BacklogLine],
    executors: Sequence[ExecutorLine],
    now: datetime,
) -> dict[str, Any]:
    return {
        "backlog": [
            [
                _cell(b.capability, "mono"),
                _cell(b.ready),
                _cell(b.due),
                _cell(when(b.oldest)),
                _cell(b.running),
            ]
            for b in backlog
        ],
        "workers": [
            [
                _cell(w.id, "mono worker"),
                _state(w, now),
                _cell(f"{took(w.heartbeat_at, now)} ago"),
                _cell(w.leases),
                _cell(", ".join(w.capabilities), "mono"),
                _cell(when(w.started_at)),
            ]
            for w in workers
        ],
        "executors": [
            [
                _cell(e.endpoint, "mono worker"),
                _executor_state(e, now),
                _cell(", ".join(e.capabilities), "mono"),
                _cell(e.version),
                _cell(e.worker, "mono worker"),
            ]
            for e in executors
        ],
    }
