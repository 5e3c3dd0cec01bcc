"""Triggers: ``make bench``'s ``triggers`` section (bench/run.py; docs/triggers.md).

Three figures, with two ``rara triggers serve`` processes on the bench's server:

- **idle**: 1,000 objects triggers, each on an empty folder polled every 30 s (the polled kind
  at its default; webhook triggers cost nothing until a delivery comes), the CPU the two
  processes and the server spend over a window once the first passes are done;
- **delivery → run started**: signed webhook deliveries sent one after another over HTTP;
  for each, the time from sending it to the answer naming its new run (the run exists when
  the answer comes): p50/p99 ms;
- **file written → run started**: with those 1,000 triggers still there, one more trigger
  polling every second; for each file written, the run's ``created_at`` minus the write
  (one host, one clock), the files written at random moments of the interval: p50/p99 ms —
  the poll interval's half, on average, plus the pass.

On its own:  .venv/bin/python -m bench.triggers [--quick]
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench.common import CpuMeter, Server, percentiles, wait_until
from rara.triggers.manage import apply_trigger
from rara.triggers.model import trigger_from_object
from rara.triggers.webhook_events import signature
from tests.support.definitions import noop_definition

IDLE_TRIGGERS = 1_000
RARA = str(Path(sys.executable).parent / "rara")
SECRET = "bench-only-secret"


def _trigger(name: str, **kind: Any) -> Any:
    return trigger_from_object(
        {
            "apiVersion": "rara.dev/v1alpha1",
            "kind": "WorkflowTrigger",
            "metadata": {"name": name},
            "spec": {"definition": "noop", **kind},
        }
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def servers(url: str, root: Path, logs: Path, n: int = 2) -> Iterator[tuple[list[int], int]]:
    """n `rara triggers serve` processes; (their pids, the first one's port)."""
    env = {**os.environ, "DATABASE_URL": url, "RARA_SECRET_BENCH_HOOK": SECRET}
    procs, ports = [], []
    for i in range(n):
        ports.append(_free_port())
        args = [RARA, "triggers", "serve", "--port", str(ports[-1]), "--objects-root", str(root)]
        with open(logs / f"serve{i}.log", "ab") as out:
            procs.append(subprocess.Popen(args, env=env, stdout=out, stderr=out))

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ports[0]}/readyz", timeout=2):
                return True
        except OSError:
            return False

    try:
        wait_until(ready, 60, "rara triggers serve ready")
        yield [p.pid for p in procs], ports[0]
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
            p.wait(30)


def _deliver(port: int, delivery_id: str) -> float:
    body = json.dumps({"documents": [delivery_id]}).encode()
    stamp = str(int(time.time()))
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/hooks/default/bench-hook",
        data=body,
        method="POST",
        headers={
            "Rara-Delivery": delivery_id,
            "Rara-Timestamp": stamp,
            "Rara-Signature": signature(SECRET, stamp, delivery_id, body),
        },
    )
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=10) as answer:
        if answer.status != 201:
            raise AssertionError(f"delivery {delivery_id}: {answer.status}")
    return (time.perf_counter() - started) * 1000


def measure(
    server: Server, logs: Path, *, quick: bool = False, say: Callable[[str], None] = print
) -> dict[str, Any]:
    url = server.fresh("bench_triggers")
    try:
        with tempfile.TemporaryDirectory(prefix="rara-bench-triggers-") as root:
            return _measure(url, Path(root), logs, quick, say)
    finally:
        server.drop("bench_triggers")


def _measure(
    url: str, root: Path, logs: Path, quick: bool, say: Callable[[str], None]
) -> dict[str, Any]:
    window = 10.0 if quick else 30.0
    deliveries = 50 if quick else 200
    files = 10 if quick else 40
    with psycopg.connect(url, autocommit=True) as conn:
        noop_definition(conn)
        with conn.transaction():
            for i in range(IDLE_TRIGGERS):
                (root / f"idle-{i}").mkdir()
                apply_trigger(conn, _trigger(f"idle-{i}", objects={"location": f"idle-{i}"}))
        apply_trigger(
            conn,
            _trigger("bench-hook", webhook={"secretRef": {"name": "bench-hook"}}),
        )
        with servers(url, root, logs) as (pids, port):
            meter = CpuMeter(url, pids)

            def first_passes_done() -> bool:
                row = conn.execute(
                    "SELECT count(*) FROM rara_triggers WHERE kind = 'objects'"
                    " AND next_poll > now() + interval '5 seconds'"
                ).fetchone()
                return row is not None and row[0] == IDLE_TRIGGERS

            wait_until(first_passes_done, 120, "the first passes of the idle triggers")
            meter.start()
            time.sleep(window)  # the figure is CPU over a stretch of wall time
            meter.stop()
            idle = {
                "triggers": IDLE_TRIGGERS,
                "window_s": window,
                "serve_cpu_s": round(meter.processes, 3),
                "server_cpu_s": round(meter.postgres, 3),
                "cpu_ms_per_s": round((meter.processes + meter.postgres) / window * 1000, 2),
            }
            say(
                f"idle: {IDLE_TRIGGERS:,} objects triggers (30 s polls), 2 processes, "
                f"{window:.0f} s: processes {idle['serve_cpu_s']:.3f} s CPU, server "
                f"{idle['server_cpu_s']:.3f} s CPU"
            )

            webhook = percentiles([_deliver(port, f"d-{i}") for i in range(deliveries)])
            say(
                f"delivery -> run started ({deliveries} deliveries): p50 {webhook['p50']:.1f} ms,"
                f" p99 {webhook['p99']:.1f} ms"
            )

            (root / "watched").mkdir()
            apply_trigger(
                conn, _trigger("bench-files", objects={"location": "watched", "pollSeconds": 1})
            )
            wait_until(
                lambda: (
                    conn.execute(
                        "SELECT passes = 0 AND next_poll > now() FROM rara_triggers"
                        " WHERE name = 'bench-files'"
                    ).fetchone()
                    == (True,)
                ),
                60,
                "the file trigger's first pass",
            )
            written: list[datetime] = []
            arrivals = random.Random(7)
            for i in range(files):
                # Changes come at any moment of a poll interval, not just after a pass.
                time.sleep(arrivals.uniform(0, 1))
                written.append(datetime.now(UTC))
                (root / "watched" / f"{i}.txt").write_text(str(i))
                wait_until(_runs_reach(conn, "bench-files", i + 1), 30, f"file {i}'s run")
            created = [
                row[0]
                for row in conn.execute(
                    "SELECT created_at FROM rara_runs WHERE idempotency_key LIKE"
                    " 'trigger:bench-files:%' ORDER BY id"
                )
            ]
    lag = percentiles(
        [(c - w).total_seconds() * 1000 for c, w in zip(created, written, strict=True)]
    )
    say(
        f"file written -> run started ({files} files, 1 s polls): p50 {lag['p50']:.0f} ms, "
        f"p99 {lag['p99']:.0f} ms"
    )
    return {
        "idle": idle,
        "delivery_to_run_ms": {**webhook, "deliveries": deliveries},
        "file_to_run_ms": {**lag, "files": files, "poll_s": 1},
    }


def _runs_reach(conn: psycopg.Connection[Any], trigger: str, n: int) -> Callable[[], bool]:
    def reached() -> bool:
        row = conn.execute(
            "SELECT count(*) FROM rara_runs WHERE idempotency_key LIKE %s",
            (f"trigger:{trigger}:%",),
        ).fetchone()
        return row is not None and row[0] >= n

    return reached


if __name__ == "__main__":
    from bench.common import bench_database

    with bench_database() as bench_url:
        logs_dir = Path(os.environ.get("TMPDIR", "/tmp")) / "rara-bench-triggers"
        logs_dir.mkdir(exist_ok=True)
        print(json.dumps(measure(Server(bench_url), logs_dir, quick="--quick" in sys.argv)))
