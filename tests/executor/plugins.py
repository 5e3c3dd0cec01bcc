"""Executor plugins only rara's own tests use, beside the conformance probes.

``register`` serves the probes of ``rara.executor.conformance_plugins`` (``test.echo``,
``test.sleep``, ``test.hang``, ``test.fail``) plus ``test.flood``, which no conformance
check needs: it measures the executor's progress coalescing (``test_executor_jobs``), and the
worker's ``test.read_shard`` (a map child reading only its own shard: lineage from a remote
executor's reads, ``tests/worker/test_remote_reads.py``).
"""

from __future__ import annotations

import time

from rara.context import StepContext, StepOutcome
from rara.executor import conformance_plugins
from rara.executor.plugins import PluginRegistry
from tests.worker import handlers


def flood(ctx: StepContext) -> StepOutcome:
    """Report ``count`` progress updates as fast as possible (coalescing check)."""
    count = int(ctx.input.get("count", 10000))
    started = time.monotonic()
    for i in range(count):
        ctx.progress((i + 1) / count, f"{i + 1}")
    return StepOutcome(result={"count": count, "seconds": time.monotonic() - started})


def register(registry: PluginRegistry) -> None:
    conformance_plugins.register(registry)
    registry.register("test.flood", 1, flood)
    registry.register("test.read_shard", 1, handlers.read_shard)
