"""Isolated from the chaos smoke: a progress write that fails transiently (a PostgreSQL
restart, a broken pooled connection) burns its ``seq``.

worker/progress.py ``ProgressWriter.flush`` takes ``next(st.progress_seq)`` while building
the batch; when ``write_progress`` raises a transient error it puts the *report* back for the
next round but not its seq, so the retry is written as seq n+1. If the failed statement did
not commit, the attempt's events read 1..n-1, n+1 — a gap (the chaos smoke's "progress seq
without gaps" check); if it did commit and only the answer was lost, the same report lands
twice under two seqs instead of being absorbed by ``ON CONFLICT`` (which is what the seq is
for: "a replayed seq is one row"). Expected: the retry reuses the seq it failed with.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import psycopg

from rara.worker.progress import ProgressWriter
from rara.worker.vocabulary import AttemptState, Fence, LeasedStep


class FlakyStore:
    """``write_progress`` fails once (nothing written), then records what it is given."""

    def __init__(self) -> None:
        self.failures = 1
        self.written: list[int] = []

    async def write_progress(self, items: list[tuple[Any, ...]]) -> set[int]:
        if self.failures:
            self.failures -= 1
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        self.written += [item[2] for item in items]
        return {item[0] for item in items}


def _attempt() -> AttemptState:
    step = LeasedStep(
        id=7,
        run_id=1,
        key="s",
        capability="x.y@1",
        executor="inprocess",
        payload={},
        attempt=1,
        max_attempts=3,
        lease_token=uuid4(),
        lease_expires_at=datetime.now(UTC),
        timeout_ms=None,
        heartbeat_timeout_ms=None,
        depends_on=[],
        run_input={},
        leased_at=datetime.now(UTC),
    )
    return AttemptState(
        step=step, fence=Fence(7, "w", step.lease_token), loop=asyncio.get_running_loop()
    )


async def test_a_retried_progress_write_keeps_its_seq() -> None:
    state = _attempt()
    store = FlakyStore()
    writer = ProgressWriter(store, {7: state})  # type: ignore[arg-type]
    state.pending_progress = (0.5, "half", {})
    with contextlib.suppress(psycopg.OperationalError):  # the loop logs it, tries again
        await writer.flush([state])
    assert state.pending_progress is not None  # the report was kept for the retry ...
    await writer.flush([state])
    assert store.written == [1], f"... but it was written as seq {store.written}, not 1"


class SlowFlakyStore(FlakyStore):
    """The first write is slow and then fails (a PostgreSQL restart mid-statement); the ones
    after it succeed at once."""

    def __init__(self) -> None:
        super().__init__()
        self.first_sent = asyncio.Event()

    async def write_progress(self, items: list[tuple[Any, ...]]) -> set[int]:
        if self.failures:
            self.first_sent.set()
            await asyncio.sleep(0.05)
        return await super().write_progress(items)


async def test_the_last_flush_does_not_overtake_a_failing_one() -> None:
    """Found by the restart smoke (seqs [1, 2, 4]): the periodic flush writes seq n and is in
    flight; the handler reports again and ends, and the supervisor's last flush takes n+1 and
    commits; then seq n fails, and nobody writes it any more. Flushes must be serialised, so
    the last one re-uses the failed seq for the newest report."""
    state = _attempt()
    store = SlowFlakyStore()
    writer = ProgressWriter(store, {7: state})  # type: ignore[arg-type]
    state.pending_progress = (0.5, "half", {})
    periodic = asyncio.ensure_future(writer.flush([state]))
    await store.first_sent.wait()
    state.pending_progress = (1.0, "done", {})  # reported while the first write is in flight
    await writer.flush([state])  # the supervisor's last flush before the end
    with contextlib.suppress(psycopg.OperationalError):
        await periodic
    assert store.written == [1], f"events written as seqs {store.written}, expected [1]"
