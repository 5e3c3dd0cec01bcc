"""Every worker fires the fleet's due waits (docs/waits.md): a wait step holds no lease and no
slot, so nothing but its time says when it ends, and whoever reads that time first ends it.

A pass is one call of ``rara_waits_fire`` (SKIP LOCKED: any number of workers at once, each
wait ended once), which answers the earliest due time left; the loop sleeps until then, or
until NOTIFY ``rara_waits`` says a wait with a time began (it may be earlier), and at most
``MAX_SLEEP_SECONDS`` (a lost notification, a clock step). 10,000 runs waiting cost nothing
between their times: no pass runs, and a signal or decision ends its wait in its own statement.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

from rara import metrics
from rara.pg.waits import Fired
from rara.worker.retry import TRANSIENT, Backoff

log = structlog.get_logger("rara.worker")

MAX_SLEEP_SECONDS = 60.0
CHANNEL = "rara_waits"


def sleep_for(fired: Fired, batch: int) -> float:
    """Seconds until the next pass: none when the batch came back full (more are due), else
    until the earliest due time by the database's clock (capped)."""
    if fired.fired >= batch:
        return 0.0
    if fired.next_due is None:
        return MAX_SLEEP_SECONDS
    return min(MAX_SLEEP_SECONDS, max(0.0, (fired.next_due - fired.db_now).total_seconds()))


async def fire_loop(
    fire: Callable[[int], Awaitable[Fired]],
    wake: asyncio.Event,
    stopping: asyncio.Event,
    batch: int,
) -> None:
    """Fire due waits until ``stopping``; ``wake`` (set on NOTIFY rara_waits and on every
    reconnect of the listener) cuts a sleep short."""
    backoff = Backoff()
    while not stopping.is_set():
        wake.clear()
        try:
            fired = await fire(batch)
            backoff.reset()
        except TRANSIENT as exc:
            delay = backoff.next_delay()
            log.warning("firing waits failed", error=str(exc), retry_in=round(delay, 3))
            await asyncio.sleep(delay)
            continue
        if fired.fired:
            metrics.WAITS_FIRED.inc(fired.fired)
            log.info("waits ended by their time", ended=fired.fired)
        delay = sleep_for(fired, batch)
        if delay > 0:
            waiter = asyncio.ensure_future(wake.wait())
            stopper = asyncio.ensure_future(stopping.wait())
            await asyncio.wait({waiter, stopper}, timeout=delay, return_when="FIRST_COMPLETED")
            waiter.cancel()
            stopper.cancel()
