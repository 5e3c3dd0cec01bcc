"""Handlers for bench/run_size.py: the upstream step whose result a map step maps over."""

from __future__ import annotations

from typing import Any

from rara.context import StepContext
from rara.worker.registry import Registry

registry = Registry()


@registry.handler("bench.items@1")
async def items(ctx: StepContext) -> dict[str, Any]:
    """``{"items": [0, 1, …, n - 1]}`` for the run input's ``n``: the list the map step's
    children are made of (as JSON, up to 144,959 of them fit the 1 MiB result limit)."""
    return {"items": list(range(int(ctx.input["n"])))}
