"""Keeping the leases the worker holds, and recovering those nobody holds any more.

- The heartbeat: one statement every ``heartbeat_interval`` renews the worker's row and every
  lease of its slots (``rara.worker.slots``); its answer says which leases are still held and
  which attempts were asked to cancel. Without an answer the worker cannot know whether a
  reaper took its steps: an attempt whose lease surely expired is stopped as lost.
- The reaper: every ``reaper_seconds`` expired leases (of any worker) go back to ready.
- The progress writer's period: the latest progress of every attempt, in one statement.

See docs/lease-protocol.md for the protocol these loops keep, outages included.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from uuid import UUID

import structlog

from rara import metrics
from rara.worker.progress import ProgressWriter
from rara.worker.retry import (
    TRANSIENT,
    Backoff,
    database_absent,
    heartbeat_delay,
    heartbeat_within,
    outage_grace,
)
from rara.worker.settings import WorkerSettings
from rara.worker.slots import Slots
from rara.worker.store import WorkerStore
from rara.worker.vocabulary import AttemptState

log = structlog.get_logger("rara.worker")


class LeaseKeeping:
    def __init__(
        self,
        settings: WorkerSettings,
        store: WorkerStore,
        slots: Slots,
        progress: ProgressWriter,
        capabilities: Callable[[], list[str]],
        registered: Callable[[], Awaitable[None]],
        stopping: asyncio.Event,
    ) -> None:
        self.settings = settings
        self.store = store
        self.slots = slots
        self.progress = progress
        self.capabilities = capabilities  # the capabilities served now
        self.registered = registered  # the worker's row rewritten when its endpoints changed
        self.stopping = stopping
        self.log = log.bind(worker=settings.id)
        # Set for a heartbeat now: what this worker serves changed (an executor came or went;
        # runs start only once the database lists it), or a cancel was announced (the answer
        # says whether it was asked), or the listener lost the database.
        self.heartbeat_due = asyncio.Event()

    def cancel_announced(self) -> None:
        # A hint, never an order: any login may NOTIFY. Ask the database now, in the fenced
        # heartbeat, whose answer says which of this worker's attempts were asked to stop (the
        # notification names no step: any login may LISTEN); a forged one costs one heartbeat.
        if self.slots.attempts:
            self.heartbeat_due.set()

    async def heartbeat_loop(self) -> None:
        """Every ``heartbeat_interval`` from the last one's send (so a slow answer does not
        push the next one later: a lease lasts from the send that confirmed it); after a
        failure about every second instead (``rara.worker.retry.heartbeat_delay``), so that an
        outage shorter than the lease is answered before any lease it holds expires."""
        s = self.settings
        wait = s.heartbeat_interval * random.uniform(0.9, 1.0)
        unreached_since: float | None = None  # the first failed try since the last answer
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self.heartbeat_due.wait()
            self.heartbeat_due.clear()
            tried = time.monotonic()
            try:
                sent = await self.heartbeat(
                    heartbeat_within(time.monotonic(), self.horizon(), s.lease_seconds)
                )
                await self.registered()
                wait = max(
                    0.0, sent + s.heartbeat_interval * random.uniform(0.9, 1.0) - time.monotonic()
                )
                unreached_since = None
            except TRANSIENT as exc:
                if unreached_since is None:
                    unreached_since = tried
                if database_absent(exc) and tried < unreached_since + s.lease_seconds:
                    self.ride_outage(tried + outage_grace(s.lease_seconds))
                wait = heartbeat_delay(time.monotonic(), self.horizon(), s.lease_seconds)
                self.log.warning(
                    "heartbeat failed, retrying", error=str(exc), retry_in=round(wait, 3)
                )
            # Without an answer we cannot know whether a reaper took our steps: once the lease
            # surely expired, stop as if lost rather than risk two owners doing the work.
            now = time.monotonic()
            for st in list(self.slots.attempts.values()):
                if now > st.lease_valid_until:
                    st.lose()

    def ride_outage(self, until: float) -> None:
        """A heartbeat try found the database away (``database_absent``): its return comes
        after the try was sent, and the database keeps every lease confirmed before it alive
        until ``outage_grace`` after it (rara_lease_alive), so the attempts held are surely
        held until ``until`` (the try's send plus that grace) whatever their expiry: they
        keep running through an outage shorter than the lease instead of being stopped at
        their horizon. Only while the database has been unreachable for less than a lease
        (the caller): after a longer outage the attempts are stopped at their horizon and the
        reaper recovers their steps. The proof: docs/lease-protocol.md, "Outages"."""
        for st in self.slots.attempts.values():
            if st.holds_lease and st.lease_valid_until < until:
                st.lease_valid_until = until

    def horizon(self) -> float:
        """The earliest local horizon of the leases heartbeats still extend (``inf``: none)."""
        return min(
            (st.lease_valid_until for st in self.slots.attempts.values() if st.holds_lease),
            default=float("inf"),
        )

    async def heartbeat(self, within: float) -> float:
        """One statement: the worker's row and every lease it holds. Which leases is read when
        the statement is sent (``holds_lease``): none stopped as lost or given up. Returns
        when it was sent (monotonic)."""
        lease_seconds = self.settings.lease_seconds
        sent: list[AttemptState] = []
        sent_at = 0.0

        def held_now() -> list[tuple[int, UUID]]:
            nonlocal sent_at
            sent[:] = [st for st in self.slots.attempts.values() if st.holds_lease]
            sent_at = time.monotonic()
            return [(st.fence.step_id, st.fence.token) for st in sent]

        answer = await self.store.heartbeat_all(
            self.capabilities(), held_now, lease_seconds, within=within
        )
        for st in sent:
            if st.step.id not in answer:
                st.lose()
            else:
                # The database's expiry is its now() + lease, now() being no earlier than this.
                st.lease_valid_until = sent_at + lease_seconds
                if answer[st.step.id]:
                    st.request_cancel()
        return sent_at

    async def reaper_loop(self) -> None:
        s = self.settings
        backoff = Backoff()
        while not self.stopping.is_set():
            try:
                reaped = await self.store.reap(s.reaper_batch, s.jitter)
                backoff.reset()
                if reaped:
                    metrics.LEASE_EXPIRIES.inc(len(reaped))
                    self.log.info("reaped expired leases", steps=[r[0] for r in reaped])
                if len(reaped) == s.reaper_batch:
                    continue  # more may be waiting
            except TRANSIENT as exc:
                # Sooner than the next pass: reaping what expired during an outage is what
                # frees the steps of workers that did not survive it.
                delay = min(backoff.next_delay(), s.reaper_seconds)
                self.log.warning("reaper failed", error=str(exc), retry_in=round(delay, 3))
                await asyncio.sleep(delay)
                continue
            await asyncio.sleep(s.reaper_seconds * random.uniform(0.8, 1.2))

    async def progress_loop(self) -> None:
        period = 1.0 / self.settings.progress_per_second
        while True:
            await asyncio.sleep(period)
            try:
                await self.progress.flush(list(self.slots.attempts.values()))
            except TRANSIENT as exc:
                self.log.warning("progress write failed", error=str(exc))
