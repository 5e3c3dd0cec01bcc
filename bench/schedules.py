"""Schedules: ``make bench``'s ``schedules`` section (bench/run.py; issue 33, item 6).

Two figures, with two ``rara schedules run`` firing processes on the bench's server:

- **idle**: 10,000 schedules whose next tick is a year away; once the firers sleep, the CPU
  they and the server spend over a window (goal: none measurable between ticks);
- **tick → run started**: with those 10,000 still there, one more schedule ticking every
  second; for each tick, the run's ``created_at`` (the firing transaction's start, the
  database's clock) minus the tick: p50/p99 ms (goal: p99 <= 1 s).

On its own:  .venv/bin/python -m bench.schedules [--quick]
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from bench.common import CpuMeter, Server, percentiles, wait_until
from rara.schedules.manage import apply_schedule
from rara.schedules.model import schedule_from_object
from tests.support.definitions import noop_definition

IDLE_SCHEDULES = 10_000
RARA = str(Path(sys.executable).parent / "rara")


def _schedule(name: str, cron: str) -> Any:
    return schedule_from_object(
        {
            "apiVersion": "rara.dev/v1alpha1",
            "kind": "WorkflowSchedule",
            "metadata": {"name": name},
            "spec": {"definition": "noop", "schedule": cron, "successfulRunsHistoryLimit": 1000},
        }
    )


@contextmanager
def firers(url: str, logs: Path, n: int = 2) -> Iterator[list[int]]:
    env = {**os.environ, "DATABASE_URL": url}
    procs = []
    for i in range(n):
        with open(logs / f"firer{i}.log", "ab") as out:
            procs.append(
                subprocess.Popen([RARA, "schedules", "run"], env=env, stdout=out, stderr=out)
            )
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
            p.wait(30)


def measure(
    server: Server, logs: Path, *, quick: bool = False, say: Callable[[str], None] = print
) -> dict[str, Any]:
    url = server.fresh("bench_schedules")
    try:
        return _measure(url, logs, quick, say)
    finally:
        server.drop("bench_schedules")


def _measure(url: str, logs: Path, quick: bool, say: Callable[[str], None]) -> dict[str, Any]:
    window = 10.0 if quick else 30.0
    ticks = 20 if quick else 60
    with psycopg.connect(url, autocommit=True) as conn:
        noop_definition(conn)
        started = time.monotonic()
        with conn.transaction():
            for i in range(IDLE_SCHEDULES):
                apply_schedule(conn, _schedule(f"idle-{i}", "0 0 1 1 *"))
        say(f"{IDLE_SCHEDULES:,} idle schedules applied in {time.monotonic() - started:.1f} s")
        with firers(url, logs) as pids:
            meter = CpuMeter(url, pids)

            # Asleep: each firer's last statement read the next due tick, and it waits.
            def asleep() -> bool:
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle'"
                    " AND query LIKE '%min(next_tick)%' AND pid <> pg_backend_pid()"
                ).fetchone()
                return row is not None and row[0] == len(pids)

            wait_until(asleep, 60, "the firers asleep")
            meter.start()
            time.sleep(window)  # the figure is CPU over a stretch of wall time
            meter.stop()
            idle = {
                "schedules": IDLE_SCHEDULES,
                "window_s": window,
                "firers_cpu_s": round(meter.processes, 3),
                "server_cpu_s": round(meter.postgres, 3),
                "cpu_ms_per_s": round((meter.processes + meter.postgres) / window * 1000, 2),
            }
            say(
                f"idle: {IDLE_SCHEDULES:,} schedules, 2 firers, {window:.0f} s: firers "
                f"{idle['firers_cpu_s']:.3f} s CPU, server {idle['server_cpu_s']:.3f} s CPU"
            )
            apply_schedule(conn, _schedule("every-second", "* * * * * *"))

            def fired() -> bool:
                row = conn.execute(
                    "SELECT count(*) FROM rara_schedule_ticks WHERE schedule = 'every-second'"
                ).fetchone()
                return row is not None and row[0] >= ticks

            wait_until(fired, ticks + 30, f"{ticks} ticks fired")
        rows = conn.execute(
            "SELECT extract(epoch FROM r.created_at - t.tick) * 1000"
            " FROM rara_schedule_ticks t JOIN rara_runs r ON r.id = t.run_id"
            " WHERE t.schedule = 'every-second' ORDER BY t.tick"
        ).fetchall()
    lag = percentiles([float(r[0]) for r in rows])
    say(
        f"tick -> run started ({len(rows)} ticks): p50 {lag['p50']:.1f} ms, p99 {lag['p99']:.1f} ms"
    )
    return {"idle": idle, "tick_to_run_ms": {**lag, "ticks": len(rows)}}


if __name__ == "__main__":
    from bench.common import bench_database

    with bench_database() as bench_url:
        logs_dir = Path(os.environ.get("TMPDIR", "/tmp")) / "rara-bench-schedules"
        logs_dir.mkdir(exist_ok=True)
        print(json.dumps(measure(Server(bench_url), logs_dir, quick="--quick" in sys.argv)))
