"""Writing what handlers report: progress, coalesced, batched and rate-limited.

Progress: ``ctx.progress()`` only stores the latest state on the attempt; every
1/``progress_per_second`` s one statement writes the latest state of every attempt that
reported (so ≤ 5 rows/s per attempt by default), and the supervisor flushes once more before
the attempt's end. Each row gets the next per-attempt ``seq``; the statement is fenced per
attempt and attempts it does not return have lost their lease.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from rara.worker.retry import TRANSIENT
from rara.worker.store import WorkerStore
from rara.worker.vocabulary import AttemptState


class ProgressWriter:
    def __init__(self, store: WorkerStore, attempts: Mapping[int, AttemptState]) -> None:
        self.store = store
        self.attempts = attempts
        # A seq whose write failed transiently may or may not have committed: the next write
        # of that attempt reuses it (the statement keeps the newest state of a replayed seq),
        # so the attempt's events have no gap and no report is stored twice.
        self._unconfirmed: dict[tuple[int, int], int] = {}
        # One flush at a time: the supervisor's last flush before an attempt's end must not
        # overtake a periodic one still in flight — if that one then failed, its seq would be
        # re-used by nobody (the attempt has ended) and the events would have a gap. Found by
        # the restart smoke test: seqs [1, 2, 4] after a PostgreSQL restart.
        self._one_at_a_time = asyncio.Lock()

    def _seq(self, st: AttemptState) -> int:
        key = (st.fence.step_id, st.step.attempt)
        return self._unconfirmed.pop(key, None) or next(st.progress_seq)

    async def flush(self, states: list[AttemptState]) -> None:
        async with self._one_at_a_time:
            await self._flush(states)

    async def _flush(self, states: list[AttemptState]) -> None:
        batch = []
        for st in states:
            pending = st.pending_progress
            if pending is None or st.lease_lost:
                continue
            st.pending_progress = None
            batch.append((st, self._seq(st), pending))
        if not batch:
            return
        try:
            owned = await self.store.write_progress(
                [(st.fence.step_id, st.fence.token, seq, p[0], p[1], p[2]) for st, seq, p in batch]
            )
        except TRANSIENT:
            for st, seq, pending in batch:  # keep it for the next round unless newer came in
                self._unconfirmed[(st.fence.step_id, st.step.attempt)] = seq
                if st.pending_progress is None:
                    st.pending_progress = pending
            raise
        for st, _, _ in batch:
            if st.step.id not in owned:
                st.lose()
