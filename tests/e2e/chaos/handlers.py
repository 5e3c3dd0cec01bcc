"""In-process handlers of the chaos workflow (``--handlers tests.e2e.chaos.handlers``).

Each step reports progress several times, then records its effect in ``chaos_ledger``, keyed
by the idempotency key, *check-then-insert without a unique constraint*: a step that already
did its effect (an earlier attempt did it, then was killed before completing) does not do it
again, but two owners running the step at the same time would both insert — a duplicate the
invariants count. The row says which attempt of which worker did it, and when (database
clock), so the checker can tell whether the attempt still owned the step at that moment.

Environment (set by the fleet): ``RARA_CHAOS_LEDGER_DSN`` (the test database) and
``RARA_WORKER_ID`` (this worker's id, the same value as ``--id``).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import psycopg

from rara.context import StepContext
from rara.errors import RetryableError
from rara.worker.registry import Registry

registry = Registry()

LEDGER_DDL = """
CREATE TABLE IF NOT EXISTS chaos_ledger (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key      text NOT NULL,            -- the step's idempotency key (no unique constraint!)
    run_id   bigint NOT NULL,
    step_key text NOT NULL,
    attempt  integer NOT NULL,
    worker   text NOT NULL,
    pid      integer NOT NULL,
    at       timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""


def _worker() -> str:
    return os.environ.get("RARA_WORKER_ID", f"pid:{os.getpid()}")


async def record_effect(ctx: StepContext) -> bool:
    """The step's side effect, at most once per key (by the check): True if done now."""
    if ctx.cancelled():  # a well-behaved handler does not start an effect once told to stop
        raise RetryableError("stopped before the effect", code="CHAOS_STOPPED")
    dsn = os.environ["RARA_CHAOS_LEDGER_DSN"]
    async with await psycopg.AsyncConnection.connect(
        dsn, autocommit=True, connect_timeout=5
    ) as conn:
        cur = await conn.execute(
            "SELECT 1 FROM chaos_ledger WHERE key = %s LIMIT 1", (ctx.idempotency_key,)
        )
        if await cur.fetchone() is not None:
            return False  # done by an earlier attempt that did not live to complete
        await conn.execute(
            "INSERT INTO chaos_ledger (key, run_id, step_key, attempt, worker, pid) "
            "VALUES (%s, %s, %s, %s, %s, %s)",
            (ctx.idempotency_key, ctx.run_id, ctx.step_key, ctx.attempt, _worker(), os.getpid()),
        )
    return True


@registry.handler("chaos.work@1")
async def work(ctx: StepContext) -> Any:
    """``reports`` progress reports over ``seconds``, then the effect."""
    reports = int(ctx.input.get("reports", 4))
    seconds = float(ctx.input.get("seconds", 0.4))
    for i in range(1, reports + 1):
        if ctx.cancelled():
            raise RetryableError("stopped", code="CHAOS_STOPPED")
        ctx.progress(i / reports, f"{ctx.step_key} {i}/{reports}", {"item": float(i)})
        await asyncio.sleep(seconds / reports)
    effect = await record_effect(ctx)
    # merge sees the shards' artifacts (the manifests of their winning attempts)
    inputs = sorted(ctx.inputs)
    return {"key": ctx.idempotency_key, "attempt": ctx.attempt, "effect": effect, "inputs": inputs}


# -- for tests/e2e/chaos/test_lease_deadline.py (workers in a thread of the test process) --------

TICKS: dict[tuple[str, int], dict[str, float]] = {}


@registry.handler("chaos.tick@1")
async def tick(ctx: StepContext) -> Any:
    """Runs ``seconds``, noting (monotonic) when it started, last ran and ended, per attempt."""
    seen = TICKS.setdefault((ctx.idempotency_key, ctx.attempt), {})
    seen["started"] = seen["last"] = time.monotonic()
    try:
        end = seen["started"] + float(ctx.input["seconds"])
        while time.monotonic() < end and not ctx.cancelled():
            seen["last"] = time.monotonic()
            await asyncio.sleep(0.01)
        return {"attempt": ctx.attempt}
    finally:
        seen["ended"] = time.monotonic()
