"""Handlers for benchmarks and smoke tests: ``--handlers tests.support.bench_handlers``.

Test-only code, so outside the wheel; the benchmarks (bench/) import from tests/, never the
other way round.
"""

from __future__ import annotations

import asyncio
import time

from rara.context import StepContext
from rara.worker.registry import Registry

registry = Registry()


@registry.handler("bench.noop@1")
async def noop(ctx: StepContext) -> None:
    return None


@registry.handler("bench.sleep@1")
async def sleep(ctx: StepContext) -> None:
    """Sleeps ``seconds`` on the first attempt only: a later attempt (after a crash) is quick."""
    if ctx.attempt == 1:
        await asyncio.sleep(float(ctx.input.get("seconds", 0)))


@registry.handler("bench.stamp@1")
async def stamp(ctx: StepContext) -> dict[str, float]:
    """When the handler started (CLOCK_MONOTONIC, shared by the processes of one machine): the
    benchmark's start latency is this minus the client's clock before it started the run."""
    return {"started": time.monotonic()}
