"""Event write throughput, and what progress reporting costs a no-op step.

    .venv/bin/python -m bench.progress_cost [--steps 3000] [--events 50000]

1. Events/s: ``step_progress_many`` (the worker's batched, fenced progress statement) for
   1,000 running attempts, batches of 100 attempts per statement, on one connection.
2. Cost on a no-op step: one worker process drains the same number of single-step runs whose
   handler does nothing, reports progress once, or reports 100 times (coalesced).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import psycopg
from psycopg.rows import scalar_row
from psycopg.types.json import Jsonb

from bench.common import bench_database, bulk_ready_steps
from rara.pg.queries import amany
from tests.support.definitions import noop_definition
from tests.support.leasing import lease_now


async def event_throughput(url: str, events: int) -> float:
    with psycopg.connect(url, autocommit=True) as conn:
        noop_definition(conn, name="events", capability="bench.events@1")
        bulk_ready_steps(conn, 1000, capability="bench.events@1", definition="events")
        leased = lease_now(conn, ["bench.events@1"], worker="bench", limit=1000, lease_seconds=600)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as aconn:
        seq, written, started = 0, 0, time.perf_counter()
        while written < events:
            seq += 1
            for i in range(0, len(leased), 100):
                batch = leased[i : i + 100]
                rows = await amany(
                    aconn,
                    "step_progress_many",
                    scalar_row,
                    worker="bench",
                    step_ids=[r.id for r in batch],
                    tokens=[r.lease_token for r in batch],
                    seqs=[seq] * len(batch),
                    fractions=[0.5] * len(batch),
                    messages=["working"] * len(batch),
                    metrics=[Jsonb({"loss": 0.1})] * len(batch),
                )
                written += len(rows)
        return written / (time.perf_counter() - started)


def drain_rate(url: str, capability: str, steps: int) -> float:
    import subprocess
    import sys

    with psycopg.connect(url, autocommit=True) as conn:
        name = capability.split("@")[0].replace(".", "-")
        noop_definition(conn, name=name, capability=capability)
        bulk_ready_steps(conn, steps, capability=capability, definition=name)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rara.worker",
                "--handlers",
                "bench.progress_handlers",
                "--database-url",
                url,
                "--log-level",
                "warning",
                "--concurrency",
                "32",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                (left,) = conn.execute(
                    "SELECT count(*) FROM rara_steps WHERE capability = %s "
                    "AND status <> 'succeeded'",
                    (capability,),
                ).fetchone() or (1,)
                if left == 0:
                    break
                time.sleep(0.05)
            first, last = conn.execute(
                "SELECT min(started_at), max(finished_at) FROM rara_steps WHERE capability = %s",
                (capability,),
            ).fetchone() or (None, None)
        finally:
            proc.terminate()
            proc.wait(30)
    assert first is not None
    assert last is not None
    return steps / (last - first).total_seconds()


def main() -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--events", type=int, default=50_000)
    args = parser.parse_args()
    out: dict[str, Any] = {}
    with bench_database() as url:
        out["events_per_s"] = asyncio.run(event_throughput(url, args.events))
        print(f"event writes: {out['events_per_s']:,.0f} events/s (batches of 100, one connection)")
        for label, capability in (
            ("no progress", "bench.silent@1"),
            ("progress once", "bench.progress1@1"),
            ("progress x100", "bench.progress100@1"),
        ):
            out[label] = drain_rate(url, capability, args.steps)
            print(f"no-op step, {label:<14}: {out[label]:,.0f} steps/s (1 worker)")
    return out


if __name__ == "__main__":
    print(json.dumps(main()))
