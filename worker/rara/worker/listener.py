"""LISTEN on a dedicated connection: ``rara_ready`` wakes the lease loop, ``rara_queued`` (steps
inserted ready: a run started) also its held-back slots, ``rara_waits`` the firing of waits
(rara.worker.waits), ``rara_cancel`` (a cancel was asked of running steps somewhere) makes
the worker ask the database sooner than its next heartbeat whether one of its attempts is
among them. Any login may NOTIFY any channel, so a notification is only ever a reason to read:
what the worker does follows from the fenced answer, never a payload. And any login may
LISTEN: the database sends rara_cancel empty, naming no step (docs/least-privilege.md).

NOTIFY is a hint, never the only path: a dropped connection is re-opened with backoff, and on
every (re)connect the lease loop is woken because notifications sent meanwhile are gone. A
silent network partition is caught by a ping every ``ping_seconds`` of quiet.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

import psycopg
import structlog

from rara.worker.retry import TRANSIENT, Backoff

log = structlog.get_logger("rara.worker")

READY, QUEUED, CANCEL, WAITS = "rara_ready", "rara_queued", "rara_cancel", "rara_waits"


class Notifications(Protocol):
    """Where a worker's notifications come from, called with its callbacks and run until
    cancelled: ``listen`` on a connection of its own (``functools.partial(listen, url)``), or
    a worker group's relay of its one listener (``rara.worker.relay``). Returning stops the
    worker, as any of its loops ending does."""

    def __call__(
        self,
        *,
        on_ready: Callable[[str], None],
        on_cancel: Callable[[], None],
        on_connect: Callable[[], None],
        on_waits: Callable[[], None],
        on_queued: Callable[[str], None],
        on_lost: Callable[[], None],
    ) -> Coroutine[Any, Any, None]: ...


async def listen(
    url: str,
    *,
    on_ready: Callable[[str], None],
    on_cancel: Callable[[], None],
    on_connect: Callable[[], None],
    on_waits: Callable[[], None] = lambda: None,
    on_queued: Callable[[str], None] = lambda capability: None,
    on_lost: Callable[[], None] = lambda: None,
    ping_seconds: float = 15.0,
) -> None:
    backoff = Backoff()
    while True:
        try:
            conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
            async with conn:
                await conn.execute(f"LISTEN {READY}")
                await conn.execute(f"LISTEN {QUEUED}")
                await conn.execute(f"LISTEN {CANCEL}")
                await conn.execute(f"LISTEN {WAITS}")
                backoff.reset()
                on_connect()
                while True:
                    async for note in conn.notifies(timeout=ping_seconds):
                        if note.channel == READY:
                            on_ready(note.payload)
                        elif note.channel == QUEUED:
                            on_queued(note.payload)
                        elif note.channel == WAITS:
                            on_waits()
                        elif note.channel == CANCEL:
                            on_cancel()
                    await conn.execute("SELECT 1")  # quiet for a while: is anyone there?
        except TRANSIENT as exc:
            on_lost()
            delay = backoff.next_delay()
            log.warning(
                "listen connection lost, reconnecting", error=str(exc), retry_in=round(delay, 3)
            )
            await asyncio.sleep(delay)
