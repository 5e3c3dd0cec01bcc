"""The worker: its rooms, composed, and their supervision.

The rooms: the slots (``rara.worker.slots``: the attempts running now), the leasing that fills
them (``rara.worker.leasing``: the lease loop with its cursors, and the held-back slots' loop),
the keeping of their leases (``rara.worker.lease_keeping``: heartbeat, reaper, progress), the
step cache (``rara.worker.cache``), the listener (``rara.worker.listener``) and the firing of
waits (``rara.worker.waits``); every statement goes through ``rara.worker.store``.

Hot path, per step: leased in batches (``lease_batch``, checkpoint and upstream inputs folded
into the lease), run, and its end handed to the completion batcher, which writes every end that
is ready in one transaction; the leases and those flushes have connections of their own
(``WorkerStore``). Metrics (``rara.metrics``) are labelled by capability only.

Stopping is an event, not a cancel: ``stop()`` (SIGTERM/SIGINT) ends leasing, running attempts
get ``shutdown_grace_seconds`` to finish, the rest are stopped and their leases released (back
to ready at once), and the worker's row is marked stopped. Side loops are watched with
``asyncio.wait(FIRST_COMPLETED)``: one that dies unexpectedly stops the worker rather than
leaving it half alive. SIGKILL needs nothing here: lease expiry plus any worker's reaper is
the recovery.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Coroutine, Sequence
from typing import Any

import structlog

from rara.artifacts import open_store
from rara.cache import CacheKey
from rara.step_output import install as capture_step_output
from rara.worker import cache
from rara.worker.attempt import supervise
from rara.worker.attempt_io import AttemptIO
from rara.worker.batcher import CompletionBatcher
from rara.worker.context import WorkerStepContext
from rara.worker.dispatch import Executor
from rara.worker.lease_keeping import LeaseKeeping
from rara.worker.leasing import Leasing
from rara.worker.listener import Notifications, listen
from rara.worker.log_shipping import LogShipper
from rara.worker.progress import ProgressWriter
from rara.worker.retry import persist
from rara.worker.settings import WorkerSettings
from rara.worker.slots import Slots
from rara.worker.store import WorkerStore, make_pool
from rara.worker.vocabulary import AttemptEnd, AttemptState
from rara.worker.waits import fire_loop

log = structlog.get_logger("rara.worker")


class Worker:
    def __init__(
        self,
        settings: WorkerSettings,
        executors: Sequence[Executor],
        url: str,
        notifications: Notifications | None = None,
    ) -> None:
        self.settings = settings
        self.url = url
        # A LISTEN connection of its own, or a worker group's relay of the group's one
        # (rara.worker.group): PostgreSQL wakes every listening backend at each NOTIFY.
        self.notifications = notifications or functools.partial(listen, url)
        self.executors = {e.kind: e for e in executors}
        self.stopping = asyncio.Event()
        self.aborting = asyncio.Event()  # second signal: skip the grace period
        self.waits_due = asyncio.Event()  # NOTIFY rara_waits: a wait with a time began
        self.pool = make_pool(url, settings.concurrency + 4)
        self.store = WorkerStore(self.pool, settings.id, beat_url=url)
        self.batcher = CompletionBatcher(
            self.store,
            max_batch=settings.completion_batch,
            window=settings.completion_window_seconds,
        )
        self.slots = Slots(
            settings.id,
            settings.concurrency,
            settings.held_back_slots,
            settings.lease_seconds,
            self._run_attempt,
        )
        self.attempts = self.slots.attempts
        self.progress = ProgressWriter(self.store, self.attempts)
        self.logs = LogShipper(self.store, self.attempts)
        self.io = AttemptIO(self.store, self.batcher, self.progress, settings, self.logs)
        self.leasing = Leasing(settings, self.store, self.slots, lambda: self.pairs, self.stopping)
        self.keeping = LeaseKeeping(
            settings,
            self.store,
            self.slots,
            self.progress,
            lambda: self.capabilities,
            self._register_if_changed,
            self.stopping,
        )
        # A directory or s3://… (rara.artifacts.location): artifact_root when set, else
        # RARA_ARTIFACTS, else .rara/artifacts.
        self.artifacts = open_store(
            settings.artifact_root if "artifact_root" in settings.model_fields_set else None
        )
        self.log = log.bind(worker=settings.id)
        self._registered_endpoints: list[dict[str, Any]] | None = None

    @property
    def pairs(self) -> list[tuple[str, str]]:
        """(capability, executor kind) served now: asked of the executors each time, since a
        remote executor's capabilities change as its endpoints come and go."""
        wanted = self.settings.capabilities
        return sorted(
            (cap, e.kind)
            for e in self.executors.values()
            for cap in e.capabilities()
            if wanted is None or cap in wanted
        )

    @property
    def capabilities(self) -> list[str]:
        return sorted({cap for cap, _ in self.pairs})

    @property
    def endpoints(self) -> list[dict[str, Any]]:
        """The remote executors this worker reaches (rara_workers.executors)."""
        return [d for e in self.executors.values() for d in e.describe()]

    async def _register(self) -> None:
        endpoints = self.endpoints
        await self.store.register(self.capabilities, endpoints)
        self._registered_endpoints = endpoints

    async def _register_if_changed(self) -> None:
        # An endpoint came, went or changed: the heartbeat carries capabilities only, so the
        # Fleet page's record is written again (rarely: on changes).
        if self.endpoints != self._registered_endpoints:
            await self._register()

    def capabilities_changed(self) -> None:
        """An executor's capabilities changed: heartbeat now, and lease what is new."""
        self.keeping.heartbeat_due.set()
        self.leasing.wake.set()

    def stop(self) -> None:
        """Begin a graceful stop (a second call skips the remaining grace)."""
        if self.stopping.is_set():
            self.aborting.set()
        self.stopping.set()
        self.slots.stopping = True
        self.leasing.wake_all()

    async def run(self) -> None:
        s = self.settings
        await self.pool.open(wait=False)
        capture_step_output()  # (after logs.configure: its handler writes to the terminal)
        try:
            await persist("register", self._register, give_up_after=float("inf"))
            if not self.pairs:
                self.log.warning("no capabilities served (pass --handlers); only reaping")
            self.log.info(
                "worker started",
                capabilities=self.capabilities,
                concurrency=s.concurrency,
                lease_seconds=s.lease_seconds,
            )
            leasing = [self._spawn(self.leasing.lease_loop())]
            if s.held_back_slots:
                leasing.append(self._spawn(self.leasing.held_back_loop()))
            side = [
                *leasing,
                self._spawn(self.keeping.heartbeat_loop()),
                self._spawn(self.keeping.reaper_loop()),
                self._spawn(
                    fire_loop(self.store.fire_waits, self.waits_due, self.stopping, s.waits_batch)
                ),
                self._spawn(self.keeping.progress_loop()),
                self._spawn(self.logs.ship_loop()),
            ]
            if s.listen:
                side.append(
                    self._spawn(
                        self.notifications(
                            on_ready=self._on_ready,
                            on_cancel=self.keeping.cancel_announced,
                            on_connect=self._on_connect,
                            on_waits=self.waits_due.set,
                            on_queued=self._on_queued,
                            on_lost=self._on_lost,
                        )
                    )
                )
            stop_waiter = self._spawn(self.stopping.wait())
            done, _ = await asyncio.wait([stop_waiter, *side], return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is not stop_waiter and not task.cancelled() and task.exception():
                    self.log.error("worker loop died; stopping", exc_info=task.exception())
            if not self.stopping.is_set():  # a loop died: stop as if signalled (once)
                self.stop()
            self.leasing.wake.set()
            await asyncio.wait(leasing, timeout=15.0)  # no new attempts
            await self.slots.drain(s.shutdown_grace_seconds, self.aborting)
            for task in side:
                task.cancel()
            await asyncio.gather(*side, return_exceptions=True)
        finally:
            try:
                await asyncio.shield(persist("stop", self.store.stop, give_up_after=5.0))
            except Exception as exc:  # the row ages out by its heartbeat anyway
                self.log.warning("could not mark the worker stopped", error=str(exc))
            await self.store.close()
            await self.pool.close()
            self.log.info("worker stopped")

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        return asyncio.get_running_loop().create_task(coro)

    # -- notifications (rara.worker.listener): hints to look, never orders -------------------

    def _on_connect(self) -> None:
        # Notifications sent while the listener was away are gone: look now; and poll long.
        self.leasing.listener_up()
        self.leasing.wake.set()
        self.waits_due.set()
        self.leasing.queued_maybe()

    def _on_lost(self) -> None:
        self.keeping.heartbeat_due.set()  # a try at once: it finds when the database went away
        self.leasing.listener_down()  # poll short until the listener is back

    def _on_ready(self, capability: str) -> None:
        if capability in self.capabilities:
            self.leasing.announced()

    def _on_queued(self, capability: str | None) -> None:
        """A run started (None: maybe one did) with a step of ``capability``."""
        if capability is None or capability in self.capabilities:
            self.leasing.queued_maybe()

    # -- one attempt ------------------------------------------------------------------------

    def _run_attempt(self, state: AttemptState) -> Coroutine[Any, Any, AttemptEnd]:
        """The attempt's coroutine: its handler, supervised, or first a cached step's shortcuts
        (rara.worker.cache). Returned, not awaited here: one coroutine frame less to resume at
        each of a step's waits."""
        step = state.step
        key = cache.key_of(step)
        if key is not None and state.stop_reason is None:
            return self._run_cached(state, key)
        ctx = WorkerStepContext(state, self.io, self.artifacts)
        return supervise(state, self.executors[step.executor], ctx, self.io)

    async def _run_cached(self, state: AttemptState, key: CacheKey) -> AttemptEnd:
        hit = await cache.reuse(state, key, self.io, self.artifacts)
        if hit is not None:
            return hit
        state.cache_entry = cache.entry_of(state.step, key)
        deferred = await cache.claim(state, self.store)
        if deferred is not None:
            return deferred
        ctx = WorkerStepContext(state, self.io, self.artifacts)
        return await supervise(state, self.executors[state.step.executor], ctx, self.io)
