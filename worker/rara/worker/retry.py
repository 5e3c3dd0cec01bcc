"""Riding out database outages: back off, log, try again — never crash the worker.

Only ``psycopg.OperationalError`` (lost connection, server shutting down, pool timeout) is
treated as transient; anything else is a bug and propagates.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import psycopg
import structlog

T = TypeVar("T")
log = structlog.get_logger("rara.worker")

TRANSIENT = (psycopg.OperationalError,)


class Backoff:
    """Exponential backoff with full jitter, 50 ms up to ``cap`` seconds."""

    def __init__(self, cap: float = 5.0) -> None:
        self.cap = cap
        self.failures = 0

    def next_delay(self) -> float:
        self.failures += 1
        return random.uniform(0, min(self.cap, 0.05 * 2 ** self.failures))

    def reset(self) -> None:
        self.failures = 0


async def persist(what: str, fn: Callable[[], Awaitable[T]], *, give_up_after: float) -> T:
    """Run ``fn`` until it succeeds; transient errors are retried for ``give_up_after`` s."""
    backoff = Backoff()
    deadline = time.monotonic() + give_up_after
    while True:
        try:
            return await fn()
        except TRANSIENT as exc:
            if time.monotonic() >= deadline:
                raise
            delay = backoff.next_delay()
            log.warning("database unavailable, retrying", what=what, error=str(exc),
                        retry_in=round(delay, 3))
            await asyncio.sleep(delay)
