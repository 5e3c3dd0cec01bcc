"""How soon a run can start after its worker and executor start (issue 18, item 2).

Starting a run is refused until a live worker serves every capability it needs, so what a
user feels is the time from a process starting to the database listing its capabilities.
Two orders are timed on the embedded PostgreSQL, each a few times:

- worker first, then its executor ``--delay`` seconds later (a restarted or scaled-from-zero
  GPU pod): executor start -> its capability served;
- executor first, then the worker: worker start -> both its in-process and the executor's
  capabilities served.

    .venv/bin/python bench/servable_latency.py [--rounds 3] [--delay 3]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(1, str(ROOT))  # bench.* from the repository root

from bench.common import bench_database  # noqa: E402
from rara.pg import workers  # noqa: E402
from tests.support.executors import start_executor  # noqa: E402

IN_PROCESS = "test.echo@1"  # served by tests/worker/handlers (in-process)
REMOTE = "test.hang@1"  # served only by the executor (its conformance plugins)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def served(url: str) -> set[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        return workers.capabilities(conn, alive_seconds=30.0)


def wait_served(url: str, wanted: set[str], limit: float = 60.0) -> float:
    start = time.monotonic()
    while not wanted <= served(url):
        if time.monotonic() - start > limit:
            raise TimeoutError(f"{sorted(wanted)} not served after {limit}s")
        time.sleep(0.05)
    return time.monotonic() - start


def start_worker(url: str, address: str, home: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rara.worker",
            "--handlers",
            "tests.worker.handlers",
            "--database-url",
            url,
            "--executor-endpoint",
            address,
            "--artifact-root",
            str(home),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop(*procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--delay", type=float, default=3.0)
    args = parser.parse_args()
    worker_first, executor_first = [], []
    with bench_database() as url, tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        for _ in range(args.rounds):
            address = f"127.0.0.1:{free_port()}"
            worker = start_worker(url, address, home)
            wait_served(url, {IN_PROCESS})
            time.sleep(args.delay)  # the scenario itself: the executor comes up later
            executor = start_executor(address, home)
            worker_first.append(wait_served(url, {REMOTE}))
            stop(worker, executor)
            wait_gone = time.monotonic()
            while REMOTE in served(url) and time.monotonic() - wait_gone < 30:
                time.sleep(0.05)
            address = f"127.0.0.1:{free_port()}"
            executor = start_executor(address, home)
            time.sleep(1.0)  # the executor is up before its worker
            worker = start_worker(url, address, home)
            executor_first.append(wait_served(url, {IN_PROCESS, REMOTE}))
            stop(worker, executor)
    for name, times in (
        (f"worker first, executor +{args.delay:g}s: executor start -> served", worker_first),
        ("executor first: worker start -> all served", executor_first),
    ):
        print(
            f"{name}: median {statistics.median(times):.2f} s, max {max(times):.2f} s "
            f"({', '.join(f'{t:.2f}' for t in times)})"
        )


if __name__ == "__main__":
    main()
