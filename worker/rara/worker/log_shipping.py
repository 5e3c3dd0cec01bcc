"""Shipping what handlers write (``rara.step_output``) to the database, live.

One loop per worker writes the chunks of every running attempt in one statement
(step_log_many), every ``PERIOD`` seconds or as soon as an attempt has a chunk's worth
(``CHUNK_BYTES``) waiting; the supervisor flushes an attempt once more, with its held line and
its tail, before its end is written (``rara.worker.attempt``). The statement is fenced per
attempt: an attempt it does not return has lost its lease. A chunk stays with its attempt until
a write of it is confirmed, and is sent again with the same seq after a failed one, so the log
has no gap and nothing twice.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

import structlog

from rara.secrets import named_values
from rara.step_output import StepOutput
from rara.worker.retry import TRANSIENT
from rara.worker.store import WorkerStore
from rara.worker.vocabulary import AttemptState

log = structlog.get_logger("rara.worker")

PERIOD = 1.0  # seconds between shipments while a step writes less than a chunk


class LogShipper:
    def __init__(self, store: WorkerStore, attempts: Mapping[int, AttemptState]) -> None:
        self.store = store
        self.attempts = attempts
        self.due = asyncio.Event()  # a chunk's worth waits somewhere
        # One write at a time: an attempt's next chunks go only after the last were confirmed,
        # which is what lets a reader follow an attempt by its last seq (rara.pg.step_logs).
        self._one_at_a_time = asyncio.Lock()

    def output_for(self, state: AttemptState) -> StepOutput:
        """A new capture for ``state``; its lease token and the values of the secrets the step
        names (those that resolve here) are masked in what it keeps."""
        loop = state.loop

        def ship_soon() -> None:
            loop.call_soon_threadsafe(self.due.set)

        masked = [str(state.fence.token), *named_values(state.step.payload.get("secrets") or {})]
        output = StepOutput(masked=masked, on_full=ship_soon)
        state.output = output
        return output

    async def flush(self, states: list[AttemptState], *, final: bool = False) -> None:
        async with self._one_at_a_time:
            batch = []
            for st in states:
                if st.output is None or st.lease_lost:
                    continue
                chunks = st.output.take(final)
                if chunks:
                    batch.append((st, st.output, chunks))
            if not batch:
                return
            try:
                owned = await self.store.write_logs(
                    [
                        (st.fence.step_id, st.fence.token, seq, body, dropped)
                        for st, _, chunks in batch
                        for seq, body, dropped in chunks
                    ]
                )
            except TRANSIENT:
                raise  # kept: sent again next time
            except Exception:
                # Refused for good (it cannot be, for chunks this module made): dropped, so
                # that one bad batch neither stops the worker nor comes back forever.
                log.exception("step log chunks refused; dropped")
                for _, output, chunks in batch:
                    output.confirm(len(chunks))
                return
            for st, output, chunks in batch:
                if st.step.id in owned:
                    output.confirm(len(chunks))
                else:
                    st.lose()

    async def ship_loop(self) -> None:
        """Ship what waits, every ``PERIOD`` seconds or when a chunk's worth does."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.due.wait(), PERIOD)
            self.due.clear()
            try:
                await self.flush([s for s in self.attempts.values() if s.output is not None])
            except TRANSIENT as exc:
                log.warning("step log write failed", error=str(exc))
