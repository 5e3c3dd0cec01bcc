"""Worker throughput and recovery, against a fresh embedded PostgreSQL.

    .venv/bin/python bench/worker_throughput.py [--steps 10000] [--workers 1,2,4]
                                                [--concurrency 16] [--trials 5]

Throughput: N single-step no-op runs are enqueued in bulk, then 1, 2, 4 worker processes
drain them; steps/s is measured on the database clock, from the first lease to the last
completion (process start-up excluded). Recovery: a worker holding a step is SIGKILLed (the
step resumes after lease expiry + the other worker's reaper) or SIGTERMed with no grace (its
lease is released and the other worker takes the step at once); the time from the signal to
the step succeeding elsewhere, median and max over ``--trials``.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(1, str(ROOT))  # bench.* from the repository root

from rara.definitions.parse import definition_from_object  # noqa: E402
from rara.definitions.registry import apply_definition  # noqa: E402
from rara.pg.clone import clone_database  # noqa: E402
from rara.pg.embedded import temporary_server  # noqa: E402
from rara.pg.migrate import migrate  # noqa: E402
from tests.support.leasing import enqueue_single_step_runs  # noqa: E402
from tests.support.workers import worker_processes  # noqa: E402

Conn = psycopg.Connection[Any]


def _wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.005)


def _define(conn: Conn, name: str, capability: str) -> int:
    doc = {
        "apiVersion": "rara.dev/v1alpha1",
        "kind": "WorkflowDefinition",
        "metadata": {"name": name},
        "spec": {
            "steps": [
                {
                    "key": "s",
                    "capability": capability,
                    "retry": {"maxAttempts": 5, "initialDelay": "1ms"},
                }
            ]
        },
    }
    return apply_definition(conn, definition_from_object(doc)).version


def _registered(conn: Conn, names: list[str]) -> bool:
    row = conn.execute(
        "SELECT count(*) FROM rara_workers WHERE id = ANY(%s) AND stopped_at IS NULL", (names,)
    ).fetchone()
    return bool(row and row[0] == len(names))


def _fresh_db(admin: Conn, template: str, name: str, base_url: str) -> str:
    admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    clone_database(admin, template, name)
    return base_url.rsplit("/", 1)[0] + "/" + name


def throughput(
    admin: Conn, base_url: str, logs: Path, steps: int, workers: int, concurrency: int
) -> float:
    url = _fresh_db(admin, "bench_template", f"bench_tp_{workers}", base_url)
    with psycopg.connect(url, autocommit=True) as conn:
        version = _define(conn, "noop", "bench.noop@1")
        enqueue_single_step_runs(
            conn, definition="noop", version=version, key="s", capability="bench.noop@1", n=steps
        )
        names = [f"tp{workers}-{i}" for i in range(workers)]
        with worker_processes(url, names, logs, concurrency=concurrency):
            _wait(
                lambda: (
                    (
                        conn.execute(
                            "SELECT count(*) FROM rara_steps WHERE status = 'succeeded'"
                        ).fetchone()
                        or (0,)
                    )[0]
                    == steps
                ),
                timeout=600,
                what="the queue to drain",
            )
        row = conn.execute(
            "SELECT extract(epoch FROM max(ended_at) - min(started_at)), "
            "count(*) FROM rara_attempts"
        ).fetchone()
        assert row is not None
        assert row[1] == steps, row
        return steps / float(row[0])


def recovery(admin: Conn, base_url: str, logs: Path, sig: int, trial: int, lease: float) -> float:
    url = _fresh_db(admin, "bench_template", f"bench_rec_{sig}_{trial}", base_url)
    with psycopg.connect(url, autocommit=True) as conn:
        version = _define(conn, "sleepy", "bench.sleep@1")
        flags = {"lease_seconds": lease, "reaper_seconds": lease / 4, "shutdown_grace_seconds": 0}
        with worker_processes(url, ["victim"], logs, **flags) as (victim,):
            _wait(lambda: _registered(conn, ["victim"]), 30, "victim")
            [run_id] = enqueue_single_step_runs(
                conn,
                definition="sleepy",
                version=version,
                key="s",
                capability="bench.sleep@1",
                n=1,
                input={"seconds": 600},
            )
            _wait(
                lambda: (
                    conn.execute(
                        "SELECT 1 FROM rara_steps WHERE run_id = %s AND status = 'running'",
                        (run_id,),
                    ).fetchone()
                    is not None
                ),
                30,
                "the step to be leased",
            )
            with worker_processes(url, ["rescuer"], logs, **flags):
                _wait(lambda: _registered(conn, ["rescuer"]), 30, "rescuer")
                victim.send_signal(sig)
                t0 = time.monotonic()
                _wait(
                    lambda: (
                        conn.execute(
                            "SELECT 1 FROM rara_steps WHERE run_id = %s AND status = 'succeeded'",
                            (run_id,),
                        ).fetchone()
                        is not None
                    ),
                    120,
                    "the step to succeed elsewhere",
                )
                return time.monotonic() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--lease", type=float, default=2.0, help="lease seconds in recovery trials")
    args = parser.parse_args()
    server = temporary_server(fast=True)
    logs = Path(tempfile.mkdtemp(prefix="rara-bench-logs-"))
    try:
        base = server.up()
        admin_url = server.url("postgres")
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute("CREATE DATABASE bench_template")
            migrate(server.url("bench_template"))
            print(
                f"throughput: {args.steps} no-op single-step runs, concurrency "
                f"{args.concurrency} per worker"
            )
            for n in (int(w) for w in args.workers.split(",")):
                rate = throughput(admin, base, logs, args.steps, n, args.concurrency)
                print(f"  {n} worker(s): {rate:8.0f} steps/s")
            for name, sig in (("SIGKILL", signal.SIGKILL), ("SIGTERM", signal.SIGTERM)):
                times = [
                    recovery(admin, base, logs, sig, i, args.lease) for i in range(args.trials)
                ]
                print(
                    f"recovery after {name} (lease {args.lease}s): median "
                    f"{statistics.median(times):.2f}s, max {max(times):.2f}s over {len(times)}"
                )
    finally:
        server.destroy()
        print(f"(worker logs: {logs})")


if __name__ == "__main__":
    main()
