"""The worker: lease loop, listener, heartbeats, reaper and progress writer around attempts.

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
import contextlib
import random
import time
from collections.abc import Coroutine, Sequence
from typing import Any
from uuid import UUID

import structlog

from rara import metrics
from rara.artifacts import open_store
from rara.cache import CacheKey
from rara.states import AttemptOutcome, StepStatus
from rara.worker import cache
from rara.worker.attempt import supervise
from rara.worker.attempt_io import AttemptIO
from rara.worker.batcher import CompletionBatcher
from rara.worker.context import WorkerStepContext
from rara.worker.dispatch import Executor
from rara.worker.lease_cursor import LeaseCursors
from rara.worker.listener import listen
from rara.worker.progress import ProgressWriter
from rara.worker.retry import (
    TRANSIENT,
    Backoff,
    database_absent,
    heartbeat_delay,
    heartbeat_within,
    outage_grace,
    persist,
)
from rara.worker.settings import WorkerSettings
from rara.worker.store import WorkerStore, make_pool
from rara.worker.vocabulary import (
    ABANDONED,
    LOST,
    AttemptEnd,
    AttemptState,
    Ending,
    Fence,
    LeasedStep,
    StopReason,
    Unwritten,
)
from rara.worker.waits import fire_loop

log = structlog.get_logger("rara.worker")


class Worker:
    def __init__(self, settings: WorkerSettings, executors: Sequence[Executor], url: str) -> None:
        self.settings = settings
        self.url = url
        self.executors = {e.kind: e for e in executors}
        self.attempts: dict[int, AttemptState] = {}
        self.stopping = asyncio.Event()
        self.aborting = asyncio.Event()  # second signal: skip the grace period
        self.wake = asyncio.Event()
        self.waits_due = asyncio.Event()  # NOTIFY rara_waits: a wait with a time began
        # Held-back slots (``held_back_slots``): ``queued`` since a run started (NOTIFY
        # rara_queued) that no lease into them has looked for yet; ``held_back_due`` wakes
        # their loop, on that or on a slot's change; how many run in them; and a lease into
        # them is never in flight while unheld leases are given back (``_release_unheld``).
        self.queued = False
        self.held_back_due = asyncio.Event()
        self.held_back_running = 0
        self.held_back_leasing = asyncio.Lock()
        self.unanswered = False  # a lease failed: it may have committed with its answer lost
        # Set for a heartbeat now: what this worker serves changed (an executor came or went;
        # runs start only once the database lists it), or a cancel was announced (the answer
        # says whether it was asked).
        self.heartbeat_due = asyncio.Event()
        self.cursors = LeaseCursors(settings.lease_rescan_seconds)
        self.pool = make_pool(url, settings.concurrency + 4)
        self.store = WorkerStore(self.pool, settings.id, own_url=url)
        self.batcher = CompletionBatcher(
            self.store,
            max_batch=settings.completion_batch,
            window=settings.completion_window_seconds,
        )
        self.metrics = _Metrics()
        self.progress = ProgressWriter(self.store, self.attempts)
        self.io = AttemptIO(self.store, self.batcher, self.progress, settings)
        # A directory or s3://… (rara.artifacts.location): artifact_root when set, else
        # RARA_ARTIFACTS, else .rara/artifacts.
        self.artifacts = open_store(
            settings.artifact_root if "artifact_root" in settings.model_fields_set else None
        )
        self.log = log.bind(worker=settings.id)
        self._supervisors: set[asyncio.Task[AttemptEnd]] = set()
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

    def stop(self) -> None:
        """Begin a graceful stop (a second call skips the remaining grace)."""
        if self.stopping.is_set():
            self.aborting.set()
        self.stopping.set()
        self.wake.set()
        self.held_back_due.set()

    async def run(self) -> None:
        s = self.settings
        await self.pool.open(wait=False)
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
            leasing = [self._spawn(self._lease_loop())]
            if s.held_back_slots:
                leasing.append(self._spawn(self._held_back_loop()))
            side = [
                *leasing,
                self._spawn(self._heartbeat_loop()),
                self._spawn(self._reaper_loop()),
                self._spawn(
                    fire_loop(self.store.fire_waits, self.waits_due, self.stopping, s.waits_batch)
                ),
                self._spawn(self._progress_loop()),
            ]
            if s.listen:
                side.append(
                    self._spawn(
                        listen(
                            self.url,
                            on_ready=self._on_ready,
                            on_cancel=self._on_cancel,
                            on_connect=self._on_connect,
                            on_waits=self.waits_due.set,
                            on_queued=self._on_queued,
                            # a heartbeat try at once: it finds when the database went away
                            on_lost=self.heartbeat_due.set,
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
            self.wake.set()
            await asyncio.wait(leasing, timeout=15.0)  # no new attempts
            await self._drain()
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

    async def _drain(self) -> None:
        """Grace for running attempts, then stop and release the rest."""
        if self._supervisors:
            self.log.info(
                "stopping: waiting for running attempts",
                running=len(self._supervisors),
                grace=self.settings.shutdown_grace_seconds,
            )
            abort = self._spawn(self.aborting.wait())
            all_done = self._spawn(asyncio.wait(set(self._supervisors)))
            await asyncio.wait(
                {abort, all_done},
                timeout=self.settings.shutdown_grace_seconds,
                return_when=asyncio.FIRST_COMPLETED,
            )
            abort.cancel()
            all_done.cancel()
        for state in list(self.attempts.values()):
            state.stop_reason = state.stop_reason or StopReason.SHUTDOWN
            state.poke()
        if self._supervisors:
            await asyncio.wait(set(self._supervisors))

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        return asyncio.get_running_loop().create_task(coro)

    # -- notifications --------------------------------------------------------------------

    def _on_connect(self) -> None:
        # Notifications sent while the listener was away are gone: look now.
        self.wake.set()
        self.waits_due.set()
        self._on_queued(None)

    def _on_ready(self, capability: str) -> None:
        if capability in self.capabilities:
            self.cursors.announced()  # it may sort behind the cursors: look from the start
            self.wake.set()

    def _on_queued(self, capability: str | None) -> None:
        """A run started (None: maybe one did) with a step of ``capability``."""
        if not self.settings.held_back_slots:
            return
        if capability is None or capability in self.capabilities:
            self.queued = True
            self.held_back_due.set()

    def _on_cancel(self) -> None:
        # A hint, never an order: any login may NOTIFY. Ask the database now, in the fenced
        # heartbeat, whose answer says which of this worker's attempts were asked to stop (the
        # notification names no step: any login may LISTEN); a forged one costs one heartbeat.
        if self.attempts:
            self.heartbeat_due.set()

    # -- leasing --------------------------------------------------------------------------

    async def _sleep(self, seconds: float) -> None:
        """Sleep until woken, stopped or ``seconds`` passed."""
        if seconds > 0 and not self.wake.is_set() and not self.stopping.is_set():
            waiter = self._spawn(self.wake.wait())
            await asyncio.wait({waiter}, timeout=seconds)
            waiter.cancel()

    async def _lease_loop(self) -> None:
        s = self.settings
        backoff = Backoff()
        while not self.stopping.is_set():
            if self.unanswered:
                try:
                    await self._release_unheld()
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
            free = s.concurrency - s.held_back_slots - self._running_for_everyone()
            pairs = self.pairs
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
                self._start(step, sent)
            if self.queued:  # the held-back slots' turn, if these filled the others
                self.held_back_due.set()
            if leased:
                self.metrics.leased(leased, len(self.attempts))
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

    async def _release_unheld(self) -> None:
        """A lease that failed may have committed with its answer lost (the connection dropped
        between the commit and the reply): its steps run nowhere and would wait out a whole
        lease for the reaper, at the cost of an attempt. Give back whatever is leased in this
        worker's name that it does not run. Called by the lease loop, between its leases, with
        no lease into the held-back slots in flight: every lease the worker holds is in
        ``self.attempts``."""
        async with self.held_back_leasing:
            released = await self.store.release_unheld(list(self.attempts))
        if released:
            self.log.warning("gave back leases whose answer was lost", steps=released)

    def _running_for_everyone(self) -> int:
        """Attempts running here in the slots every namespace may have."""
        return len(self.attempts) - self.held_back_running

    async def _held_back_loop(self) -> None:
        """Leases into the held-back slots (``held_back_slots``): when a run started and every
        other slot is full, the steps of the namespaces with nothing running here — a team
        whose first step would otherwise wait for a slot behind another team's backlog. Beside
        the lease loop, on a connection of its own, so that it never waits for a batch being
        leased; each range from its start (no cursors: the lanes it serves are new here)."""
        s = self.settings
        backoff = Backoff()
        while not self.stopping.is_set():
            try:
                async with asyncio.timeout(s.poll_seconds):
                    await self.held_back_due.wait()
            except TimeoutError:
                self.queued = True  # the poll: rara_queued's fallback, as for rara_ready
            self.held_back_due.clear()
            spare = s.held_back_slots - self.held_back_running
            full = self._running_for_everyone() >= s.concurrency - s.held_back_slots
            pairs = self.pairs
            # Until the other slots are full, the lease loop's fair share serves a newcomer
            # too; ``queued`` stays set, and the loop looks again when one fills or frees.
            if not (self.queued and full and spare > 0 and pairs) or self.stopping.is_set():
                continue
            self.queued = False  # before the query, as the wake-up: one arriving is not lost
            passing = sorted({st.step.namespace for st in self.attempts.values()})
            sent = time.monotonic()
            try:
                async with self.held_back_leasing:
                    leased = await self.store.lease_held_back(
                        pairs, spare, s.lease_seconds, None, passing
                    )
                    for step in leased:
                        self._start(step, sent, held_back=True)
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
                self.metrics.leased(leased, len(self.attempts))

    async def _lease(self, pairs: list[tuple[str, str]], limit: int) -> list[LeasedStep]:
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

    def _start(self, step: LeasedStep, sent: float, *, held_back: bool = False) -> None:
        fence = Fence(step.id, self.settings.id, step.lease_token)
        state = AttemptState(
            step=step,
            fence=fence,
            loop=asyncio.get_running_loop(),
            lease_valid_until=sent + self.settings.lease_seconds,
        )
        if step.timeout_ms is not None:
            state.deadline = state.started + step.timeout_ms / 1000
        if self.stopping.is_set():  # leased as the stop began: give it straight back
            state.stop_reason = StopReason.SHUTDOWN
        self.attempts[step.id] = state
        self.held_back_running += held_back
        task = self._spawn(self._run_attempt(state))
        self._supervisors.add(task)

        def finished(t: asyncio.Task[AttemptEnd]) -> None:
            self._supervisors.discard(t)
            # Only its own entry: a lost attempt still winding down must not drop the state of
            # a newer attempt of the same step that this worker leased meanwhile.
            if self.attempts.get(step.id) is state:
                del self.attempts[step.id]
            self.held_back_running -= held_back
            self.wake.set()  # a slot is free
            if self.queued:
                self.held_back_due.set()
            if not t.cancelled() and t.exception() is not None:
                self.log.error("attempt supervisor failed", step_id=step.id, exc_info=t.exception())
            else:
                self.metrics.ended(
                    step.capability,
                    ABANDONED if t.cancelled() else t.result(),
                    time.monotonic() - state.started,
                    len(self.attempts),
                )

        task.add_done_callback(finished)

    async def _run_attempt(self, state: AttemptState) -> AttemptEnd:
        step = state.step
        key = cache.key_of(step)
        if key is not None and state.stop_reason is None:
            hit = await self._reuse(state, key)
            if hit is not None:
                return hit
            state.cache_entry = cache.entry_of(step, key)
            deferred = await self._claim(state)
            if deferred is not None:
                return deferred
        executor = self.executors[step.executor]
        ctx = WorkerStepContext(state, self.io, self.artifacts)
        return await supervise(state, executor, ctx, self.io)

    async def _reuse(self, state: AttemptState, key: CacheKey) -> AttemptEnd | None:
        """A step with ``cache:`` ended from its verified entry (rara.worker.cache), or None:
        it runs. A failed look-up is a miss: the cache saves work, it never costs a step."""
        step = state.step
        try:
            entry = await cache.look_up(self.store, self.artifacts, step, key)
        except Exception:
            self.log.warning("cache look-up failed; the step runs", step_id=step.id, exc_info=True)
            return None
        if entry is None:
            return None
        ending = Ending(
            state.fence,
            step.run_id,
            AttemptOutcome.SUCCEEDED,
            result=entry.result,
            artifacts=list(entry.manifest),
            cache=cache.entry_of(step, key),
            reused_from=cache.reused_from(entry),
        )
        try:
            status = await self.io.end(ending)
        except Exception:
            self.log.exception("could not write a cache hit; its lease will expire")
            return ABANDONED
        finally:
            state.ended = True
        return LOST if status is None else AttemptEnd(AttemptOutcome.SUCCEEDED, status)

    async def _claim(self, state: AttemptState) -> AttemptEnd | None:
        """Single flight for a miss (rara_step_cache_claim): None, compute it; else the end
        written: released until another step computing the same key has ended, or lost."""
        assert state.cache_entry is not None
        fence = state.fence
        try:
            claimed = await cache.claim(self.store, fence, state.cache_entry)
        except Exception:
            self.log.warning(
                "cache claim failed; the step runs", step_id=fence.step_id, exc_info=True
            )
            return None
        if claimed:
            return None
        state.ended = True
        return LOST if claimed is None else AttemptEnd(AttemptOutcome.RELEASED, StepStatus.READY)

    # -- keeping leases -------------------------------------------------------------------

    def capabilities_changed(self) -> None:
        """An executor's capabilities changed: heartbeat now, and lease what is new."""
        self.heartbeat_due.set()
        self.wake.set()

    async def _heartbeat_loop(self) -> None:
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
                sent = await self._heartbeat(
                    heartbeat_within(time.monotonic(), self._horizon(), s.lease_seconds)
                )
                if self.endpoints != self._registered_endpoints:
                    # An endpoint came, went or changed: the heartbeat carries capabilities
                    # only, so the Fleet page's record is written again (rarely: on changes).
                    await self._register()
                wait = max(
                    0.0, sent + s.heartbeat_interval * random.uniform(0.9, 1.0) - time.monotonic()
                )
                unreached_since = None
            except TRANSIENT as exc:
                if unreached_since is None:
                    unreached_since = tried
                if database_absent(exc) and tried < unreached_since + s.lease_seconds:
                    self._ride_outage(tried + outage_grace(s.lease_seconds))
                wait = heartbeat_delay(time.monotonic(), self._horizon(), s.lease_seconds)
                self.log.warning(
                    "heartbeat failed, retrying", error=str(exc), retry_in=round(wait, 3)
                )
            # Without an answer we cannot know whether a reaper took our steps: once the lease
            # surely expired, stop as if lost rather than risk two owners doing the work.
            now = time.monotonic()
            for st in list(self.attempts.values()):
                if now > st.lease_valid_until:
                    st.lose()

    def _ride_outage(self, until: float) -> None:
        """A heartbeat try found the database away (``database_absent``): its return comes
        after the try was sent, and the database keeps every lease confirmed before it alive
        until ``outage_grace`` after it (rara_lease_alive), so the attempts held are surely
        held until ``until`` (the try's send plus that grace) whatever their expiry: they
        keep running through an outage shorter than the lease instead of being stopped at
        their horizon. Only while the database has been unreachable for less than a lease
        (the caller): after a longer outage the attempts are stopped at their horizon and the
        reaper recovers their steps. The proof: docs/lease-protocol.md, "Outages"."""
        for st in self.attempts.values():
            if st.holds_lease and st.lease_valid_until < until:
                st.lease_valid_until = until

    def _horizon(self) -> float:
        """The earliest local horizon of the leases heartbeats still extend (``inf``: none)."""
        return min(
            (st.lease_valid_until for st in self.attempts.values() if st.holds_lease),
            default=float("inf"),
        )

    async def _heartbeat(self, within: float) -> float:
        """One statement: the worker's row and every lease it holds. Which leases is read when
        the statement is sent (``holds_lease``): none stopped as lost or given up. Returns
        when it was sent (monotonic)."""
        s = self.settings
        sent: list[AttemptState] = []
        sent_at = 0.0

        def held_now() -> list[tuple[int, UUID]]:
            nonlocal sent_at
            sent[:] = [st for st in self.attempts.values() if st.holds_lease]
            sent_at = time.monotonic()
            return [(st.fence.step_id, st.fence.token) for st in sent]

        answer = await self.store.heartbeat_all(
            self.capabilities, held_now, s.lease_seconds, within=within
        )
        for st in sent:
            if st.step.id not in answer:
                st.lose()
            else:
                # The database's expiry is its now() + lease, now() being no earlier than this.
                st.lease_valid_until = sent_at + s.lease_seconds
                if answer[st.step.id]:
                    st.request_cancel()
        return sent_at

    async def _reaper_loop(self) -> None:
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

    async def _progress_loop(self) -> None:
        period = 1.0 / self.settings.progress_per_second
        while True:
            await asyncio.sleep(period)
            try:
                await self.progress.flush(list(self.attempts.values()))
            except TRANSIENT as exc:
                self.log.warning("progress write failed", error=str(exc))


class _Metrics:
    """The worker's Prometheus metrics (``rara.metrics``), labelled by capability only; the
    labelled children are cached so the hot path does no label lookups."""

    def __init__(self) -> None:
        self._leases: dict[str, Any] = {}
        self._completions: dict[tuple[str, str], Any] = {}
        self._retries: dict[str, Any] = {}
        self._durations: dict[str, Any] = {}

    def leased(self, steps: Sequence[LeasedStep], running: int) -> None:
        counts: dict[str, int] = {}
        for step in steps:
            counts[step.capability] = counts.get(step.capability, 0) + 1
        for capability, n in counts.items():
            child = self._leases.get(capability)
            if child is None:
                child = self._leases[capability] = metrics.LEASES.labels(capability)
            child.inc(n)
        metrics.RUNNING.set(running)

    def ended(self, capability: str, end: AttemptEnd, seconds: float, running: int) -> None:
        """``end``: what the supervisor wrote; its outcome labels the completion."""
        outcome = end.outcome.value
        key = (capability, outcome)
        child = self._completions.get(key)
        if child is None:
            child = self._completions[key] = metrics.COMPLETIONS.labels(capability, outcome)
        child.inc()
        if end.retried:
            retry = self._retries.get(capability)
            if retry is None:
                retry = self._retries[capability] = metrics.RETRIES.labels(capability)
            retry.inc()
        elif end.outcome is Unwritten.LEASE_LOST:
            metrics.LEASES_LOST.inc()
        duration = self._durations.get(capability)
        if duration is None:
            duration = self._durations[capability] = metrics.STEP_DURATION.labels(capability)
        duration.observe(seconds)
        metrics.RUNNING.set(running)
