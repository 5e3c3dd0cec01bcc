"""The probe plugins of ``rara executor-conformance``.

Serve them with ``rara executor --plugins rara.executor.conformance_plugins``.

The conformance suite (``conformance_checks``) reaches an executor by address only and drives
the contract through these four capabilities: ``test.echo@1`` (ordering, checkpoints,
artifacts), ``test.sleep@1`` (progress, deadline, cancel, disconnect, admission),
``test.hang@1`` (hard stop) and ``test.fail@1`` (structured errors). Any executor
implementation that wants ``run_conformance`` to pass serves them under the same names and
behaviour; they do no real work. They ship with the runtime because the conformance command
does: an executor serving them is the reference endpoint the suite is proven against (and
``bench/`` times the wire with them). Plugins that only rara's own tests use live under
``tests/executor/``.
"""

from __future__ import annotations

import asyncio
import threading
import time

from rara.context import OutputArtifact, StepContext, StepOutcome
from rara.executor.errors import JobError
from rara.executor.plugins import PluginRegistry


async def echo(ctx: StepContext) -> StepOutcome:
    """Return what the job carried; optionally save a checkpoint and store an artifact.

    payload: ``log`` (string) -> written to the attempt's log first (printed: captured);
    ``checkpoint`` (object) -> saved as a checkpoint; ``artifact_text`` (string) -> stored
    and returned as artifact ``echo.txt``.
    """
    payload = dict(ctx.input)
    if isinstance(payload.get("log"), str):
        print(payload["log"], end="")
    if isinstance(payload.get("checkpoint"), dict):
        ctx.save_checkpoint(payload["checkpoint"])
    artifacts = []
    if isinstance(payload.get("artifact_text"), str):
        ref = ctx.artifacts.put_bytes(payload["artifact_text"].encode())
        artifacts.append(OutputArtifact("echo.txt", ref, "text/plain"))
    checkpoint = ctx.checkpoint
    return StepOutcome(
        result={
            "input": payload,
            "attempt": ctx.attempt,
            "idempotency_key": ctx.idempotency_key,
            "step_key": ctx.step_key,
            "inputs": {name: ref.digest for name, ref in ctx.inputs.items()},
            "resumed_from": None if checkpoint is None else dict(checkpoint.state),
        },
        artifacts=artifacts,
    )


def sleep(ctx: StepContext) -> StepOutcome:
    """Sync (runs in a thread): sleep ``seconds`` in ``steps`` ticks, reporting progress.

    Honours cancel unless ``ignore_cancel`` is true (then only a hard stop ends it).
    """
    seconds = float(ctx.input.get("seconds", 1.0))
    steps = max(1, int(ctx.input.get("steps", 10)))
    ignore_cancel = bool(ctx.input.get("ignore_cancel", False))
    pause = threading.Event()  # never set: wait() is a sleep
    started = time.monotonic()
    for i in range(steps):
        step_ends = started + seconds * (i + 1) / steps
        # Look at cancelled() every 20 ms, as a real plugin would between batches.
        while (left := step_ends - time.monotonic()) > 0:
            if ctx.cancelled() and not ignore_cancel:
                return StepOutcome(result={"completed_steps": i, "stopped": True})
            pause.wait(min(left, 0.02))
        ctx.progress((i + 1) / steps, f"step {i + 1}/{steps}", {"step": float(i + 1)})
    return StepOutcome(result={"completed_steps": steps, "stopped": False})


async def hang(ctx: StepContext) -> StepOutcome:
    """Async and deaf to cancel: only a hard stop (task cancellation) ends it."""
    ctx.progress(0.0, "hanging")
    await asyncio.sleep(float(ctx.input.get("seconds", 3600.0)))
    return StepOutcome(result={"hung": False})


def fail(ctx: StepContext) -> StepOutcome:
    """Raise a structured error; ``retryable`` and ``message`` come from the payload."""
    raise JobError(
        str(ctx.input.get("message", "test.fail failed as asked")),
        retryable=bool(ctx.input.get("retryable", False)),
        details={"plugin": "test.fail"},
    )


def register(registry: PluginRegistry) -> None:
    registry.register("test.echo", 1, echo)
    registry.register("test.sleep", 1, sleep)
    registry.register("test.hang", 1, hang)
    registry.register("test.fail", 1, fail)
