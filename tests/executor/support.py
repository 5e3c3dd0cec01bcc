"""Shared by the executor tests: extra plugins, the Executor handle, stream helpers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from rara.artifacts.store import LocalArtifactStore
from rara.context import StepContext, StepOutcome
from rara.executor.client import ExecutorClient
from rara.executor.plugins import PluginRegistry
from rara.executor.server import ExecutorServer
from rara.v1 import executor_pb2 as pb
from tests.executor import log_plugins

TOKEN = "test-token-0123456789"
WAIT_S = 10.0  # the most any single wait in these tests may take before it counts as a hang
# The same for a job that moves tens of MB (JSON encoded, sent, decoded and answered by another
# process): ~1 s alone, past 10 s when the suite's processes share two busy cores.
BIG_WAIT_S = 60.0


def checkpoint_in_thread(ctx: StepContext) -> StepOutcome:
    ctx.save_checkpoint({"step": 1})
    ctx.progress(0.5, "half")
    ctx.save_checkpoint({"step": 2})
    return StepOutcome(result="done")


async def flood_in_loop(ctx: StepContext) -> StepOutcome:
    # Never yields to the loop: only the latest update can go out.
    for i in range(10_000):
        ctx.progress(i / 9_999, str(i))
    return StepOutcome()


def raise_plain(ctx: StepContext) -> StepOutcome:
    raise ValueError("plain failure")


class PermanentError(Exception):
    retryable = False


async def raise_permanent(ctx: StepContext) -> StepOutcome:
    raise PermanentError("permanent failure")


async def bad_result(ctx: StepContext) -> StepOutcome:
    return StepOutcome(result={"nan": float("nan")})


async def not_an_outcome(ctx: StepContext) -> Any:
    return {"oops": 1}


# A credential-looking value no real system accepts, built at run time so this file holds none.
LEAKED = "ghp_" + "Z9" * 18


async def leaky_progress(ctx: StepContext) -> StepOutcome:
    ctx.progress(0.5, f"pushing with {LEAKED}", {f"rate {LEAKED}": 1.0, "loss": 0.25})
    await asyncio.sleep(0.1)  # past the outbox's progress spacing, so it is sent on its own
    return StepOutcome(result={"ok": True})


async def leaky_result(ctx: StepContext) -> StepOutcome:
    return StepOutcome(result={"config": {"auth": LEAKED}})


def leaky_error(ctx: StepContext) -> StepOutcome:
    raise ConnectionError(f"cannot reach postgresql://app:{LEAKED}@db:5432/x")


def leaky_checkpoint(ctx: StepContext) -> StepOutcome:
    ctx.save_checkpoint({"resume": {"password": "hunter2hunter2"}})
    return StepOutcome(result="unreachable")


async def huge_result(ctx: StepContext) -> StepOutcome:
    return StepOutcome(result={"blob": "x" * (17 * 1024 * 1024)})


def extra_plugins(registry: PluginRegistry) -> None:
    registry.register("t.leaky-progress", 1, leaky_progress)
    registry.register("t.leaky-result", 1, leaky_result)
    registry.register("t.leaky-error", 1, leaky_error)
    registry.register("t.leaky-checkpoint", 1, leaky_checkpoint)
    registry.register("t.huge-result", 1, huge_result)
    registry.register("t.ckpt-thread", 1, checkpoint_in_thread)
    registry.register("t.flood-loop", 1, flood_in_loop)
    registry.register("t.raise-plain", 1, raise_plain)
    registry.register("t.raise-permanent", 1, raise_permanent)
    registry.register("t.bad-result", 1, bad_result)
    registry.register("t.not-outcome", 1, not_an_outcome)
    registry.register("t.gpu", 2, bad_result, gpu=1, memory_bytes=8 << 30)
    log_plugins.register(registry)


@dataclass
class Executor:
    server: ExecutorServer
    address: str
    client: ExecutorClient
    store: LocalArtifactStore


StartExecutor = Callable[..., Awaitable[Executor]]


async def collect(
    client: ExecutorClient, job: pb.Job, wait: float = WAIT_S
) -> list[pb.ExecuteResponse]:
    async with asyncio.timeout(wait):
        return [e async for e in client.execute(job)]


def kinds(events: list[pb.ExecuteResponse]) -> list[str]:
    return [str(e.WhichOneof("event")) for e in events]
