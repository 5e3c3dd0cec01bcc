"""The one home of every fenced write of an attempt: lease, heartbeat, progress, log chunks,
checkpoint, cache claim, end (success, failure, cancel), release and reap — the statements of
db/queries/lease.sql (and the worker's of cache.sql and step_logs.sql), here and nowhere else,
with the rows they answer decoded (``LEASED``, from ``rara.worker.lease_row``: a row of
step_lease as a ``LeasedStep``). Production and tests take the same path: the module's
functions run on a connection, one transaction each (``end_many``, ``release``, ``reap``,
``lease``), and ``WorkerStore`` runs them on the worker's connections. The types they take and give
(``LeasedStep``, ``Fence``, ``Ending``) are the worker's words: ``rara.worker.vocabulary``.

Every write after the lease is conditioned on its ``Fence`` (id, leased_by, lease_token,
status = running); an empty or ``None`` answer means the fence matched nothing: the caller no
longer owns the lease and must write nothing more for the attempt. An end lands with its
consequences in one transaction: dependants unblocked (or, after a final failure, cancelled)
and the run's step counts moved, which ends the run when its steps are all terminal.

``end_many`` ends many attempts of one worker in one transaction (the completion batcher):
each step is fenced on its own, so a lost lease in a batch affects only that step, and the runs
touched are counted once, in run id order, after every step row was written. Nothing here
scans a run's steps: the cost of an end is the same in a run of one step or of 100,000
(migration 0006, bench/run_size.py).

The connections these run on, and why each: ``rara.worker.connections``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import class_row, scalar_row
from psycopg.types.json import Jsonb

from rara.artifacts.ref import ArtifactRef
from rara.pg import cache as cache_sql
from rara.pg import steps as step_sql
from rara.pg import waits as wait_sql
from rara.pg.queries import amany, avalue, sql
from rara.pg.waits import Fired
from rara.states import AttemptOutcome, StepStatus, check_step_transition
from rara.worker.connections import HOT_PATH_SESSION as HOT_PATH_SESSION
from rara.worker.connections import AsyncConn, OwnConnection, Pool
from rara.worker.connections import make_pool as make_pool
from rara.worker.lease_row import LEASED as LEASED
from rara.worker.vocabulary import Ending, Fence, LeasedStep

Pairs = Sequence[tuple[str, str]]  # (capability, executor kind)
Cursors = Mapping[str, Sequence[Any] | None]  # the lease cursors' parameters (LeaseCursors.after)
Leases = Sequence[tuple[int, UUID]]  # (step id, lease token)


async def end_many(conn: AsyncConn, endings: Sequence[Ending]) -> list[StepStatus | None]:
    """End many attempts (all fenced by one worker) in one transaction, one round trip.

    Per ending, in order, the step's status after it: ``SUCCEEDED``, ``READY`` (retry after
    backoff), ``FAILED``, ``CANCELLED``, or ``None`` when its fence matched nothing (lease lost:
    nothing was written for that step). One call of ``rara_step_end_many`` (step_end_many)
    writes the failures and cancels (rare) with the cancels they cascade to, then the
    successes, then counts everything that ended in the runs' step counts: the run rows are
    the last locks taken, in id order. Errors roll the whole batch back.
    """
    if not endings:
        return []
    worker = endings[0].fence.worker
    if any(e.fence.worker != worker for e in endings):
        raise ValueError("end_many: every ending must be fenced by the same worker")
    successes = _successes_json([e for e in endings if e.outcome is AttemptOutcome.SUCCEEDED])
    others = json.dumps(
        [
            {
                "id": e.fence.step_id,
                "token": str(e.fence.token),
                "outcome": e.outcome.value,
                "error": dict(e.error or {}),
                "retryable": e.retryable,
                "jitter": e.jitter,
            }
            for e in endings
            if e.outcome is not AttemptOutcome.SUCCEEDED
        ],
        allow_nan=False,
    )
    # Nothing depends on an answer before the commit: the transaction goes in one round trip
    # (pipeline mode).
    async with conn.pipeline(), conn.transaction():
        cur = conn.cursor()  # (id, status) tuples: no object per step on the hot path
        await cur.execute(
            sql("step_end_many"), {"worker": worker, "successes": successes, "others": others}
        )
    ended = {step_id: _END_STATUS[status] for step_id, status in await cur.fetchall()}
    return [ended.get(e.fence.step_id) for e in endings]


def _end_statuses() -> dict[str, StepStatus]:
    """What an end leaves a running step as, by its name in the database: each a legal move
    from running, checked once here (rara.states) instead of per row."""
    ends = (StepStatus.SUCCEEDED, StepStatus.READY, StepStatus.FAILED, StepStatus.CANCELLED)
    for status in ends:
        check_step_transition(StepStatus.RUNNING, status)
    return {status.value: status for status in ends}


_END_STATUS = _end_statuses()


def _successes_json(wins: Sequence[Ending]) -> str:
    """Successes (fence, result, artifact manifest, reads, and for a cached step its entry or
    where it was reused from) as the one JSON array step_end_many reads: one C-encoded
    ``json.dumps`` for the whole batch (per-element dumping of typed arrays was a measured hot
    spot)."""
    return json.dumps(
        [
            {
                "id": e.fence.step_id,
                "token": str(e.fence.token),
                "result": e.result,
                **({"manifest": list(e.artifacts)} if e.artifacts else {}),
                **({"reads": list(e.reads)} if e.reads else {}),
                **({"cache": dict(e.cache)} if e.cache is not None else {}),
                **({"reused_from": dict(e.reused_from)} if e.reused_from is not None else {}),
            }
            for e in wins
        ],
        allow_nan=False,
        separators=(",", ":"),
    )


async def lease(
    conn: AsyncConn,
    worker: str,
    pairs: Pairs,
    limit: int,
    lease_seconds: float,
    after: Cursors | None = None,
    passing: Sequence[str] = (),
) -> list[LeasedStep]:
    """Lease up to ``limit`` steps of ``pairs`` (step_lease); ``after``: the pairs with their
    lane cursors (``LeaseCursors.after``), None to scan every range from the start;
    ``passing``: namespaces whose steps this lease passes by."""
    if after is None:  # NULL arrays: unnest pads them with NULLs
        after = {
            "capabilities": [c for c, _ in pairs],
            "executors": [e for _, e in pairs],
            "after_namespaces": None,
            "after_ranks": None,
            "after_ats": None,
            "after_ids": None,
        }
    async with conn.cursor(row_factory=LEASED) as cur:
        await cur.execute(
            sql("step_lease"),
            {
                "limit": limit,
                "worker": worker,
                "lease_seconds": lease_seconds,
                "except_namespaces": list(passing) or None,
                **after,
            },
        )
        return await cur.fetchall()


async def release(conn: AsyncConn, worker: str, leases: Sequence[tuple[int, UUID]]) -> list[int]:
    """Give leases back on graceful shutdown; returns the step ids released."""
    if not leases:
        return []
    async with conn.transaction():
        return await amany(
            conn,
            "step_release_many",
            scalar_row,
            worker=worker,
            step_ids=[s for s, _ in leases],
            tokens=[t for _, t in leases],
        )


async def reap(
    conn: AsyncConn, worker: str, *, limit: int, jitter: float
) -> list[tuple[int, StepStatus]]:
    """Recover expired leases (bounded batch; their cascades and run counts in the same
    transaction); returns (step id, new status) pairs."""
    rows = await amany(
        conn, "step_reap_expired", class_row(Ended), worker=worker, limit=limit, jitter=jitter
    )
    return [(r.id, r.status) for r in rows]


@dataclass(frozen=True, slots=True)
class Ended:
    """A step whose attempt an end matched (step_end_many, step_reap_expired) and its new
    status (a legal move from running: checked against rara.states)."""

    id: int
    status: StepStatus

    def __post_init__(self) -> None:
        status = StepStatus(self.status)
        check_step_transition(StepStatus.RUNNING, status)
        object.__setattr__(self, "status", status)


@dataclass(frozen=True, slots=True)
class HeldLease:
    """A row of ``step_heartbeat``: a lease still held, and whether cancel was asked."""

    id: int
    cancel_requested: bool


class WorkerStore:
    """The module's fenced writes (and the worker's own row) on the worker's pool
    (``rara.worker.connections``): a connection checked out per statement."""

    def __init__(self, pool: Pool, worker: str, beat_url: str | None = None) -> None:
        self.pool = pool
        self.worker = worker
        # Renewing held leases must not wait on the pool's reconnect back-off after an outage:
        # while the worker holds leases the heartbeat has a connection of its own, re-opened
        # at once; holding none, it gives that back and beats on the pool, so a worker at rest
        # keeps two connections (``rara.worker.connections``).
        self._beat = OwnConnection(beat_url) if beat_url else None

    async def lease(
        self, pairs: Pairs, limit: int, lease_seconds: float, after: Cursors | None = None
    ) -> list[LeasedStep]:
        async with self.pool.connection() as conn:
            return await lease(conn, self.worker, pairs, limit, lease_seconds, after)

    async def lease_held_back(
        self,
        pairs: Pairs,
        limit: int,
        lease_seconds: float,
        after: Cursors | None,
        passing: Sequence[str],
    ) -> list[LeasedStep]:
        """``lease`` into held-back slots, passing by ``passing``'s namespaces: beside the
        lease loop's, on another of the pool's connections."""
        async with self.pool.connection() as conn:
            return await lease(conn, self.worker, pairs, limit, lease_seconds, after, passing)

    async def next_available(self, pairs: Pairs) -> float | None:
        async with self.pool.connection() as conn:
            return await step_sql.next_available(conn, list(pairs))

    async def heartbeat_all(
        self,
        capabilities: Sequence[str],
        leases: Callable[[], Leases],
        lease_seconds: float,
        *,
        within: float | None = None,
    ) -> dict[int, bool]:
        """The worker's row and every lease it holds, in one statement. Answer: step id →
        cancel requested, for the leases still held (a lease missing from it is lost).

        ``leases()`` is asked once a connection is at hand, just before the statement is sent:
        a list read before a wait for a connection could name attempts given up meanwhile.
        One try takes ``within`` seconds at most, the wait for a connection included (the
        caller's ``heartbeat_within``: until the earliest lease's horizon); one still without an
        answer then is abandoned with its connection and fails as ``OperationalError``, so the
        caller tries again on a new one.
        """
        beat = asyncio.ensure_future(
            self._checked_out_heartbeat(capabilities, leases, lease_seconds)
        )
        try:
            done, _ = await asyncio.wait({beat}, timeout=within)
        except asyncio.CancelledError:
            beat.cancel()  # the worker stops: the try must not outlive it (and its connection)
            raise
        if not done:
            # Not awaited: a cancelled query may take seconds to unwind (psycopg asks the
            # server to cancel it); its connection is closed as it does.
            beat.cancel()
            beat.add_done_callback(lambda t: t.cancelled() or t.exception())
            raise psycopg.OperationalError(f"no heartbeat answer within {within:.1f} s")
        return beat.result()

    async def _checked_out_heartbeat(
        self, capabilities: Sequence[str], leases: Callable[[], Leases], lease_seconds: float
    ) -> dict[int, bool]:
        if self._beat is not None:
            if leases():
                conn = await self._beat.get()
                try:
                    return await self._heartbeat(conn, capabilities, leases(), lease_seconds)
                except BaseException:
                    self._beat.forget(conn)
                    await conn.close()
                    raise
            await self._beat.release()
        conn = await self.pool.getconn()
        try:
            answer = await self._heartbeat(conn, capabilities, leases(), lease_seconds)
        except BaseException:
            await conn.close()
            await self.pool.putconn(conn)
            raise
        await self.pool.putconn(conn)
        return answer

    async def close(self) -> None:
        """The heartbeat's own connection, if open (the pool is its owner's to close)."""
        if self._beat is not None:
            await self._beat.close()

    async def _heartbeat(
        self, conn: AsyncConn, capabilities: Sequence[str], leases: Leases, lease_seconds: float
    ) -> dict[int, bool]:
        held = await amany(
            conn,
            "step_heartbeat",
            class_row(HeldLease),
            worker=self.worker,
            capabilities=list(capabilities),
            step_ids=[s for s, _ in leases],
            tokens=[t for _, t in leases],
            lease_seconds=lease_seconds,
        )
        return {r.id: r.cancel_requested for r in held}

    async def write_progress(
        self, items: Sequence[tuple[int, UUID, int, float | None, str, Mapping[str, float]]]
    ) -> set[int]:
        """Progress rows (step, token, seq, fraction, message, metrics); the steps still owned."""
        async with self.pool.connection() as conn:
            owned = await amany(
                conn,
                "step_progress_many",
                scalar_row,
                worker=self.worker,
                step_ids=[i[0] for i in items],
                tokens=[i[1] for i in items],
                seqs=[i[2] for i in items],
                fractions=[i[3] for i in items],
                messages=[i[4] for i in items],
                metrics=[Jsonb(dict(i[5])) for i in items],
            )
            return {int(r) for r in owned}

    async def write_logs(self, items: Sequence[tuple[int, UUID, int, str, int]]) -> set[int]:
        """Log chunks (step, token, seq, body, bytes dropped before it); the steps still
        owned (rara.worker.log_shipping)."""
        async with self.pool.connection() as conn:
            owned = await amany(
                conn,
                "step_log_many",
                scalar_row,
                worker=self.worker,
                step_ids=[i[0] for i in items],
                tokens=[i[1] for i in items],
                seqs=[i[2] for i in items],
                bodies=[i[3] for i in items],
                dropped=[i[4] for i in items],
            )
            return {int(r) for r in owned}

    async def write_checkpoint(
        self, step_id: int, token: UUID, seq: int, state: Mapping[str, Any], ref: ArtifactRef | None
    ) -> bool:
        async with self.pool.connection() as conn:
            return bool(
                await avalue(
                    conn,
                    "step_checkpoint",
                    bool,
                    step_id=step_id,
                    worker=self.worker,
                    token=token,
                    seq=seq,
                    state=Jsonb(dict(state)),
                    digest=ref.digest if ref else None,
                    size=ref.size if ref else None,
                )
            )

    # -- the end of an attempt: one transaction each ---------------------------------------

    async def end_many(self, endings: Sequence[Ending]) -> list[StepStatus | None]:
        """``end_many``: the completion batcher's flush."""
        async with self.pool.connection() as conn:
            return await end_many(conn, endings)

    async def release(self, leases: Sequence[tuple[int, UUID]]) -> list[int]:
        async with self.pool.connection() as conn:
            return await release(conn, self.worker, leases)

    async def release_unheld(self, held: Sequence[int]) -> list[int]:
        """Give back the leases in this worker's name that it does not hold (``held``: the
        steps it runs): those of a lease whose answer was lost. Returns their step ids."""
        async with self.pool.connection() as conn:
            return await amany(
                conn, "step_release_unheld", scalar_row, worker=self.worker, held=list(held)
            )

    async def reap(self, limit: int, jitter: float) -> list[tuple[int, StepStatus]]:
        async with self.pool.connection() as conn:
            return await reap(conn, self.worker, limit=limit, jitter=jitter)

    # -- the step cache (rara.worker.cache) ---------------------------------------------

    async def claim_cache(self, fence: Fence, entry: Mapping[str, Any]) -> bool | None:
        """Single flight for a cache miss (cache_claim), fenced like every write of an attempt:
        True, compute it; False, another running step computes the key and this lease was
        given back; None, the lease is lost."""
        async with self.pool.connection() as conn:
            return await cache_sql.aclaim(conn, fence.worker, fence.step_id, fence.token, entry)

    async def find_cache_entry(
        self, base: str, upstream: Mapping[str, str], namespace: str, capability: str
    ) -> cache_sql.CacheEntry | None:
        async with self.pool.connection() as conn:
            return await cache_sql.afind(
                conn, base, upstream, namespace=namespace, capability=capability
            )

    async def drop_cache_entries(self, keys: Sequence[str]) -> None:
        async with self.pool.connection() as conn:
            await cache_sql.adrop(conn, keys)

    async def fire_waits(self, limit: int) -> Fired:
        """End the fleet's due waits (rara.worker.waits), at most ``limit``."""
        async with self.pool.connection() as conn:
            return await wait_sql.fire(conn, limit)

    # -- the worker's own row -------------------------------------------------------------

    async def register(
        self, capabilities: Sequence[str], executors: Sequence[dict[str, Any]] = ()
    ) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                sql("worker_register"),
                {
                    "worker": self.worker,
                    "capabilities": list(capabilities),
                    "executors": Jsonb(list(executors)),
                },
            )

    async def stop(self) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(sql("worker_stop"), {"worker": self.worker})
