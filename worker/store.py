"""The worker's database access: the named queries it runs, over a connection pool.

Why a pool (psycopg_pool) and not one connection per loop: attempts end concurrently (one
short transaction each) while heartbeats, leases and the reaper run beside them; the pool
shares a few connections among all of them, and after a server restart it replaces broken
connections by itself (a connection given back in a bad state is discarded, new ones are made
on demand). So the loops only need to catch ``psycopg.OperationalError`` (``PoolTimeout`` is
one) and retry the statement. The LISTEN connection is separate (``rara.worker.listener``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from rara import lifecycle
from rara.artifacts.ref import ArtifactRef
from rara.context import Checkpoint
from rara.pg.queries import async_queries, fetch_all
from rara.worker.dispatch import LeasedStep

Pool = AsyncConnectionPool[psycopg.AsyncConnection[Any]]
Pairs = Sequence[tuple[str, str]]  # (capability, executor kind)


def make_pool(url: str, size: int) -> Pool:
    return AsyncConnectionPool(url, kwargs={"autocommit": True}, min_size=1, max_size=size,
                               open=False, timeout=10.0, name="rara-worker")


class WorkerStore:
    def __init__(self, pool: Pool, worker: str) -> None:
        self.pool = pool
        self.worker = worker
        self.q = async_queries()

    async def lease(self, pairs: Pairs, limit: int, lease_seconds: float) -> list[LeasedStep]:
        async with self.pool.connection() as conn:
            rows = await fetch_all(self.q.step_lease_routed(
                conn, capabilities=[c for c, _ in pairs], executors=[e for _, e in pairs],
                limit=limit, worker=self.worker, lease_seconds=lease_seconds))
            return [LeasedStep.from_row(r) for r in rows]

    async def next_available(self, pairs: Pairs) -> float | None:
        async with self.pool.connection() as conn:
            value = await self.q.steps_next_available(
                conn, capabilities=[c for c, _ in pairs], executors=[e for _, e in pairs])
            return None if value is None else float(value)

    async def heartbeat(self, leases: Sequence[tuple[int, UUID]],
                        lease_seconds: float) -> dict[int, bool]:
        """Extend leases; answer: step id → cancel requested, for the leases still held."""
        async with self.pool.connection() as conn:
            rows = await fetch_all(self.q.step_heartbeat(
                conn, step_ids=[s for s, _ in leases], tokens=[t for _, t in leases],
                worker=self.worker, lease_seconds=lease_seconds))
            return {r[0]: bool(r[1]) for r in rows}

    async def write_progress(self, items: Sequence[tuple[int, UUID, int, float | None, str,
                                                         Mapping[str, float]]]) -> set[int]:
        """Progress rows (step, token, seq, fraction, message, metrics); the steps still owned."""
        async with self.pool.connection() as conn:
            rows = await fetch_all(self.q.step_progress_write(
                conn, worker=self.worker, step_ids=[i[0] for i in items],
                tokens=[i[1] for i in items], seqs=[i[2] for i in items],
                fractions=[i[3] for i in items], messages=[i[4] for i in items],
                metrics=[Jsonb(dict(i[5])) for i in items]))
            return {r[0] for r in rows}

    async def write_checkpoint(self, step_id: int, token: UUID, seq: int,
                               state: Mapping[str, Any], ref: ArtifactRef | None) -> bool:
        async with self.pool.connection() as conn:
            return bool(await self.q.step_checkpoint_write(
                conn, step_id=step_id, worker=self.worker, token=token, seq=seq,
                state=Jsonb(dict(state)), digest=ref.digest if ref else None,
                size=ref.size if ref else None))

    async def latest_checkpoint(self, step_id: int, attempt: int) -> Checkpoint | None:
        async with self.pool.connection() as conn:
            row = await self.q.step_checkpoint_latest(conn, step_id=step_id, attempt=attempt)
        if row is None:
            return None
        ref = ArtifactRef(row[3], int(row[4])) if row[3] is not None else None
        return Checkpoint(attempt=row[0], seq=row[1], state=row[2], artifact=ref)

    async def inputs(self, run_id: int, keys: Sequence[str]) -> dict[str, ArtifactRef]:
        """``"<step>/<name>"`` for every upstream artifact, and the bare name when unique."""
        async with self.pool.connection() as conn:
            rows = await fetch_all(self.q.step_inputs(conn, run_id=run_id, keys=list(keys)))
        found: dict[str, ArtifactRef] = {}
        bare: dict[str, list[ArtifactRef]] = {}
        for key, name, digest, size, media_type in rows:
            ref = ArtifactRef(digest, int(size), media_type)
            found[f"{key}/{name}"] = ref
            bare.setdefault(name, []).append(ref)
        for name, refs in bare.items():
            if len(refs) == 1 and name not in found:
                found[name] = refs[0]
        return found

    # -- the end of an attempt: rara.lifecycle, one transaction each --------------------------

    async def complete(self, fence: lifecycle.Fence, result: Any,
                       artifacts: Sequence[Mapping[str, Any]]) -> bool:
        async with self.pool.connection() as conn:
            return await lifecycle.complete(conn, fence, result, artifacts)

    async def fail(self, fence: lifecycle.Fence, error: Mapping[str, Any], *, retryable: bool,
                   jitter: float, outcome: str) -> str | None:
        async with self.pool.connection() as conn:
            return await lifecycle.fail(conn, fence, error, retryable=retryable, jitter=jitter,
                                        outcome=outcome)

    async def cancelled(self, fence: lifecycle.Fence) -> bool:
        async with self.pool.connection() as conn:
            return await lifecycle.cancelled(conn, fence)

    async def release(self, leases: Sequence[tuple[int, UUID]]) -> list[int]:
        async with self.pool.connection() as conn:
            return await lifecycle.release(conn, self.worker, leases)

    async def reap(self, limit: int, jitter: float) -> list[tuple[int, str]]:
        async with self.pool.connection() as conn:
            return await lifecycle.reap(conn, self.worker, limit=limit, jitter=jitter)

    # -- the worker's own row -------------------------------------------------------------

    async def register(self, capabilities: Sequence[str]) -> None:
        async with self.pool.connection() as conn:
            await self.q.worker_register(conn, worker=self.worker, capabilities=list(capabilities))

    async def worker_heartbeat(self, capabilities: Sequence[str]) -> None:
        async with self.pool.connection() as conn:
            await self.q.worker_heartbeat(conn, worker=self.worker, capabilities=list(capabilities))

    async def stop(self) -> None:
        async with self.pool.connection() as conn:
            await self.q.worker_stop(conn, worker=self.worker)
