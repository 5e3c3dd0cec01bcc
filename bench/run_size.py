"""Costs flat in run size (issue 17, items 2 and 6): one run of N parallel no-op steps, and one
run whose map step expands into N no-op children (docs/map-steps.md), against N one-step runs,
drained by the same worker processes.

    .venv/bin/python bench/run_size.py [--sizes 1000,10000] [--workers 2] [--out FILE]

Per size and shape: steps/s on the database clock (first lease to last completion, from the
attempts' own timestamps) and the CPU each step cost the server and the workers (/proc,
``bench.proc_cpu``); for the map, how long its expansion took (inside start_run). The ratios
wide/single and map/single are the goal's numbers (>= 0.9). While a wide run
drains, pg_stat_activity is sampled every 10 ms: ``lock_wait`` is the share of samples in
which some backend of the database waited on a lock (a run row every completion of the run
queues on would show here), with the longest wait seen.

Each drain gets a fresh database cloned from the migrated one (``bench.run.Server``). The
machine is shared: run before and after back to back, and quote both.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(1, str(ROOT))  # bench.* from the repository root

import psycopg  # noqa: E402

from bench.common import CpuMeter, bench_database, noop_definition  # noqa: E402
from bench.run import Server, _scalar, _wait, workers  # noqa: E402
from rara.definitions.parse import definition_from_object  # noqa: E402
from rara.definitions.registry import apply_definition  # noqa: E402
from rara.pg.runs import enqueue_many  # noqa: E402
from rara.runs import start_run  # noqa: E402

# One map step over the run input's items, each child a no-op.
MAP_DEFINITION = {
    "apiVersion": "rara.dev/v1alpha1", "kind": "WorkflowDefinition", "metadata": {"name": "fan"},
    "spec": {"steps": [{"key": "each", "capability": "bench.noop@1",
                        "map": {"over": "input.items"}}]}}


class LockSampler:
    """Samples pg_stat_activity of one database: how often a backend waits on a lock."""

    def __init__(self, url: str, every: float = 0.01) -> None:
        self.url, self.every = url, every
        self.samples = self.waiting = 0
        self.longest_ms = 0.0
        self.by: dict[str, int] = {}  # waiter samples by wait event and statement
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self._stop.is_set():
                rows = conn.execute(
                    "SELECT wait_event, left(regexp_replace(query, '^(--[^\n]*\n)*', ''), 40),"
                    " extract(epoch FROM clock_timestamp() - state_change)::float8 * 1000 "
                    "FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock'").fetchall()
                self.samples += 1
                if rows:
                    self.waiting += 1
                    self.longest_ms = max([self.longest_ms, *(r[2] for r in rows)])
                    for event, query, _ in rows:
                        what = f"{event}: {' '.join(query.split())}"
                        self.by[what] = self.by.get(what, 0) + 1
                self._stop.wait(self.every)

    def __enter__(self) -> LockSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def report(self) -> dict[str, Any]:
        return {"samples": self.samples,
                "share": round(self.waiting / self.samples, 4) if self.samples else None,
                "longest_ms": round(self.longest_ms, 2), "by": self.by}


SHAPES = ("single", "wide", "map")


def drain(server: Server, logs: Path, *, size: int, shape: str, n_workers: int
          ) -> dict[str, Any]:
    """``size`` no-op steps: ``size`` runs of one step (``single``), one run of ``size``
    parallel steps (``wide``), or one run of a map step over ``size`` items (``map``); drained
    by ``n_workers`` worker processes."""
    name = f"bench_size_{shape}_{size}_{n_workers}"
    url = server.fresh(name)
    expand_seconds = None
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            if shape == "map":
                apply_definition(conn, definition_from_object(MAP_DEFINITION))
                began = time.perf_counter()
                start_run(conn, "fan", input={"items": list(range(size))}, queue_anyway=True)
                expand_seconds = round(time.perf_counter() - began, 3)
            else:
                noop_definition(conn, "noop")
                enqueue_many(conn, definition="noop", version=None,
                             runs=size if shape == "single" else 1,
                             steps=1 if shape == "single" else size, key="s",
                             capability="bench.noop@1", numbered=shape == "wide")
            # Leasable only once the workers are up and the meters run (their start-up is not
            # the drain's cost); they wake for it (step_next_available).
            start = _scalar(conn, "UPDATE rara_steps SET available_at = now() + interval '8 s' "
                                  "RETURNING extract(epoch FROM available_at)::float8")
            conn.execute("VACUUM ANALYZE")
            names = [f"{name}-{i}" for i in range(n_workers)]
            with workers(url, names, logs) as pids, LockSampler(url) as locks:
                cpu = CpuMeter(url, pids)
                idle = start - _scalar(conn, "SELECT extract(epoch FROM clock_timestamp())::float8")
                time.sleep(max(0.0, idle - 0.1))  # the idle wait is not the drain's cost either
                cpu.start()
                metered_from = _scalar(conn, "SELECT clock_timestamp()")
                _wait(lambda: _scalar(conn, "SELECT count(*) FROM rara_runs WHERE status IN "
                                            "('pending', 'running')") == 0,
                      1800, f"{name} to drain", every=0.25)
                cpu.stop()
            seconds, count = conn.execute(
                "SELECT extract(epoch FROM max(ended_at) - min(started_at))::float8, count(*) "
                "FROM rara_attempts WHERE outcome = 'succeeded'").fetchone() or (0.0, 0)
            bad = _scalar(conn, "SELECT count(*) FROM rara_runs WHERE status <> 'succeeded'")
            first = _scalar(conn, "SELECT min(started_at) FROM rara_attempts")
        if first < metered_from:
            print(f"  (the drain began {(metered_from - first).total_seconds():.1f} s before "
                  "the meters: its CPU is short by that)", flush=True)
        assert count == size, (count, size)
        assert bad == 0, bad
        return {"size": size, "shape": shape, "workers": n_workers,
                "seconds": round(seconds, 3), "steps_per_s": round(size / seconds, 1),
                "cpu_per_step": cpu.per(size), "lock_wait": locks.report(),
                **({} if expand_seconds is None else {"expand_seconds": expand_seconds})}
    finally:
        server.drop(name)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--shapes", default=",".join(SHAPES),
                        help="of " + ", ".join(SHAPES))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    logs = Path(tempfile.mkdtemp(prefix="rara-bench-logs-"))
    out: dict[str, Any] = {"loadavg_before": os.getloadavg(), "workers": args.workers,
                           "drains": [], "ratios": {}}
    with bench_database() as url:
        server = Server(url)
        for size in sizes:
            by_shape = {}
            for shape in args.shapes.split(","):
                row = drain(server, logs, size=size, shape=shape, n_workers=args.workers)
                out["drains"].append(row)
                by_shape[shape] = row
                cpu = row["cpu_per_step"]
                expand = (f"  expanded in {row['expand_seconds']:.2f} s"
                          if "expand_seconds" in row else "")
                print(f"{size:>7,} steps, {shape:<6} {row['steps_per_s']:>8.0f} steps/s"
                      f"  CPU/step PostgreSQL {cpu['postgres_us']:>6.0f} us, workers "
                      f"{cpu['workers_us']:>5.0f} us  lock waits {row['lock_wait']['share']}"
                      f" (longest {row['lock_wait']['longest_ms']} ms){expand}", flush=True)
            for shape in set(by_shape) - {"single"}:
                if "single" in by_shape:
                    ratio = by_shape[shape]["steps_per_s"] / by_shape["single"]["steps_per_s"]
                    out["ratios"][f"{shape}/single {size}"] = round(ratio, 3)
                    print(f"{size:>7,} steps: {shape}/single {ratio:.2f}", flush=True)
        for shape in ("wide", "map"):
            rows = {r["size"]: r for r in out["drains"] if r["shape"] == shape}
            if len(rows) > 1:
                lo, hi = rows[min(rows)], rows[max(rows)]
                ratio = hi["cpu_per_step"]["postgres_us"] / lo["cpu_per_step"]["postgres_us"]
                out[f"server_cpu_ratio_{shape}"] = round(ratio, 3)
                print(f"server CPU per step, {shape} {max(rows):,} / {min(rows):,}: "
                      f"{ratio:.2f}")
    out["loadavg_after"] = os.getloadavg()
    if args.out:
        args.out.write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
