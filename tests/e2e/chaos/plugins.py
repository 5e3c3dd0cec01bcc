"""Executor plugins of the chaos workflow (``--plugins tests.e2e.chaos.plugins``).

The executor may not touch the database, so the effect ledger is a directory
(``RARA_CHAOS_FILE_LEDGER``): the effect of a job creates ``<idempotency key>.<attempt>``
only if no file for that key exists yet (check-then-create, not atomic across attempts: two
owners at once would leave two files — a duplicate). The file's mtime is when the effect
happened (the checker compares it with the attempt's ownership interval).

``chaos.shard@1`` reports progress once per chunk; with ``checkpoint: true`` it also saves a
checkpoint per chunk and resumes from the last one (its result says where it resumed from).
It produces one artifact, which the ``merge`` step receives as an input.
"""

from __future__ import annotations

import glob
import os
import threading
import time
from pathlib import Path

from rara.context import OutputArtifact, StepContext, StepOutcome
from rara.executor.errors import JobError
from rara.executor.plugins import PluginRegistry

TMP_PREFIX = ".tmp-"  # never an effect: a write the executor was killed in the middle of


def _ledger() -> Path:
    return Path(os.environ["RARA_CHAOS_FILE_LEDGER"])


def effect_files(key: str) -> list[str]:
    return glob.glob(os.path.join(glob.escape(str(_ledger())), glob.escape(key) + ".*"))


def record_effect(ctx: StepContext) -> bool:
    if ctx.cancelled():
        raise JobError("stopped before the effect", retryable=True)
    if effect_files(ctx.idempotency_key):
        return False  # an earlier attempt did it
    # The effect appears whole or not at all, even under SIGKILL: write a temporary file, then
    # link it to its name (link refuses an existing name, like O_EXCL) and drop the temporary.
    path = _ledger() / f"{ctx.idempotency_key}.{ctx.attempt}"
    tmp = _ledger() / f"{TMP_PREFIX}{os.getpid()}.{time.monotonic_ns()}"
    tmp.write_text(f"{os.getpid()} {time.time():.6f}\n")
    try:
        os.link(tmp, path)
    finally:
        tmp.unlink()
    return True


def shard(ctx: StepContext) -> StepOutcome:
    chunks = int(ctx.input.get("chunks", 5))
    seconds = float(ctx.input.get("seconds", 0.5))
    checkpointing = bool(ctx.input.get("checkpoint", False))
    start = 0
    if checkpointing and ctx.checkpoint is not None:
        start = int(ctx.checkpoint.state["next"])
    pause = threading.Event()  # never set: wait() is an interruptible-looking sleep
    for i in range(start, chunks):
        ends = time.monotonic() + seconds / chunks
        while (left := ends - time.monotonic()) > 0:
            if ctx.cancelled():
                raise JobError("stopped", retryable=True)
            pause.wait(min(left, 0.02))
        ctx.progress((i + 1) / chunks, f"chunk {i + 1}/{chunks}", {"chunk": float(i + 1)})
        if checkpointing:
            ctx.save_checkpoint({"next": i + 1})
    effect = record_effect(ctx)
    ref = ctx.artifacts.put_bytes(f"{ctx.idempotency_key}\n".encode())
    return StepOutcome(
        result={
            "key": ctx.idempotency_key,
            "attempt": ctx.attempt,
            "effect": effect,
            "resumed_from": start,
        },
        artifacts=[OutputArtifact(f"{ctx.step_key}.txt", ref, "text/plain")],
    )


def register(registry: PluginRegistry) -> None:
    registry.register("chaos.shard", 1, shard)
