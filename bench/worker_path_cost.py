"""The worker's own CPU per step on the path from lease to batched end, without a database:
the worker (``rara.worker.runner.Worker``, its loops as they run) on a store that answers at
once from memory, so that only what the worker's Python pays per step is counted.

    .venv/bin/python -m bench.worker_path_cost [--steps 50000] [--rounds 3]

Each lease answers up to ``lease_batch`` no-op steps (``tests.support.bench_handlers``), each
end is taken as succeeded; the process's CPU time from the first lease to the last end, per
step. The database's answers cost nothing here, so the figure is the floor of the worker's
share in ``bench.worker_step_cost`` (which drains a real database); it is steadier than that
one on a busy machine, since no server competes with the worker for the cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(1, str(ROOT))  # tests.* from the repository root

from rara.states import StepStatus  # noqa: E402
from rara.worker import heap, runner  # noqa: E402
from rara.worker.dispatch import InProcessExecutor  # noqa: E402
from rara.worker.settings import WorkerSettings  # noqa: E402
from rara.worker.vocabulary import Ending, LeasedStep  # noqa: E402
from tests.support.bench_handlers import registry  # noqa: E402

CAPABILITY = "bench.noop@1"


class _Pool:
    async def open(self, wait: bool = True) -> None: ...

    async def close(self) -> None: ...


class MemoryStore:
    """``WorkerStore``'s methods that the worker calls, answered from memory."""

    def __init__(self, steps: int, done: asyncio.Event) -> None:
        self.left = steps
        self.ended = 0
        self.steps = steps
        self.done = done
        self.first_lease: float | None = None
        self.now = datetime.now(UTC)

    def _step(self, i: int) -> LeasedStep:
        return LeasedStep(
            i, i, "s", CAPABILITY, "inprocess", {}, 1, 3, uuid.uuid4(), self.now,
            None, None, [], {}, self.now,
        )  # fmt: skip

    async def lease(self, pairs: Any, limit: int, *args: Any, **kwargs: Any) -> list[LeasedStep]:
        if self.first_lease is None:
            self.first_lease = time.process_time()
        n = min(limit, self.left)
        first = self.steps - self.left
        self.left -= n
        await asyncio.sleep(0)  # a round trip's yield
        return [self._step(first + i + 1) for i in range(n)]

    async def end_many(self, endings: Sequence[Ending]) -> list[StepStatus | None]:
        await asyncio.sleep(0)
        self.ended += len(endings)
        if self.ended >= self.steps:
            self.done.set()
        return [StepStatus.SUCCEEDED] * len(endings)

    async def next_available(self, pairs: Any) -> None:
        return None

    async def heartbeat_all(
        self, capabilities: Any, leases: Callable[[], Any], *a: Any, **k: Any
    ) -> dict[int, bool]:
        return {step_id: False for step_id, _ in leases()}

    async def reap(self, *args: Any) -> list[Any]:
        return []

    async def fire_waits(self, limit: int) -> Any:
        await asyncio.sleep(3600)

    async def register(self, *args: Any) -> None: ...

    async def stop(self) -> None: ...

    async def close(self) -> None: ...

    async def release_unheld(self, held: Any) -> list[int]:
        return []


async def one_round(steps: int) -> float:
    done = asyncio.Event()
    store = MemoryStore(steps, done)
    # The worker's connections and store, replaced where runner.py looks them up.
    setattr(runner, "make_pool", lambda url, size: _Pool())  # noqa: B010
    setattr(runner, "WorkerStore", lambda pool, worker: store)  # noqa: B010
    settings = WorkerSettings(id="path-cost", listen=False, concurrency=128, lease_batch=100)
    worker = runner.Worker(settings, [InProcessExecutor(registry)], "postgresql://unused")
    heap.settle()
    running = asyncio.create_task(worker.run())
    await done.wait()
    spent = time.process_time() - (store.first_lease or 0.0)
    worker.stop()
    await running
    return spent / steps * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    rows = []
    for _ in range(args.rounds):
        rows.append(round(asyncio.run(one_round(args.steps)), 1))
        print(json.dumps({"worker_us_per_step": rows[-1]}), flush=True)
    print(json.dumps({"median_us": statistics.median(rows)}))


if __name__ == "__main__":
    main()
