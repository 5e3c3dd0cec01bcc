"""Executor plugins that write output, for the step-log test of remote steps
(tests/worker/test_remote_step_logs.py): served with ``--plugins tests.executor.log_plugins``."""

from __future__ import annotations

import asyncio
import logging
import sys

from rara.context import StepContext, StepOutcome
from rara.executor.plugins import PluginRegistry
from rara.secrets import resolve

log = logging.getLogger("tests.remote")


def chatty(ctx: StepContext) -> StepOutcome:
    """Sync (a thread): ``lines`` numbered lines to stdout, one record, a secret it resolved."""
    for i in range(int(ctx.input.get("lines", 5))):
        print(f"{ctx.step_key} remote {i}")
    log.warning("%s logged remotely", ctx.step_key)
    sys.stderr.write(f"the key is {resolve('testlog', 'token')}\n")
    if ctx.input.get("flood"):
        for i in range(int(ctx.input["flood"])):
            print(f"{i:08d}".ljust(99, "y"))
    return StepOutcome(result={"ok": True})


async def chatty_async(ctx: StepContext) -> StepOutcome:
    """The same on the executor's loop, yielding between lines."""
    for i in range(int(ctx.input.get("lines", 5))):
        print(f"{ctx.step_key} remote {i}")
        await asyncio.sleep(0.001)
    return StepOutcome(result={"ok": True})


def register(registry: PluginRegistry) -> None:
    registry.register("test.log.remote", 1, chatty)
    registry.register("test.log.remote_async", 1, chatty_async)
