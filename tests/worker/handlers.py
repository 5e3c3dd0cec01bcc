"""Handlers for the worker tests, served by real worker processes
(``python -m rara.worker --handlers tests.worker.handlers``) and by in-process workers.

Inputs come from the run input (``ctx.input``). ``SEEN`` records, per idempotency key, what an
in-process handler observed (e.g. when it saw the cancel), for tests running the worker in a
thread of the test process.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg

from rara.context import OutputArtifact, StepContext, StepOutcome
from rara.errors import RetryableError, TerminalError
from rara.worker.registry import Registry

registry = Registry()
SEEN: dict[str, dict[str, Any]] = {}


def _seen(ctx: StepContext, what: str) -> None:
    SEEN.setdefault(ctx.idempotency_key, {})[what] = time.monotonic()


@registry.handler("test.noop@1")
async def noop(ctx: StepContext) -> Any:
    return None


@registry.handler("test.echo@1")
def echo(ctx: StepContext) -> Any:
    return {"input": dict(ctx.input), "attempt": ctx.attempt, "key": ctx.idempotency_key}


async def _cooperative_sleep(ctx: StepContext, seconds: float) -> bool:
    """Sleep, watching ctx.cancelled(); True if it slept the whole time."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if ctx.cancelled():
            _seen(ctx, "cancelled")
            return False
        await asyncio.sleep(0.01)
    return True


@registry.handler("test.sleep@1")
async def sleep(ctx: StepContext) -> Any:
    """Sleeps ``seconds`` on attempts up to ``slow_attempts`` (default: all), else returns."""
    _seen(ctx, "started")
    if ctx.attempt <= ctx.input.get("slow_attempts", 1_000_000):
        if ctx.input.get("ignore_cancel"):
            await asyncio.sleep(ctx.input["seconds"])
        else:
            await _cooperative_sleep(ctx, ctx.input["seconds"])
    return {"attempt": ctx.attempt}


# Idempotency keys test.until_opened may finish: a test adds one when it wants that attempt
# to end (an event the test sends, instead of a sleep it hopes is long enough).
OPENED: set[str] = set()


@registry.handler("test.until_opened@1")
async def until_opened(ctx: StepContext) -> Any:
    """Runs until its idempotency key is in OPENED (or it is cancelled)."""
    _seen(ctx, "started")
    # (polled: the test's thread opens it, and an asyncio.Event is not thread-safe)
    while ctx.idempotency_key not in OPENED and not ctx.cancelled():  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    return {"opened": ctx.idempotency_key in OPENED}


@registry.handler("test.sleep_sync@1")
def sleep_sync(ctx: StepContext) -> Any:
    """In a thread; ``ignore_cancel``: a handler that never looks at ctx.cancelled()."""
    _seen(ctx, "started")
    if ctx.attempt > ctx.input.get("slow_attempts", 1_000_000):
        return {"attempt": ctx.attempt}
    if ctx.input.get("ignore_cancel"):
        time.sleep(ctx.input["seconds"])
        return {"attempt": ctx.attempt}
    end = time.monotonic() + ctx.input["seconds"]
    while time.monotonic() < end:
        if ctx.cancelled():
            _seen(ctx, "cancelled")
            raise TerminalError("stopped on cancel")
        time.sleep(0.01)
    return {"attempt": ctx.attempt}


@registry.handler("test.fail@1")
async def fail(ctx: StepContext) -> Any:
    """Fails attempts up to ``fail`` (retryable, or terminal with ``terminal: true``; with the
    input's ``message`` as the error's, a ValueError, when it gives one)."""
    if ctx.attempt <= ctx.input.get("fail", 1_000_000):
        try:
            raise KeyError("root cause")
        except KeyError as cause:
            if "message" in ctx.input:
                raise ValueError(str(ctx.input["message"])) from cause
            if ctx.input.get("terminal"):
                raise TerminalError("bad input", code="BAD_INPUT") from cause
            if ctx.input.get("plain"):
                raise ValueError(f"plain failure on attempt {ctx.attempt}") from cause
            raise RetryableError(f"flaky on attempt {ctx.attempt}", code="FLAKY") from cause
    return {"attempt": ctx.attempt}


@registry.handler("test.ledger@1")
async def ledger(ctx: StepContext) -> Any:
    """Records one effect per execution in ``test_ledger`` keyed by the idempotency key."""
    if ctx.input.get("seconds"):
        await asyncio.sleep(ctx.input["seconds"])
    async with await psycopg.AsyncConnection.connect(ctx.input["ledger_dsn"], autocommit=True) as c:
        await c.execute(
            "INSERT INTO test_ledger (key, executions) VALUES (%s, 1) ON CONFLICT (key) "
            "DO UPDATE SET executions = test_ledger.executions + 1",
            (ctx.idempotency_key,),
        )
    return {"key": ctx.idempotency_key}


@registry.handler("test.chatty@1")
async def chatty(ctx: StepContext) -> Any:
    """Reports progress ``calls`` times over ``seconds``; the last report is fraction 1.0."""
    calls, seconds = ctx.input["calls"], ctx.input["seconds"]
    for i in range(1, calls + 1):
        ctx.progress(i / calls, f"item {i}", {"items": float(i)})
        if i % (calls // 100 or 1) == 0:
            await asyncio.sleep(seconds / 100)
    return {"calls": calls}


@registry.handler("test.report@1")
def report(ctx: StepContext) -> Any:
    """Returns its input's ``report`` as the result (numbers for the results chart)."""
    return dict(ctx.input["report"])


@registry.handler("test.metrics@1")
def metrics(ctx: StepContext) -> Any:
    """Reports its input's ``metrics`` once at its end and returns them, as the demo's
    adaptation does (single values: scores, timings, sizes)."""
    ctx.progress(1.0, "reported", dict(ctx.input["metrics"]))
    return {"metrics": dict(ctx.input["metrics"])}


@registry.handler("test.items@1")
def items(ctx: StepContext) -> Any:
    """``{"items": [0, 1, …]}`` of ``count`` elements: a list for a map, made by the step."""
    return {"items": list(range(int(ctx.input["count"])))}


@registry.handler("test.silent@1")
async def silent(ctx: StepContext) -> Any:
    """Reports progress once, then goes quiet for ``seconds`` (heartbeatTimeout test)."""
    ctx.progress(0.1, "started")
    await asyncio.sleep(ctx.input["seconds"])
    return None


def _checkpointing(ctx: StepContext) -> Any:
    start = int(ctx.checkpoint.state["next"]) if ctx.checkpoint else 0
    for item in range(start, ctx.input["items"]):
        if ctx.attempt == 1 and item == ctx.input.get("crash_at"):
            raise RetryableError(f"crashed at item {item}")
        ctx.save_checkpoint({"next": item + 1})
    return {"resumed_from": start, "attempt": ctx.attempt}


@registry.handler("test.checkpoint_sync@1")
def checkpoint_sync(ctx: StepContext) -> Any:
    return _checkpointing(ctx)


@registry.handler("test.checkpoint_async@1")
async def checkpoint_async(ctx: StepContext) -> Any:
    return _checkpointing(ctx)  # save_checkpoint on the loop thread: queued, never blocking


@registry.handler("test.checkpoint_awaited@1")
async def checkpoint_awaited(ctx: StepContext) -> Any:
    """The awaitable form: each checkpoint is written when the await returns."""
    start = int(ctx.checkpoint.state["next"]) if ctx.checkpoint else 0
    for item in range(start, ctx.input["items"]):
        if ctx.attempt == 1 and item == ctx.input.get("crash_at"):
            raise RetryableError(f"crashed at item {item}")
        await ctx.asave_checkpoint({"next": item + 1})
    return {"resumed_from": start, "attempt": ctx.attempt}


@registry.handler("test.train@1")
async def train(ctx: StepContext) -> Any:
    """A training loop in small: ``steps`` steps of ``seconds`` each, reporting its own counter
    (``step``), a falling ``loss`` and a constant ``lr``, a checkpoint after every step; a
    baseline score once before the first. Attempt 1 fails at step ``crash_at`` (retryable),
    and the next attempt resumes from the checkpoint, as the demo's adaptation does."""
    steps, seconds = ctx.input["steps"], ctx.input["seconds"]
    done = int(ctx.checkpoint.state["step"]) if ctx.checkpoint else 0
    if done == 0:
        ctx.progress(0.0, "baseline", {"before/recall": 0.5})
        await asyncio.sleep(seconds)
    for step in range(done + 1, steps + 1):
        if ctx.attempt == 1 and step == ctx.input.get("crash_at"):
            raise RetryableError(f"crashed at step {step}")
        loss = 2.0 / step
        ctx.progress(step / steps, f"step {step}", {"loss": loss, "lr": 0.001, "step": step})
        await ctx.asave_checkpoint({"step": step})
        await asyncio.sleep(seconds)
    return {"steps": steps, "resumed_from_step": done}


@registry.handler("test.produce@1")
def produce(ctx: StepContext) -> StepOutcome:
    """``text`` (``repeat`` times) as the artifact ``corpus.txt`` of ``media_type``."""
    ref = ctx.artifacts.put_bytes(ctx.input["text"].encode() * ctx.input.get("repeat", 1))
    media_type = ctx.input.get("media_type", "text/plain")
    return StepOutcome(
        result={"digest": ref.digest}, artifacts=[OutputArtifact("corpus.txt", ref, media_type)]
    )


# Idempotency keys of the calls of test.tally, in order: a step reused from the step cache is
# never called (tests/worker/test_cache.py).
TALLY: list[str] = []


@registry.handler("test.tally@1")
def tally(ctx: StepContext) -> StepOutcome:
    """Records the call, then as test.produce: ``text`` (with the upstream artifacts' bytes
    appended) as the artifact ``corpus.txt``."""
    TALLY.append(ctx.idempotency_key)
    if ctx.input.get("pause"):  # for concurrent misses: both are called before either ends
        time.sleep(float(ctx.input["pause"]))
    text = str(ctx.input.get("text", "")) + str(ctx.input.get("item", ""))
    upstream = b"".join(ctx.artifacts.get_bytes(ctx.inputs[k]) for k in sorted(ctx.inputs))
    ref = ctx.artifacts.put_bytes(text.encode() + upstream)
    return StepOutcome(
        result={"text": text, "digest": ref.digest},
        artifacts=[OutputArtifact("corpus.txt", ref, "text/plain")],
    )


# Step keys (or idempotency keys: one run's step) test.flaky fails for good
# (tests/worker/test_resume.py): a run fails there, and a resume after the key is removed
# succeeds with the same input.
FAILING: set[str] = set()


@registry.handler("test.flaky@1")
def flaky(ctx: StepContext) -> StepOutcome:
    """test.tally, unless its step key or idempotency key is in FAILING (then it fails after
    the input's ``pause``)."""
    if ctx.step_key in FAILING or ctx.idempotency_key in FAILING:
        time.sleep(float(ctx.input.get("pause", 0)))
        raise TerminalError(f"step {ctx.step_key} is set to fail")
    return tally(ctx)


@registry.handler("test.consume@1")
def consume(ctx: StepContext) -> Any:
    data = ctx.artifacts.get_bytes(ctx.inputs["corpus.txt"])
    return {"text": data.decode(), "inputs": sorted(ctx.inputs)}


@registry.handler("test.shard@1")
def shard(ctx: StepContext) -> StepOutcome:
    """Each of ``items`` as its own artifact ``shard-<i>.txt``."""
    refs = [ctx.artifacts.put_bytes(str(item).encode()) for item in ctx.input["items"]]
    return StepOutcome(
        result={"shards": len(refs)},
        artifacts=[OutputArtifact(f"shard-{i}.txt", r, "text/plain") for i, r in enumerate(refs)],
    )


@registry.handler("test.read_shard@1")
def read_shard(ctx: StepContext) -> StepOutcome:
    """A map child: reads its own shard (``shard-<index>.txt``) and no other input. A
    StepOutcome, so that an executor serves it too (tests/executor/plugins.py)."""
    text = ctx.artifacts.get_bytes(ctx.inputs[f"shard-{ctx.input['index']}.txt"]).decode()
    return StepOutcome(result={"text": text})


@registry.handler("test.big@1")
def big(ctx: StepContext) -> StepOutcome:
    """An artifact plus a result of ``bytes`` characters (to cross the result size limit)."""
    ref = ctx.artifacts.put_bytes(b"partial output")
    return StepOutcome(
        result={"blob": "x" * int(ctx.input["bytes"])},
        artifacts=[OutputArtifact("out.txt", ref, "text/plain")],
    )
