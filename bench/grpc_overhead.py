"""Per-job overhead of the gRPC executor path, over loopback.

Starts ``python -m rara.executor.main`` as a separate process (as in production, the
worker and the executor do not share an interpreter), with token auth on, then measures:

1. round-trip of a no-op job (``test.echo@1``: accepted, running, succeeded), one at a
   time: p50/p99 in ms — the fixed cost a gRPC step pays over an in-process one;
2. ``--streams`` Execute streams open at once (``test.sleep@1``), all of which must
   succeed — the concurrency the server was seen to carry;
3. no-op jobs with ``--streams`` in flight: throughput in jobs/s.

``--protocol session`` sends every job on one Session stream instead of an Execute call each.

Usage: ``.venv/bin/python bench/grpc_overhead.py [--jobs 1000] [--streams 200]
[--protocol execute|session]``
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rara.executor.client import ExecutorClient, Protocol, make_job

TOKEN = "bench-token"


async def start_executor(tmp: Path, streams: int) -> tuple[asyncio.subprocess.Process, str]:
    (tmp / "token").write_text(TOKEN)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rara.executor.main",
        "--listen",
        "127.0.0.1:0",
        "--token-file",
        str(tmp / "token"),
        "--artifact-root",
        str(tmp / "artifacts"),
        "--plugins",
        "rara.executor.conformance_plugins",
        "--max-concurrency",
        str(streams),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    async with asyncio.timeout(60):
        while line := (await proc.stdout.readline()).decode():
            if m := re.search(r"listening on (\S+)$", line.strip()):
                # Keep draining stdout so the executor's logging never blocks on a full pipe.
                asyncio.get_running_loop().create_task(proc.stdout.read())
                return proc, m.group(1)
    raise RuntimeError("executor did not start")


async def one_job(
    client: ExecutorClient, capability: str, key: str, payload: dict[str, object]
) -> str:
    last = ""
    async for event in client.execute(
        make_job(capability=capability, idempotency_key=key, payload=payload)
    ):
        last = str(event.WhichOneof("event"))
    return last


def pct(values: list[float], p: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(p) - 1]


async def main(jobs: int, streams: int, protocol: Protocol = "execute") -> None:
    with tempfile.TemporaryDirectory() as tmp:
        proc, address = await start_executor(Path(tmp), streams)
        try:
            async with ExecutorClient(address, token=TOKEN) as client:
                client.protocol = protocol
                for i in range(50):  # warm up channel, interpreter caches, thread pools
                    await one_job(client, "test.echo@1", f"warm-{i}", {})
                latencies = []
                for i in range(jobs):
                    t0 = time.perf_counter()
                    assert await one_job(client, "test.echo@1", f"seq-{i}", {}) == "succeeded"
                    latencies.append((time.perf_counter() - t0) * 1000)
                print(
                    f"no-op job round-trip over loopback ({jobs} sequential jobs): "
                    f"p50 {pct(latencies, 50):.2f} ms, p99 {pct(latencies, 99):.2f} ms, "
                    f"max {max(latencies):.2f} ms"
                )

                t0 = time.perf_counter()
                outcomes = await asyncio.gather(
                    *(
                        one_job(client, "test.sleep@1", f"conc-{i}", {"seconds": 1.0, "steps": 4})
                        for i in range(streams)
                    )
                )
                wall = time.perf_counter() - t0
                ok = outcomes.count("succeeded")
                print(
                    f"concurrent streams: {streams} open at once (1 s sleep jobs, progress "
                    f"on): {ok}/{streams} succeeded in {wall:.2f} s"
                )

                sem = asyncio.Semaphore(streams)

                async def bounded(i: int) -> str:
                    async with sem:
                        return await one_job(client, "test.echo@1", f"tp-{i}", {})

                total = max(jobs, streams * 5)
                t0 = time.perf_counter()
                outcomes = await asyncio.gather(*(bounded(i) for i in range(total)))
                wall = time.perf_counter() - t0
                print(
                    f"throughput: {total} no-op jobs, {streams} in flight: "
                    f"{total / wall:.0f} jobs/s ({outcomes.count('succeeded')} succeeded)"
                )
        finally:
            proc.terminate()
            await proc.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument(
        "--protocol",
        choices=["execute", "session"],
        default="execute",
        help="a call per job (Execute) or every job on one Session stream",
    )
    args = parser.parse_args()
    asyncio.run(main(args.jobs, args.streams, args.protocol))
