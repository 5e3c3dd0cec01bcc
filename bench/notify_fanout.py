"""What a NOTIFY costs the server per listening worker process, and what a worker group saves.

    .venv/bin/python -m bench.notify_fanout [--workers 8] [--rate 100] [--seconds 20]

An idle fleet of ``--workers`` worker processes (polling 30 s apart, so that their polls are
not what is measured) on a fresh embedded server, two ways: each process with a LISTEN
connection of its own (N times ``rara worker``), and one group of N (``rara worker --processes
N``: one listener, relayed). The bench sends ``NOTIFY rara_ready`` for a capability nobody
serves, ``--rate`` a second for ``--seconds``, each in a transaction of its own as a step's
start sends it, waits until every listener has read them all (``pg_notification_queue_usage``
back to 0), and reads CPU seconds from /proc (``bench.proc_cpu``): the server's (its
postmaster's processes, the sender's backend left out) and the workers' (the supervisor and
its members in a group). The same window's heartbeats and reaper passes are in both figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from bench.common import bench_database, scalar, wait_until
from bench.proc_cpu import postmaster_of, process_cpu, server_cpu
from tests.support.workers import worker_processes

CAPABILITY = "bench.nobody@1"


def _children(pid: int) -> list[int]:
    """A process's children (a group's members), from /proc (Linux)."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def measure(url: str, workers: int, grouped: bool, rate: float, seconds: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, psycopg.connect(url, autocommit=True) as conn:
        names = ["group"] if grouped else [f"w{i}" for i in range(workers)]
        flags: dict[str, Any] = {"poll_seconds": 30}
        if grouped:
            flags["processes"] = workers
        ids = [f"group-{k}" for k in range(workers)] if grouped else names
        with worker_processes(url, names, Path(tmp), **flags) as procs:
            wait_until(
                lambda: (
                    scalar(
                        conn,
                        "SELECT count(*) FROM rara_workers "
                        "WHERE id = ANY(%s) AND stopped_at IS NULL",
                        (ids,),
                    )
                    == workers
                ),
                60,
                "workers to register",
            )
            pids = [p.pid for p in procs] + [c for p in procs for c in _children(p.pid)]
            sender = int(scalar(conn, "SELECT pg_backend_pid()"))
            postmaster = postmaster_of(sender)
            time.sleep(2.0)  # past the start's leases, connects and registrations
            listeners = scalar(
                conn, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %%'"
            )

            def sample() -> tuple[float, float, float, float]:
                return (
                    server_cpu(postmaster),
                    process_cpu(sender),
                    sum(process_cpu(pid) for pid in pids),
                    process_cpu(procs[0].pid) if grouped else 0.0,
                )

            before = sample()
            sent, began = 0, time.monotonic()
            while sent < rate * seconds:
                conn.execute("SELECT pg_notify('rara_ready', %s)", (CAPABILITY,))
                sent += 1
                time.sleep(max(0.0, began + sent / rate - time.monotonic()))
            wait_until(
                lambda: scalar(conn, "SELECT pg_notification_queue_usage()") == 0,
                60,
                "every listener to read the notifications",
            )
            after = sample()
        server = (after[0] - before[0]) - (after[1] - before[1])
        return {
            "mode": f"group of {workers}" if grouped else f"{workers} workers",
            "listening_backends": listeners,
            "notifications": sent,
            "server_cpu_s": round(server, 3),
            "server_us_per_notification": round(server / sent * 1e6, 1),
            "workers_cpu_s": round(after[2] - before[2], 3),
            "of_which_supervisor_s": round(after[3] - before[3], 3),
        }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.notify_fanout", description=__doc__)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--rate", type=float, default=100.0, help="notifications a second")
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args(argv)
    with bench_database() as url:
        rows = [
            measure(url, args.workers, grouped, args.rate, args.seconds)
            for grouped in (False, True)
        ]
    for row in rows:
        print(json.dumps(row), flush=True)
    apart, grouped = rows
    saved = apart["server_cpu_s"] - grouped["server_cpu_s"]
    per = saved / (apart["notifications"] * (args.workers - 1)) * 1e6
    print(f"server CPU saved per notification per listener not held: {per:.1f} µs", flush=True)


if __name__ == "__main__":
    sys.exit(main())
