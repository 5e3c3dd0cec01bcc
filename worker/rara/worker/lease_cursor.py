"""Where the next lease scan starts, per lane: a (capability, executor, namespace) triple.

The lease walks ``rara_steps_ready`` in lease order, one range per lane (the namespaces of a
served (capability, executor) pair: migration 0019). Every step leased leaves its old entry in
that index until vacuum removes it, and vacuum may not while any snapshot older than the lease
is open (a long report, a forgotten ``BEGIN``, a lagging replica slot): the entries pile up at
the front of the range, and a scan from the start visits all of them, every lease. So the
worker resumes after the key ``(-priority, available_at, id)`` of the last step it leased of
the lane — its cursor — and scans from the start of the range when something may have
arrived behind the cursor. A lane the worker has not leased from yet is scanned from its
start.

A step becomes ready with ``available_at = now()``, its transaction's start, and is seen at
its commit; so a step started or unblocked by a transaction that was open while this worker
leased later-made steps sorts behind them, as does a step of higher priority. Such commits
announce themselves (``rara_ready`` NOTIFY): after one, the next lease scans from the start —
but not sooner than ``rescan_factor`` times the cost of the last scan from the start after it,
so a range full of dead entries is not walked back-to-back (a worker then spends at most
~1/rescan_factor of its lease time there; with a clean index that is a few milliseconds). And
every ``rescan_seconds`` (stretched the same way) whatever was announced: NOTIFY is a hint.
A retry's, a release's or a reaped step's ``available_at`` is later than any leased step's:
those arrive ahead of the cursor.

Skipping is always safe: the cursor only moves where the scan starts, SKIP LOCKED and the
status check still decide what is leased.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from rara.worker.vocabulary import LeasedStep

Pair = tuple[str, str]  # (capability, executor kind)
Lane = tuple[str, str, str]  # (capability, executor kind, namespace)
Key = tuple[int, datetime, int]  # (-priority, available_at, id): the lease order


class LeaseCursors:
    def __init__(self, rescan_seconds: float = 1.0, rescan_factor: float = 20.0) -> None:
        self.rescan_seconds = rescan_seconds
        self.rescan_factor = rescan_factor
        self._after: dict[Lane, Key] = {}
        # All monotonic. The first lease scans from the start.
        self._rescan_at = 0.0  # when the periodic scan from the start is due
        self._scan_sent = float("-inf")  # when the last scan from the start was sent
        self._heard = float("-inf")  # when the last arrival was announced
        self._heard_ok_at = 0.0  # from when an announced arrival may be looked for

    def announced(self, now: float | None = None) -> None:
        """Ready steps were committed (a NOTIFY): they may sort behind the cursors."""
        self._heard = time.monotonic() if now is None else now

    def due(self, now: float | None = None) -> bool:
        """Whether the next lease should scan from the start of every range: periodically,
        and after an arrival announced since the last such scan was sent (one announced
        while it was in flight may have missed its snapshot)."""
        now = time.monotonic() if now is None else now
        return now >= self._rescan_at or (
            self._heard >= self._scan_sent and now >= self._heard_ok_at
        )

    def announced_due_in(self, now: float | None = None) -> float | None:
        """Seconds until an arrival announced since the last scan from the start was sent may
        be looked for (0: now); None when none is pending. The lease loop wakes then, however
        long its poll."""
        if self._heard < self._scan_sent:
            return None
        now = time.monotonic() if now is None else now
        return max(0.0, min(self._heard_ok_at, self._rescan_at) - now)

    def after(self, pairs: Sequence[Pair], *, from_start: bool) -> dict[str, list[Any]]:
        """The served pairs and lane cursors as ``step_lease`` takes them: a pair once per
        cursor of its lanes, or once with NULLs (from the start)."""
        rows: list[tuple[str, str, str | None, Key | None]] = []
        for capability, executor in pairs:
            lanes: list[tuple[str | None, Key | None]] = []
            if not from_start:
                lanes = [
                    (namespace, key)
                    for (c, e, namespace), key in self._after.items()
                    if c == capability and e == executor
                ]
            rows.extend((capability, executor, n, k) for n, k in lanes or [(None, None)])
        return {
            "capabilities": [r[0] for r in rows],
            "executors": [r[1] for r in rows],
            "after_namespaces": [r[2] for r in rows],
            "after_ranks": [r[3][0] if r[3] else None for r in rows],
            "after_ats": [r[3][1] if r[3] else None for r in rows],
            "after_ids": [r[3][2] if r[3] else None for r in rows],
        }

    def scanned_from_start(self, sent: float, seconds: float) -> None:
        """A scan from the start, sent at ``sent``, took ``seconds``: schedule the next."""
        done = sent + seconds
        self._scan_sent = sent
        self._heard_ok_at = done + self.rescan_factor * seconds
        self._rescan_at = done + max(self.rescan_seconds, self.rescan_factor * seconds)

    def advance(self, steps: Sequence[LeasedStep]) -> None:
        """Move each lane's cursor to the last step leased of it (the answer's order is not
        the lease order: take the maximum)."""
        for step in steps:
            if step.available_at is None:
                continue
            lane = (step.capability, step.executor, step.namespace)
            key = (step.rank, step.available_at, step.id)
            current = self._after.get(lane)
            if current is None or key > current:
                self._after[lane] = key
