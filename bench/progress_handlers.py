"""Handlers for bench/progress_cost.py: a no-op step that reports progress."""

from __future__ import annotations

from rara.context import StepContext
from rara.worker.registry import Registry

registry = Registry()


@registry.handler("bench.silent@1")
async def silent(ctx: StepContext) -> None:
    pass


@registry.handler("bench.progress1@1")
async def progress_once(ctx: StepContext) -> None:
    ctx.progress(1.0, "done")


@registry.handler("bench.progress100@1")
async def progress_chatty(ctx: StepContext) -> None:
    for i in range(100):  # coalesced by the worker: the latest state is what gets written
        ctx.progress((i + 1) / 100, f"item {i}", {"items": float(i)})
