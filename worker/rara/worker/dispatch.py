"""Routing a leased step to what runs it: the ``Executor`` protocol, and the in-process one.

A worker holds one executor per kind: ``inprocess`` (``InProcessExecutor``, here: handlers from
the registry) and, when endpoints are configured, ``grpc`` (``rara.worker.grpc_executor``:
executor services; ``rara.worker.main.build_executors`` picks them). It leases a step only if
the executor of the step's kind serves the step's capability, so a worker without a gRPC
executor never takes ``executor: grpc`` steps. The executor runs the step's code and returns a
``StepOutcome`` or raises (``TerminalError`` → not retried, anything else → retried); the worker
owns everything around it: lease, heartbeats, deadlines, cancel and the final write.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from typing import Any, Protocol

from rara.context import StepContext, StepOutcome
from rara.worker.registry import Registry
from rara.worker.vocabulary import LeasedStep


class Executor(Protocol):
    """What runs a step's code. ``kind`` is the definition's ``executor`` value it serves."""

    kind: str

    def capabilities(self) -> set[str]: ...

    def describe(self) -> list[dict[str, Any]]:
        """The remote endpoints it reaches, for rara_workers.executors ([] in process)."""
        ...

    async def run(self, ctx: StepContext, step: LeasedStep) -> StepOutcome: ...


def as_outcome(value: Any) -> StepOutcome:
    """A handler's return value: a StepOutcome, or a plain JSON value that is the result."""
    return value if isinstance(value, StepOutcome) else StepOutcome(result=value)


class InProcessExecutor:
    """Runs handlers from a registry in this process; sync handlers in a thread."""

    kind = "inprocess"

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def capabilities(self) -> set[str]:
        return self.registry.capabilities()

    def describe(self) -> list[dict[str, Any]]:
        return []  # its capabilities are the worker's own (rara_workers.capabilities)

    async def run(self, ctx: StepContext, step: LeasedStep) -> StepOutcome:
        fn = self.registry.get(step.capability)
        if self.registry.is_async(step.capability):
            return as_outcome(await fn(ctx))
        return as_outcome(await run_in_daemon_thread(fn, ctx))


async def run_in_daemon_thread(fn: Callable[[StepContext], Any], ctx: StepContext) -> Any:
    """``asyncio.to_thread``, but in a daemon thread of its own.

    A thread cannot be interrupted: cancelling this await abandons the thread, which sees
    ctx.cancelled() and whose writes are fenced, so it can do no harm but waste. A daemon
    thread (not the loop's default executor, which ``asyncio.run`` joins at exit) lets the
    process exit after a graceful stop even if such a handler never returns.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():
            future.set_result(value) if ok else future.set_exception(value)

    def main() -> None:
        try:
            result = context.run(fn, ctx)
        except BaseException as exc:
            loop.call_soon_threadsafe(settle, False, exc)
        else:
            loop.call_soon_threadsafe(settle, True, result)

    threading.Thread(target=main, name=f"handler-{ctx.step_id}", daemon=True).start()
    return await future
