"""The step cache's hit, timed, and the demo's refreshes (``make bench``'s ``refresh``
section; docs/step-cache.md, docs/demo.md).

    .venv/bin/python -m bench.refresh [--samples N] [--demo [--demo-limit N]]

One run at a time into an idle worker: a one-step run of ``bench.noop@1`` with ``cache:``,
always with the same input (a hit, after one run that wrote the entry) or each with a new input
(a miss: the handler runs). The time is the run's start to its step's end, both on the database
clock (``rara_runs.created_at`` → ``rara_steps.finished_at``): p50/p99 ms. The step has no
artifacts, so the hit reads no blob back; a hit's verification costs a read of each artifact on
top (docs/step-cache.md, "A hit"). Every hit is checked to have been one (``reused_from``).

``--demo``: ``python -m rara_rag.demo --report FILE`` on a fresh database of the bench server,
in a scratch directory: its first run, the refresh of the same documents and the refresh after
one document changed, each with its wall time and the CPU its worker and executor used
(``rara_rag.demo.refresh``); the full corpus unless ``--demo-limit``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from bench.common import Server, bench_database, percentiles, wait_run_succeeded, workers
from rara.runs import start_run
from tests.support.definitions import apply


def cache_hit_latency(server: Server, logs: Path, samples: int, warmup: int = 5) -> dict[str, Any]:
    """Start → succeeded of a cached step's hit and of its miss, p50/p99 ms."""
    url = server.fresh("bench_refresh")
    try:
        with (
            psycopg.connect(url, autocommit=True) as conn,
            psycopg.connect(url, autocommit=True) as listener,
        ):
            apply(conn, "cached", [{"key": "a", "capability": "bench.noop@1", "cache": {}}])
            listener.execute("LISTEN rara_run")
            times: dict[str, list[float]] = {"hit": [], "miss": []}
            with workers(url, ["refresh"], logs, concurrency=10):
                time.sleep(1.0)
                for i in range(warmup + samples):
                    for kind in ("hit", "miss"):
                        time.sleep(0.02)
                        run_input = {"n": 0} if kind == "hit" else {"n": i + 1}
                        run_id = start_run(conn, "cached", input=run_input, queue_anyway=True)
                        wait_run_succeeded(listener, run_id.run_id)
                        ms, reused = conn.execute(
                            "SELECT extract(epoch FROM s.finished_at - r.created_at) * 1000,"
                            " s.reused_from IS NOT NULL"
                            " FROM rara_runs r JOIN rara_steps s ON s.run_id = r.id"
                            " WHERE r.id = %s",
                            (run_id.run_id,),
                        ).fetchone() or (None, None)
                        # (the first "hit" is the miss that writes the entry: a warm-up)
                        if (kind == "miss" or i > 0) and reused != (kind == "hit"):
                            raise RuntimeError(f"{kind} run {run_id.run_id}: reused={reused}")
                        if i >= warmup:
                            times[kind].append(float(ms))
        return {
            "samples": samples,
            **{
                kind: {k: round(v, 3) for k, v in percentiles(values).items()}
                for kind, values in times.items()
            },
        }
    finally:
        server.drop("bench_refresh")


def demo_refresh(server: Server, logs: Path, limit: int | None = None) -> list[dict[str, Any]]:
    """The demo's three runs (``rara_rag.demo --report``): each one's wall and CPU seconds
    and which steps it reused and ran."""
    url = server.fresh("bench_demo")
    try:
        with tempfile.TemporaryDirectory(prefix="rara-bench-demo-") as home:
            report = Path(home) / "report.json"
            argv = [sys.executable, "-m", "rara_rag.demo", "--report", str(report)]
            if limit is not None:
                argv += ["--limit", str(limit), "--train", "64"]
            env = {**os.environ, "DATABASE_URL": url, "RARA_ARTIFACTS": str(Path(home) / "a")}
            with open(logs / "demo.log", "wb") as out:
                subprocess.run(
                    argv, cwd=home, env=env, stdout=out, stderr=subprocess.STDOUT, check=True,
                    timeout=1800,
                )  # fmt: skip
            runs: list[dict[str, Any]] = json.loads(report.read_text())
        return runs
    finally:
        server.drop("bench_demo")


def describe_demo(runs: list[dict[str, Any]]) -> list[str]:
    first = runs[0]
    return [
        f"demo {r['label']}: {r['wall_s']:.2f} s wall (first run {first['wall_s']:.1f} s), "
        f"CPU {r['cpu_s']:.1f} s = {r['cpu_s'] / first['cpu_s']:.1%} of the first run's; "
        f"ran {', '.join(r['ran'])}"
        for r in runs[1:]
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--demo", action="store_true", help="also the demo's refreshes")
    parser.add_argument("--demo-limit", type=int, default=None, help="first N documents only")
    args = parser.parse_args()
    with bench_database() as url, tempfile.TemporaryDirectory() as logs:
        got = cache_hit_latency(Server(url), Path(logs), args.samples)
        demo = demo_refresh(Server(url), Path(logs), args.demo_limit) if args.demo else []
    for kind in ("hit", "miss"):
        print(
            f"cache {kind:4}: start → succeeded p50 {got[kind]['p50']:.2f} ms"
            f"  p99 {got[kind]['p99']:.2f} ms  ({got['samples']} runs)"
        )

    for line in describe_demo(demo):
        print(line)


if __name__ == "__main__":
    main()
