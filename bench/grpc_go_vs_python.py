"""Per-step overhead of the Go executor vs the Python one: a no-op job over gRPC, loopback.

Starts both executors as processes (``python -m rara.executor.main`` and the Go binary from
``executor/go/build.sh``), token auth on, each serving the conformance probes, and drives the
same no-op job (``test.echo@1`` with an empty payload: accepted, running, succeeded) through
the same Python client (``rara.executor.client``, what the worker's adapter builds on):

1. one at a time, ``--jobs`` jobs: round-trip p50/p99 in ms, and steps/s;
2. ``--inflight`` jobs at once, ``--jobs`` in all: steps/s;
3. the executor process's CPU (user + system, /proc) per job over both phases, which is the
   executor's own cost, free of the client's (one Python process drives both: at high
   concurrency the client, not the executor, is what saturates).

The executors run one after the other, never together, and the order alternates with
``--rounds`` so drift on a shared machine hits both. Prints a table; ``--json`` the numbers.

``--protocol session`` sends the jobs on one Session stream per executor instead of an Execute
call each (both executors serve it).

Usage: ``.venv/bin/python bench/grpc_go_vs_python.py [--jobs 2000] [--inflight 32] [--rounds 2]
[--protocol execute|session]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # bench.* from the root

from bench.grpc_overhead import TOKEN, one_job, pct
from bench.proc_cpu import process_cpu
from rara.executor.client import ExecutorClient, Protocol

ROOT = Path(__file__).resolve().parents[1]


async def _start(argv: list[str]) -> tuple[asyncio.subprocess.Process, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )
    assert proc.stdout is not None
    async with asyncio.timeout(60):
        while line := (await proc.stdout.readline()).decode():
            if "listening on " in line:
                asyncio.get_running_loop().create_task(proc.stdout.read())
                return proc, line.strip().rsplit(" ", 1)[1]
    raise RuntimeError(f"{argv[0]} did not start")


def _argv(kind: str, tmp: Path, inflight: int, go_binary: Path) -> list[str]:
    common = [
        "--listen",
        "127.0.0.1:0",
        "--token-file",
        str(tmp / "token"),
        "--artifact-root",
        str(tmp / "artifacts"),
        "--max-concurrency",
        str(inflight),
    ]
    if kind == "python":
        return [
            sys.executable,
            "-m",
            "rara.executor.main",
            *common,
            "--plugins",
            "rara.executor.conformance_plugins",
        ]
    return [str(go_binary), *common, "--plugins", "builtin,conformance"]


async def measure(
    kind: str, tmp: Path, jobs: int, inflight: int, go_binary: Path, protocol: Protocol
) -> dict[str, Any]:
    proc, address = await _start(_argv(kind, tmp, inflight, go_binary))
    try:
        async with ExecutorClient(address, token=TOKEN) as client:
            client.protocol = protocol
            for i in range(100):  # warm up channel, caches, the Go runtime's and Python's
                await one_job(client, "test.echo@1", f"warm-{kind}-{i}", {})
            cpu0 = process_cpu(proc.pid)
            latencies = []
            t0 = time.perf_counter()
            for i in range(jobs):
                s = time.perf_counter()
                assert await one_job(client, "test.echo@1", f"seq-{i}", {}) == "succeeded"
                latencies.append((time.perf_counter() - s) * 1000)
            sequential_wall = time.perf_counter() - t0

            sem = asyncio.Semaphore(inflight)

            async def bounded(i: int) -> str:
                async with sem:
                    return await one_job(client, "test.echo@1", f"conc-{i}", {})

            t0 = time.perf_counter()
            outcomes = await asyncio.gather(*(bounded(i) for i in range(jobs)))
            concurrent_wall = time.perf_counter() - t0
            assert outcomes.count("succeeded") == jobs, outcomes
            cpu = process_cpu(proc.pid) - cpu0
    finally:
        proc.terminate()
        await proc.wait()
    return {
        "p50_ms": pct(latencies, 50),
        "p99_ms": pct(latencies, 99),
        "sequential_steps_per_s": jobs / sequential_wall,
        "concurrent_steps_per_s": jobs / concurrent_wall,
        "executor_cpu_ms_per_step": cpu * 1000 / (2 * jobs),
    }


def build_go() -> Path:
    done = subprocess.run(
        [str(ROOT / "executor/go/build.sh")], check=True, capture_output=True, text=True
    )
    return Path(done.stdout.strip())


async def main(
    jobs: int, inflight: int, rounds: int, protocol: Protocol = "execute"
) -> dict[str, Any]:
    built = time.perf_counter()
    go_binary = await asyncio.to_thread(build_go)
    build_s = time.perf_counter() - built
    runs: dict[str, list[dict[str, Any]]] = {"python": [], "go": []}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "token").write_text(TOKEN)
        for r in range(rounds):
            for kind in ("python", "go") if r % 2 == 0 else ("go", "python"):
                runs[kind].append(await measure(kind, tmp, jobs, inflight, go_binary, protocol))
    result: dict[str, Any] = {
        kind: {key: round(statistics.median([m[key] for m in ms]), 3) for key in ms[0]}
        for kind, ms in runs.items()
    }
    result["setup"] = {
        "jobs": jobs,
        "inflight": inflight,
        "rounds": rounds,
        "protocol": protocol,
        "go_build_s": round(build_s, 2),
        "load_avg": os.getloadavg(),
        "cpus": os.cpu_count(),
    }
    return result


def print_table(r: dict[str, Any]) -> None:
    s = r["setup"]
    print(
        f"no-op job over gRPC (test.echo@1, loopback, token auth), {s['jobs']} jobs per "
        f"phase, {s['protocol']}, median of {s['rounds']} rounds, {s['cpus']} CPUs, "
        f"load {s['load_avg'][0]:.1f}"
    )
    print(
        f"{'executor':10} {'p50 ms':>8} {'p99 ms':>8} {'seq steps/s':>12} "
        f"{'steps/s @' + str(s['inflight']):>13} {'exec CPU ms/step':>17}"
    )
    for kind in ("python", "go"):
        m = r[kind]
        print(
            f"{kind:10} {m['p50_ms']:8.2f} {m['p99_ms']:8.2f} "
            f"{m['sequential_steps_per_s']:12.0f} {m['concurrent_steps_per_s']:13.0f} "
            f"{m['executor_cpu_ms_per_step']:17.3f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--inflight", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON too")
    parser.add_argument(
        "--protocol",
        choices=["execute", "session"],
        default="execute",
        help="a call per job (Execute) or every job on one Session stream",
    )
    args = parser.parse_args()
    numbers = asyncio.run(main(args.jobs, args.inflight, args.rounds, args.protocol))
    print_table(numbers)
    if args.json:
        print(json.dumps(numbers, indent=2))
