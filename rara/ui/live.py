"""Live updates for every viewer of one server process from ONE listening connection.

``LiveHub`` holds a dedicated connection that LISTENs on ``rara_ready`` (a step became ready:
its dependencies just finished) and ``rara_run`` (a run ended, or began to wait for a person:
rara_wait_begin); a notification only wakes the hub (NOTIFY is a hint). Awake, or every
``interval`` seconds as the polling fallback (a step that starts running notifies nobody), the
hub reads the state of every topic some viewer watches: one statement each for all watched runs
together (their steps, their running steps' metrics and log marks, the runs themselves), one for
the runs list, one for the approvals page, three for the Fleet page; nothing at all when nobody
watches. A topic's state goes to its viewers only when it changed, as a complete JSON snapshot,
into a one-slot mailbox per viewer (a slow viewer skips stale states, never queues them). So an idle
viewer costs the database nothing, and a thousand viewers of one run cost what one does. A lost
listening connection is re-opened with backoff (capped at 2 s: rara.pg.reconnect); meanwhile
the interval keeps the views moving.

Under ``rara ui --user-roles`` (rara.ui.user_roles) the hub still reads as the UI's login,
which sees every user's namespaces; no viewer gets another namespace's run: a run's topic is
checked as the viewer before it is watched, and a list topic (``SCOPED``) is a view per set
of namespaces, each read narrowed to them, a viewer getting its own set's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import structlog
from psycopg_pool import AsyncConnectionPool

from rara.pg import reconnect
from rara.pg.step_logs import alog_marks
from rara.ui import charts, data
from rara.ui.fleet import FLEET, fleet_state
from rara.waits import run_waiting_for, waiting_for

log = structlog.get_logger("rara.ui.live")

RUNS = "runs"  # the runs list's topic; a run's is "run:<id>"; the Fleet page's is FLEET
APPROVALS = "approvals"  # the approvals page's
CHANNELS = ("rara_ready", "rara_run")
SCOPED = frozenset({RUNS, APPROVALS})  # lists: narrowed to each viewer's namespaces

# What a viewer watches: a topic, and for a SCOPED one its namespaces (None: every one).
View = tuple[str, frozenset[str] | None]


class Mailbox:
    """Holds the latest state for one viewer."""

    def __init__(self) -> None:
        self._state: str | None = None
        self._ready = asyncio.Event()

    def put(self, state: str) -> None:
        self._state = state
        self._ready.set()

    async def get(self, wait: float) -> str | None:
        """The newest state not yet taken, or None after ``wait`` seconds."""
        try:
            async with asyncio.timeout(wait):
                await self._ready.wait()
        except TimeoutError:
            return None
        self._ready.clear()
        state, self._state = self._state, None
        return state


class LiveHub:
    def __init__(self, url: str, pool: AsyncConnectionPool[Any], interval: float = 1.0) -> None:
        self.url = url
        self.pool = pool
        self.interval = interval
        self.viewers: dict[View, set[Mailbox]] = {}
        self.last: dict[View, str] = {}
        self.listening = asyncio.Event()  # set while the listening connection is up
        self.ticks = 0  # state reads done (tests: idle viewers add none)
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._listen(), name="rara-ui-listen"),
            asyncio.create_task(self._poll(), name="rara-ui-poll"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    @contextlib.asynccontextmanager
    async def watch(
        self, topic: str, namespaces: frozenset[str] | None = None
    ) -> AsyncIterator[Mailbox]:
        """Watch ``topic``; a SCOPED one narrowed to ``namespaces`` (None: every one)."""
        view: View = (topic, namespaces if topic in SCOPED else None)
        box = Mailbox()
        self.viewers.setdefault(view, set()).add(box)
        if view in self.last:
            box.put(self.last[view])
        else:
            self._wake.set()
        try:
            yield box
        finally:
            boxes = self.viewers.get(view)
            if boxes is not None:
                boxes.discard(box)
                if not boxes:
                    del self.viewers[view]
                    self.last.pop(view, None)

    async def _listen(self) -> None:
        delay = 0.5
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self.url, autocommit=True, connect_timeout=reconnect.CONNECT_TIMEOUT_SECONDS
                ) as conn:
                    for channel in CHANNELS:
                        await conn.execute(f"LISTEN {channel}")
                    self.listening.set()
                    delay = 0.5
                    self._wake.set()  # anything missed while not listening
                    async for _ in conn.notifies():
                        self._wake.set()
            except psycopg.Error as exc:
                log.warning("ui listener lost; polling until it is back", error=str(exc))
            finally:
                self.listening.clear()
            await asyncio.sleep(delay)
            # Capped as the pools' reconnects are (rara.pg.reconnect): listening again within
            # ~2 s of the database's return, not up to 10 s after.
            delay = min(delay * 2, reconnect.RECONNECT_SECONDS)

    async def _poll(self) -> None:
        while True:
            # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancel that arrives as
            # the wake fires, and stop() then waits for this loop forever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.interval):
                    await self._wake.wait()
            self._wake.clear()
            if not self.viewers:
                continue
            try:
                await self.tick()
            except psycopg.Error as exc:
                log.warning("ui live read failed", error=str(exc))
                await asyncio.sleep(self.interval)

    async def tick(self) -> None:
        views = list(self.viewers)
        topics = {topic for topic, _ in views}
        run_ids = sorted(int(t[4:]) for t in topics if t.startswith("run:"))
        states: dict[View, Any] = {}
        self.ticks += 1
        async with self.pool.connection() as conn:
            if run_ids:
                steps: dict[int, list[dict[str, Any]]] = {i: [] for i in run_ids}
                for s in await data.live_step_list(conn, run_ids):
                    steps[s.run_id].append(
                        {
                            "key": s.key,
                            "status": s.status,
                            "waits": waiting_for(s.wait_kind, s.wait_signal, s.wait_due),
                            "attempt": s.attempt,
                            "fraction": s.fraction,
                        }
                    )
                # A running step's metrics as charts (a training curve growing): read once
                # for every viewer, like the rest of the state.
                points: dict[int, list[data.MetricPoint]] = {i: [] for i in run_ids}
                for p in await data.live_metric_list(conn, run_ids):
                    points[p.run_id].append(p)
                logs = await alog_marks(conn, run_ids)  # (a running step wrote more)
                for r in await data.live_run_list(conn, run_ids):
                    states[(f"run:{r.id}", None)] = {
                        "run": {
                            "id": r.id,
                            "status": r.status,
                            "waits": run_waiting_for(r.waiting_for),
                            "cancel_requested": r.cancel_requested,
                            "counts": data.step_counts(r),
                        },
                        "steps": steps[r.id],
                        "charts": charts.metric_charts(points[r.id]),
                        "logs": logs.get(r.id, 0),
                    }
            for topic, namespaces in views:
                if topic == RUNS:
                    recent = await data.live_recent_list(conn, namespaces)
                    states[(RUNS, namespaces)] = {"runs": [[r.id, r.status] for r in recent]}
                elif topic == APPROVALS:
                    gates = await data.live_approval_list(conn, namespaces)
                    states[(APPROVALS, namespaces)] = {
                        "approvals": [[a.run_id, a.step_key, a.decision] for a in gates]
                    }
            if FLEET in topics:
                states[(FLEET, None)] = await fleet_state(conn)
        for view, state in states.items():
            text = json.dumps(state, separators=(",", ":"))
            if self.last.get(view) == text:
                continue
            self.last[view] = text
            for box in self.viewers.get(view, ()):
                box.put(text)
