"""Riding out database outages: back off, log, try again — never crash the worker.

Only ``psycopg.OperationalError`` (lost connection, server shutting down, pool timeout) is
treated as transient; anything else is a bug and propagates.

The cadence, in one place (docs/operations.md): every loop that reconnects — the listener,
the lease loop, the reaper and the writes ``persist`` retries — backs off from 50 ms to at
most ``RECONNECT_CAP`` seconds between tries (the pool's own reconnects are bound alike:
``rara.pg.reconnect``), so a worker finds the database within about that long of its return, however
long the outage was. Failed heartbeats are retried about every ``HEARTBEAT_RETRY`` seconds
(``heartbeat_delay``): a lease is only kept through an outage if some heartbeat lands before
it expires.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import psycopg
import structlog

from rara.pg.reconnect import RECONNECT_SECONDS

T = TypeVar("T")
log = structlog.get_logger("rara.worker")

TRANSIENT = (psycopg.OperationalError,)

# The longest wait between two tries to reach the database, in any of the worker's loops (the
# pools' own reconnects are bound the same: rara.pg.reconnect). An exponential backoff without
# a cap waits longer the longer the outage lasted: after 20 s down the next try could come
# 10 s after the database is back, and leases expire meanwhile.
RECONNECT_CAP = RECONNECT_SECONDS

# Between failed heartbeats (jittered ±20%), and how long before a lease's local horizon the
# last try must be sent: a try takes a round trip, and an answer after the horizon is too late
# (the attempt has been stopped as lost by then, rara.worker.attempt).
HEARTBEAT_RETRY = 1.0
HEARTBEAT_MARGIN = 1.0
# The shortest wait for one heartbeat try's answer (heartbeat_within).
HEARTBEAT_TRY_MIN = 1.0


# A failed try's error that proves the database was not accepting writes while the try was
# out: nothing listened at its address (refused; a Unix socket missing) or the server was
# shutting down. Then the database's return (rara_db_return) comes after the try was sent,
# and a lease it holds stays alive until outage_grace() after that return (rara_lease_alive).
# A lost connection, a timeout or a server starting up proves nothing of the kind.
_ABSENT = (
    "Connection refused",
    "No such file or directory",
    "the database system is shutting down",
)


def database_absent(exc: BaseException) -> bool:
    """Whether ``exc`` (a failed try) proves the database was not accepting writes."""
    return any(mark in str(exc) for mark in _ABSENT)


def outage_grace(lease_seconds: float) -> float:
    """How long after the database's return a lease last confirmed before it stays alive
    whatever its expiry: a third of the lease (the default heartbeat interval) plus 2 s, the
    whole lease when shorter. The same formula as rara_lease_alive (db/functions/lease.sql)."""
    return min(lease_seconds / 3 + 2.0, lease_seconds)


class Backoff:
    """Exponential backoff with full jitter, 50 ms up to ``cap`` seconds."""

    def __init__(self, cap: float = RECONNECT_CAP) -> None:
        self.cap = cap
        self.failures = 0

    def next_delay(self) -> float:
        self.failures += 1
        return random.uniform(0, min(self.cap, 0.05 * 2 ** min(self.failures, 30)))

    def reset(self) -> None:
        self.failures = 0


def heartbeat_delay(now: float, horizon: float, lease_seconds: float) -> float:
    """How long to wait after a failed heartbeat: about ``HEARTBEAT_RETRY``, but not past the
    earliest held lease's local ``horizon`` (monotonic) less a margin (a tenth of the lease
    when that is less), so the last try before it still has time for its answer. Inside the
    margin, tries come a quarter of a second apart (the margin, if shorter) until the horizon
    passes and the attempts are stopped as lost."""
    margin = min(HEARTBEAT_MARGIN, lease_seconds / 10)
    delay = HEARTBEAT_RETRY * random.uniform(0.8, 1.2)
    return max(min(0.25, margin), min(delay, horizon - margin - now))


def heartbeat_within(now: float, horizon: float, lease_seconds: float) -> float:
    """How long one heartbeat try waits for its answer before it is abandoned with its
    connection: until the earliest held lease's local ``horizon`` (monotonic; ``inf`` when the
    worker holds none, then the lease), ``HEARTBEAT_TRY_MIN`` at least. An answer after the
    horizon comes too late (those attempts are stopped as lost by then); one before it keeps
    every lease, however slow. A try is not cut shorter: on a busy node (a 2-core kind node
    during a `helm upgrade`, the executor training beside its worker) answers took over 5 s,
    and tries cut at 5 s, each on a new connection, never got one while every lease of the pod
    expired. A server that vanished is found by the connection's TCP settings instead
    (``rara.pg.reconnect.dead_peer_settings``), which a slow but live server passes."""
    if horizon == float("inf"):
        return lease_seconds
    return max(HEARTBEAT_TRY_MIN, horizon - now)


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
            log.warning(
                "database unavailable, retrying",
                what=what,
                error=str(exc),
                retry_in=round(delay, 3),
            )
            await asyncio.sleep(delay)
