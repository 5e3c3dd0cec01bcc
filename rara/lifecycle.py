"""How an attempt ends, in one place: success, failure (retry or final), cancel, release, reap.

Each function is one transaction: the fenced step write, then the consequences that must land
with it — dependants unblocked or cancelled, and the run's aggregated status. ``None``/empty
results mean the fence did not match: the caller no longer owns the lease and must write
nothing more for the attempt.

``end_many`` ends many attempts of one worker in one transaction (the worker's completion
batcher): each step is fenced on its own, so a lost lease in a batch affects only that step,
and the runs touched are aggregated once, in run id order, after every step row was written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import class_row, scalar_row
from psycopg.types.json import Jsonb

from rara.pg import runs as run_sql
from rara.pg import steps as step_sql
from rara.pg.queries import amany, aone, sql
from rara.states import AttemptOutcome, StepStatus, check_step_transition

AsyncConn = psycopg.AsyncConnection[Any]


@dataclass(frozen=True, slots=True)
class Ended:
    """A step whose attempt a fenced end matched (step_fail, step_cancel, step_reap_expired):
    its run, key and new status (a legal move from running: checked against rara.states)."""

    id: int
    run_id: int
    key: str
    status: StepStatus

    def __post_init__(self) -> None:
        status = StepStatus(self.status)
        check_step_transition(StepStatus.RUNNING, status)
        object.__setattr__(self, "status", status)


@dataclass(frozen=True, slots=True)
class Completed:
    """A row of step_complete_many."""

    id: int
    run_id: int


@dataclass(frozen=True, slots=True)
class Fence:
    """Who owns an attempt: every write after the lease is conditioned on it."""

    step_id: int
    worker: str
    token: UUID


@dataclass(frozen=True, slots=True)
class Ending:
    """One attempt's end, for ``end_many``, by its outcome: ``SUCCEEDED`` (result, artifact
    manifest), ``FAILED`` or ``TIMED_OUT`` (error, retryable, jitter) or ``CANCELLED``.
    ``run_id`` is the step's run (known from the lease), aggregated in the same transaction."""

    fence: Fence
    run_id: int
    outcome: AttemptOutcome
    result: Any = None
    artifacts: Sequence[Mapping[str, Any]] = ()
    error: Mapping[str, Any] | None = None
    retryable: bool = True
    jitter: float = 0.0

    def __post_init__(self) -> None:
        outcome = AttemptOutcome(self.outcome)
        if outcome not in _ENDINGS:
            raise ValueError(f"an attempt cannot end as {outcome}")
        object.__setattr__(self, "outcome", outcome)


# What an attempt's own end may record (released and lease_expired are not endings of its own).
_ENDINGS = frozenset({AttemptOutcome.SUCCEEDED, AttemptOutcome.FAILED, AttemptOutcome.TIMED_OUT,
                      AttemptOutcome.CANCELLED})


async def end_many(conn: AsyncConn, endings: Sequence[Ending]) -> list[StepStatus | None]:
    """End many attempts (all fenced by one worker) in one transaction.

    Per ending, in order, the step's status after it: ``SUCCEEDED``, ``READY`` (retry after
    backoff), ``FAILED``, ``CANCELLED``, or ``None`` when its fence matched nothing (lease lost:
    nothing was written for that step). Successes are one statement; failures and cancels
    (rare) one each; then the runs are locked in id order (always the last locks taken, see
    run_lock_many) and aggregated by one statement whose snapshot follows the locks. Errors roll
    the whole batch back.
    """
    if not endings:
        return []
    worker = endings[0].fence.worker
    if any(e.fence.worker != worker for e in endings):
        raise ValueError("end_many: every ending must be fenced by the same worker")
    answers: list[StepStatus | None] = [None] * len(endings)
    wins = [i for i, e in enumerate(endings) if e.outcome is AttemptOutcome.SUCCEEDED]
    rest = [i for i, e in enumerate(endings) if e.outcome is not AttemptOutcome.SUCCEEDED]
    run_ids = sorted({e.run_id for e in endings})
    complete = {"worker": worker, "endings": _successes_json(
        [(endings[i].fence, endings[i].result, endings[i].artifacts) for i in wins])}
    if not rest:
        # Only successes (the common case): nothing depends on an answer before the commit, so
        # the whole transaction goes in one round trip (pipeline mode).
        async with conn.pipeline(), conn.transaction():
            cur = conn.cursor(row_factory=scalar_row)  # the first column: the step id
            await cur.execute(sql("step_complete_many"), complete)
            await run_sql.aggregate(conn, run_ids)
        done = set(await cur.fetchall())
        return [StepStatus.SUCCEEDED if e.fence.step_id in done else None for e in endings]
    async with conn.transaction():
        if wins:
            done = set(await amany(conn, "step_complete_many", scalar_row, **complete))
            for i in wins:
                if endings[i].fence.step_id in done:
                    answers[i] = StepStatus.SUCCEEDED
        for i in rest:
            e = endings[i]
            if e.outcome is AttemptOutcome.CANCELLED:
                row = await aone(conn, "step_cancel", class_row(Ended), step_id=e.fence.step_id,
                                 worker=worker, token=e.fence.token)
                answers[i] = None if row is None else row.status
                continue
            row = await aone(conn, "step_fail", class_row(Ended), step_id=e.fence.step_id,
                             worker=worker, token=e.fence.token, error=Jsonb(dict(e.error or {})),
                             retryable=e.retryable, jitter=e.jitter, outcome=e.outcome)
            if row is not None:
                if row.status is StepStatus.FAILED:
                    await step_sql.cancel_dependants(conn, row.run_id, row.key)
                answers[i] = row.status
        await run_sql.aggregate(conn, run_ids)
    return answers


def _successes_json(wins: Sequence[tuple[Fence, Any, Sequence[Mapping[str, Any]]]]) -> str:
    """(fence, result, artifact manifest) of successes as the one JSON array step_complete_many
    reads: one C-encoded ``json.dumps`` for the whole batch (per-element dumping of typed arrays
    was a measured hot spot)."""
    return json.dumps([
        {"id": fence.step_id, "token": str(fence.token), "result": result,
         **({"manifest": list(artifacts)} if artifacts else {})}
        for fence, result, artifacts in wins], allow_nan=False, separators=(",", ":"))


async def complete(
    conn: AsyncConn, fence: Fence, result: Any, artifacts: Sequence[Mapping[str, Any]] = ()
) -> bool:
    """Succeeded: result and artifact manifest together, or nothing (lease lost → False). One
    attempt through the batch statement (the worker's batcher uses ``end_many``)."""
    async with conn.transaction():
        row = await aone(conn, "step_complete_many", class_row(Completed), worker=fence.worker,
                         endings=_successes_json([(fence, result, artifacts)]))
        if row is None:
            return False
        await _refresh_run(conn, row.run_id)
        return True


async def fail(
    conn: AsyncConn,
    fence: Fence,
    error: Mapping[str, Any],
    *,
    retryable: bool,
    jitter: float,
    outcome: AttemptOutcome = AttemptOutcome.FAILED,
) -> StepStatus | None:
    """Failed attempt: 'ready' (retry after backoff) or 'failed' (for good); None = lease lost."""
    async with conn.transaction():
        row = await aone(
            conn,
            "step_fail",
            class_row(Ended),
            step_id=fence.step_id,
            worker=fence.worker,
            token=fence.token,
            error=Jsonb(dict(error)),
            retryable=retryable,
            jitter=jitter,
            outcome=outcome,
        )
        if row is None:
            return None
        if row.status is StepStatus.FAILED:
            await _step_failed_for_good(conn, row.run_id, row.key)
        return row.status


async def cancelled(conn: AsyncConn, fence: Fence) -> bool:
    async with conn.transaction():
        row = await aone(conn, "step_cancel", class_row(Ended), step_id=fence.step_id,
                         worker=fence.worker, token=fence.token)
        if row is None:
            return False
        await _refresh_run(conn, row.run_id)
        return True


async def release(conn: AsyncConn, worker: str, leases: Sequence[tuple[int, UUID]]) -> list[int]:
    """Give leases back on graceful shutdown; returns the step ids released."""
    if not leases:
        return []
    async with conn.transaction():
        return await amany(conn, "step_release_many", scalar_row, worker=worker,
                           step_ids=[s for s, _ in leases], tokens=[t for _, t in leases])


async def reap(conn: AsyncConn, worker: str, *, limit: int,
               jitter: float) -> list[tuple[int, StepStatus]]:
    """Recover expired leases (bounded batch); returns (step id, new status) pairs."""
    async with conn.transaction():
        rows = await amany(conn, "step_reap_expired", class_row(Ended), worker=worker,
                           limit=limit, jitter=jitter)
        # Runs in id order: two reapers locking the same runs (run_lock_many) never wait in a cycle.
        for row in sorted(rows, key=lambda r: r.run_id):
            if row.status is StepStatus.FAILED:
                await _step_failed_for_good(conn, row.run_id, row.key)
        return [(r.id, r.status) for r in rows]


async def _step_failed_for_good(conn: AsyncConn, run_id: int, key: str) -> None:
    await step_sql.cancel_dependants(conn, run_id, key)
    await _refresh_run(conn, run_id)


async def _refresh_run(conn: AsyncConn, run_id: int) -> None:
    await run_sql.aggregate(conn, [run_id])
