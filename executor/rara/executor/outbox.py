"""The ordered, thread-safe channel from a running job to its Execute stream.

Producers are the job (on the event loop) and the plugin (on the loop, or in its own thread
for sync plugins). The single consumer is the Execute handler, which numbers events as it
sends them, so ``seq`` is strictly increasing by construction.

Ordering: producers off the loop hand items over with ``call_soon_threadsafe``; the loop
runs those callbacks FIFO, and a sync plugin's return value reaches the loop the same way
after them, so everything a plugin reported precedes its terminal event.

Progress is coalesced: one slot holds the latest update and at most one marker for it sits
in the queue, so a flood costs O(1) memory and the newest state is what gets sent. Progress
events are also spaced at least ``progress_interval`` apart (each one becomes a database
write on the worker); an update still pending when the terminal event arrives is sent just
before it, so the last reported state is never lost.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass

from rara.v1 import executor_pb2 as pb

TERMINAL_EVENTS = frozenset({"succeeded", "failed", "cancelled"})


@dataclass(slots=True)
class _Item:
    event: pb.ExecuteResponse | None  # None: the coalesced-progress marker
    written: threading.Event | None = None  # set once the event has been handed to gRPC


class Outbox:
    def __init__(self, progress_interval: float = 0.05) -> None:
        self._loop = asyncio.get_running_loop()
        self._progress_interval = progress_interval
        self._loop_thread = threading.get_ident()
        self._queue: asyncio.Queue[_Item] = asyncio.Queue()
        self._lock = threading.Lock()
        self._latest_progress: pb.JobProgress | None = None
        self._progress_queued = False
        self._closed = False  # a terminal event was put; later puts are dropped
        self._detached = False  # the consumer is gone; nothing will be sent any more
        self._waiters: set[threading.Event] = set()
        self.terminal_sent = False

    @property
    def closed(self) -> bool:
        return self._closed

    def put(self, event: pb.ExecuteResponse, written: threading.Event | None = None) -> None:
        """Queue an event (any thread). A terminal event closes the outbox."""
        with self._lock:
            if self._closed or self._detached:
                if written is not None:
                    written.set()  # nobody will send it; do not leave a plugin blocked
                return
            if event.WhichOneof("event") in TERMINAL_EVENTS:
                self._closed = True
            if written is not None:
                self._waiters.add(written)
        self._hand_over(_Item(event, written))

    def put_progress(self, progress: pb.JobProgress) -> None:
        """Replace the pending progress update (any thread); queue a marker if none is."""
        with self._lock:
            if self._closed:
                return
            self._latest_progress = progress
            if self._progress_queued:
                return
            self._progress_queued = True
        self._hand_over(_Item(None))

    def _hand_over(self, item: _Item) -> None:
        if threading.get_ident() == self._loop_thread:
            self._queue.put_nowait(item)
            return
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the loop is closed: an abandoned plugin thread outlived it
            self._release(item)

    def _release(self, item: _Item) -> None:
        if item.written is not None:
            item.written.set()
            with self._lock:
                self._waiters.discard(item.written)

    def _take_progress(self) -> pb.ExecuteResponse | None:
        with self._lock:
            progress, self._latest_progress = self._latest_progress, None
            self._progress_queued = False
        return None if progress is None else pb.ExecuteResponse(progress=progress)

    async def stream(self) -> AsyncIterator[pb.ExecuteResponse]:
        """Events with ``seq`` set, ending after the terminal one (single consumer)."""
        seq = 0
        next_progress_at = 0.0
        try:
            while True:
                item = await self._queue.get()
                event = item.event
                terminal = event is not None and event.WhichOneof("event") in TERMINAL_EVENTS
                if event is None or terminal:
                    if event is None and self._loop.time() < next_progress_at:
                        # Too soon: look again later; updates meanwhile replace this one.
                        delay = next_progress_at - self._loop.time()
                        self._loop.call_later(delay, self._queue.put_nowait, item)
                        continue
                    progress = self._take_progress()
                    if progress is not None:
                        seq += 1
                        progress.seq = seq
                        next_progress_at = self._loop.time() + self._progress_interval
                        yield progress
                    if event is None:
                        continue
                seq += 1
                event.seq = seq
                yield event  # resumes once the consumer has written it
                self._release(item)
                if terminal:
                    self.terminal_sent = True
                    return
        finally:
            # Disconnected or done: wake any plugin thread blocked in save_checkpoint.
            with self._lock:
                self._detached = True
                waiters, self._waiters = self._waiters, set()
            for w in waiters:
                w.set()
