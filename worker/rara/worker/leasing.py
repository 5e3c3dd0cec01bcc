"""Filling the worker's slots (``rara.worker.slots``): the lease loop, and beside it the loop
of the held-back slots.

The lease loop leases in bounded batches (``lease_batch``) into the slots every namespace may
have, after the lane cursors (``rara.worker.lease_cursor``), whenever a slot is free and a
step may be ready: woken by ``rara_ready`` (through ``announced``), by a freed slot, or by the
poll. The held-back loop (``held_back_slots``) leases only when a run started (``rara_queued``,
through ``queued``) while every other slot is full, and only steps of namespaces with nothing
running here: a team whose first step would otherwise wait behind another team's backlog.

A lease whose answer was lost (the connection dropped between its commit and its reply)
leaves steps leased in this worker's name that run nowhere: the lease loop gives them back
(``Leasing.release_unheld``) before it leases again, with no held-back lease in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import structlog

from rara.worker.lease_cursor import LeaseCursors, Pair
from rara.worker.retry import TRANSIENT, Backoff
from rara.worker.settings import WorkerSettings
from rara.worker.slots import Slots
from rara.worker.store import WorkerStore
from rara.worker.vocabulary import LeasedStep

log = structlog.get_logger("rara.worker")


class Leasing:
    def __init__(
        self,
        settings: WorkerSettings,
        store: WorkerStore,
        slots: Slots,
        pairs: Callable[[], list[Pair]],
        stopping: asyncio.Event,
    ) -> None:
        self.settings = settings
        self.store = store
        self.slots = slots
        self.pairs = pairs  # (capability, executor) served now
        self.stopping = stopping
        self.log = log.bind(worker=settings.id)
        self.cursors = LeaseCursors(settings.lease_rescan_seconds)
        self.wake = asyncio.Event()  # the lease loop's: a step may be ready, or a slot freed
        # Held-back slots: ``queued`` since a run started (NOTIFY rara_queued) that no lease
        # into them has looked for yet; ``held_back_due`` wakes their loop, on that or on a
        # slot's change; and a lease into them is never in flight while unheld leases are
        # given back (``Leasing.release_unheld``).
        self.queued = False
        self.held_back_due = asyncio.Event()
        self.held_back_leasing = asyncio.Lock()
        self.unanswered = False  # a lease failed: it may have committed with its answer lost
        slots.on_freed = self._slot_freed

    def _slot_freed(self) -> None:
        self.wake.set()
        if self.queued:
            self.held_back_due.set()

    def wake_all(self) -> None:
        self.wake.set()
        self.held_back_due.set()

    def announced(self) -> None:
        """Steps we serve became ready (rara_ready): they may sort behind the cursors."""
        self.cursors.announced()
        self.wake.set()

    def queued_maybe(self) -> None:
        """A run started with a step we serve (or maybe did, after a reconnect)."""
        if self.settings.held_back_slots:
            self.queued = True
            self.held_back_due.set()

    async def _sleep(self, seconds: float) -> None:
        """Sleep until woken, stopped or ``seconds`` passed."""
        if seconds > 0 and not self.wake.is_set() and not self.stopping.is_set():
            # (no task per sleep: the wait itself, bounded)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    await self.wake.wait()

    async def lease_loop(self) -> None:
        s = self.settings
        slots = self.slots
        backoff = Backoff()
        while not self.stopping.is_set():
            if self.unanswered:
                try:
                    await self.release_unheld()
                    self.unanswered = False
                except TRANSIENT as exc:
                    delay = backoff.next_delay()
                    self.log.warning(
                        "could not give back unheld leases, retrying",
                        error=str(exc),
                        retry_in=round(delay, 3),
                    )
                    await asyncio.sleep(delay)
                    continue
            free = slots.free_for_everyone()
            pairs = self.pairs()
            if free <= 0 or not pairs:
                await self._sleep(s.poll_seconds)
                self.wake.clear()
                continue
            self.wake.clear()  # before the query: a NOTIFY arriving meanwhile is not lost
            # Lease in bounded batches: with many free slots the next lease overlaps the
            # running attempts' completions instead of waiting for all of them.
            limit = min(free, s.lease_batch)
            sent = time.monotonic()
            try:
                leased = await self._lease(pairs, limit)
                backoff.reset()
            except TRANSIENT as exc:
                self.unanswered = True
                delay = backoff.next_delay()
                self.log.warning("lease failed, retrying", error=str(exc), retry_in=round(delay, 3))
                await asyncio.sleep(delay)
                continue
            for step in leased:  # start them before asking anything else of the database
                slots.start(step, sent)
            if self.queued:  # the held-back slots' turn, if these filled the others
                self.held_back_due.set()
            if leased:
                slots.metrics.leased(leased)
            if len(leased) < limit:  # the queue is empty for us: wait for a wake-up or the poll
                delay = s.poll_seconds
                # When to wake for a step still backing off: asked after an empty lease only.
                # After a short one the attempts just started end soon and wake this loop (a
                # slot is free), whose next lease comes back empty and asks; asking now would
                # put a round trip between the lease and the start of its handlers.
                if not leased:
                    try:
                        soon = await self.store.next_available(pairs)
                        if soon is not None and soon > 0:
                            delay = min(delay, soon)
                    except TRANSIENT as exc:
                        self.log.warning("could not ask for the next retry time", error=str(exc))
                await self._sleep(delay)

    async def _lease(self, pairs: list[Pair], limit: int) -> list[LeasedStep]:
        """Lease after the cursors, or from the start of the ranges when that is due
        (rara.worker.lease_cursor). A short answer after the cursors means the queue past them
        is empty; what may wait behind them is found by the next scan from the start."""
        cursors = self.cursors
        from_start = cursors.due()
        began = time.monotonic()
        leased = await self.store.lease(
            pairs, limit, self.settings.lease_seconds, cursors.after(pairs, from_start=from_start)
        )
        if from_start:
            cursors.scanned_from_start(began, time.monotonic() - began)
        cursors.advance(leased)
        return leased

    async def release_unheld(self) -> None:
        """A lease that failed may have committed with its answer lost (the connection dropped
        between the commit and the reply): its steps run nowhere and would wait out a whole
        lease for the reaper, at the cost of an attempt. Give back whatever is leased in this
        worker's name that it does not run. Called by the lease loop, between its leases, with
        no lease into the held-back slots in flight: every lease the worker holds is in
        ``slots.attempts``."""
        async with self.held_back_leasing:
            released = await self.store.release_unheld(list(self.slots.attempts))
        if released:
            self.log.warning("gave back leases whose answer was lost", steps=released)

    async def held_back_loop(self) -> None:
        """Leases into the held-back slots: when a run started and every other slot is full,
        the steps of the namespaces with nothing running here. Beside the lease loop, on
        another of the pool's connections, so that it never waits for a batch being leased;
        each range from its start (no cursors: the lanes it serves are new here)."""
        s = self.settings
        slots = self.slots
        backoff = Backoff()
        while not self.stopping.is_set():
            try:
                async with asyncio.timeout(s.poll_seconds):
                    await self.held_back_due.wait()
            except TimeoutError:
                self.queued = True  # the poll: rara_queued's fallback, as for rara_ready
            self.held_back_due.clear()
            spare = s.held_back_slots - slots.held_back_running
            full = slots.free_for_everyone() <= 0
            pairs = self.pairs()
            # Until the other slots are full, the lease loop's fair share serves a newcomer
            # too; ``queued`` stays set, and the loop looks again when one fills or frees.
            if not (self.queued and full and spare > 0 and pairs) or self.stopping.is_set():
                continue
            self.queued = False  # before the query, as the wake-up: one arriving is not lost
            passing = sorted({st.step.namespace for st in slots.attempts.values()})
            sent = time.monotonic()
            try:
                async with self.held_back_leasing:
                    leased = await self.store.lease_held_back(
                        pairs, spare, s.lease_seconds, None, passing
                    )
                    for step in leased:
                        slots.start(step, sent, held_back=True)
                backoff.reset()
            except TRANSIENT as exc:
                self.queued = True  # still to look for
                self.unanswered = True  # given back by the lease loop
                self.wake.set()
                delay = backoff.next_delay()
                self.log.warning(
                    "held-back lease failed, retrying", error=str(exc), retry_in=round(delay, 3)
                )
                await asyncio.sleep(delay)
                continue
            if leased:
                slots.metrics.leased(leased)
