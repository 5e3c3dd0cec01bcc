"""Filling the worker's slots (``rara.worker.slots``): the lease loop, and beside it the loop
of the held-back slots.

The lease loop leases in bounded batches (``lease_batch``) into the slots every namespace may
have, after the lane cursors (``rara.worker.lease_cursor``), whenever a slot is free and a
step may be ready: woken by ``rara_ready`` (through ``announced``), by a freed slot, or by the
poll. The poll is NOTIFY's fallback, and long (``listening_poll_seconds``) while the LISTEN
connection is up: every event that makes a step leasable then sends ``rara_ready`` — a step
made ready, and a limit, quota or concurrency key freed (``rara_admission_freed``) — except a
retry's backoff running out, which the loop asks for (``next_available``) after an empty
lease. A lease that took something polls short (``poll_seconds``) once more, so that the empty
lease that asks comes soon; and while the listener is away every poll is short
(docs/lease-protocol.md, "Wake-ups"). The held-back loop (``held_back_slots``) leases only
when a run started (``rara_queued``, through ``queued``) while every other slot is full, and
only steps of namespaces with nothing running here: a team whose first step would otherwise
wait behind another team's backlog.

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
        # The LISTEN connection is up (rara.worker.listener): a notification can be missed only
        # for an event that sends none, so the fallback poll is long. Down until it connects.
        self.listening = False
        # rara_ready was heard since the held-back loop's last poll: a held-back step that a
        # limit, quota or key held may start now, so that loop polls short once.
        self.held_back_heard = False
        slots.on_freed = self._slot_freed

    def _slot_freed(self) -> None:
        self.wake.set()
        if self.queued:
            self.held_back_due.set()

    def wake_all(self) -> None:
        self.wake.set()
        self.held_back_due.set()

    @property
    def poll(self) -> float:
        """The fallback poll's interval now: long while the listener is up, never shorter
        than ``poll_seconds``."""
        s = self.settings
        return max(s.poll_seconds, s.listening_poll_seconds) if self.listening else s.poll_seconds

    def listener_up(self) -> None:
        """The LISTEN connection is (re)connected; what was sent while it was away is gone,
        so the loops look now (the runner wakes them)."""
        self.listening = True

    def listener_down(self) -> None:
        """The LISTEN connection is lost: poll short until it is back, from now (the loops
        sleep their long poll otherwise)."""
        self.listening = False
        self.wake_all()

    def announced(self) -> None:
        """Steps we serve became ready, or a bound holding them back was freed (rara_ready):
        they may sort behind the cursors."""
        self.cursors.announced()
        self.held_back_heard = True
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
            if free <= 0 or not pairs:  # a freed slot or a new capability wakes the loop
                await self._sleep(self.poll)
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
                # When to wake for a step still backing off: asked after an empty lease only.
                # After a short one, the next lease comes soon (the short poll, or a freed
                # slot), comes back empty and asks; asking now would put a round trip between
                # the lease and the start of its handlers. Only an empty lease (an idle
                # worker) waits for the long poll.
                delay = s.poll_seconds if leased else self.poll
                # An arrival announced while the scans from the start were held back
                # (rara.worker.lease_cursor) is looked for as soon as they may be.
                pending = self.cursors.announced_due_in()
                if pending is not None:
                    delay = min(delay, pending)
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
            # The poll: rara_queued's fallback, as for rara_ready (long while listening); short
            # once after a rara_ready, which may have freed a bound a held-back step waits on.
            poll = s.poll_seconds if self.held_back_heard else self.poll
            try:
                async with asyncio.timeout(poll):
                    await self.held_back_due.wait()
            except TimeoutError:
                self.queued = True
                self.held_back_heard = False
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
