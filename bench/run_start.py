"""The cost of starting a run (``rara.runs.start_run``), alone: client-side latency of one start
(p50/p99 ms) and starts per second from one connection, for a one-step and a six-step
definition (the demo's shape), with the process's spec cache warm.

    .venv/bin/python -m bench.run_start [--runs N]

Why on its own: the latency section of ``bench/run.py`` measures start → handler, where the
start is a small part; this isolates the statement that builds a run and its steps (migration
0012 moved the building of step rows from the client into the database).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import psycopg

from bench.common import bench_database, percentiles
from rara.definitions.parse import definition_from_object
from rara.definitions.registry import apply_definition
from rara.runs import start_run

SHAPES: dict[str, list[dict[str, Any]]] = {
    "1 step": [{"key": "a", "capability": "bench.noop@1"}],
    "6 steps": [
        {"key": "collect", "capability": "corpus.collect@1", "timeout": "5m"},
        {"key": "clean", "capability": "corpus.clean@1", "dependsOn": ["collect"]},
        {
            "key": "shard",
            "capability": "index.shard@1",
            "dependsOn": ["clean"],
            "map": {"over": "clean.result.shards"},
        },
        {"key": "index", "capability": "index.build@1", "dependsOn": ["shard", "clean"]},
        {"key": "evaluate", "capability": "eval.retrieval@1", "dependsOn": ["index"]},
        {
            "key": "adapt",
            "capability": "adapt.lora@1",
            "executor": "grpc",
            "dependsOn": ["evaluate", "index"],
            "retry": {"maxAttempts": 5},
        },
    ],
}


def measure(conn: psycopg.Connection[Any], name: str, runs: int) -> dict[str, float]:
    for _ in range(50):  # warm: the spec cache and the prepared statement
        start_run(conn, name, queue_anyway=True)
    times = []
    began = time.perf_counter()
    for _ in range(runs):
        t0 = time.perf_counter()
        start_run(conn, name, queue_anyway=True)
        times.append((time.perf_counter() - t0) * 1000)
    elapsed = time.perf_counter() - began
    got = percentiles(times)
    return {"p50_ms": got["p50"], "p99_ms": got["p99"], "starts_per_s": runs / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=2000)
    args = parser.parse_args()
    with bench_database() as url, psycopg.connect(url, autocommit=True) as conn:
        for label, steps in SHAPES.items():
            name = label.replace(" ", "-")
            apply_definition(
                conn,
                definition_from_object(
                    {
                        "apiVersion": "rara.dev/v1alpha1",
                        "kind": "WorkflowDefinition",
                        "metadata": {"name": name},
                        "spec": {"steps": steps},
                    }
                ),
            )
            got = measure(conn, name, args.runs)
            print(
                f"run start, {label:8} p50 {got['p50_ms']:.3f} ms  p99 {got['p99_ms']:.3f} ms"
                f"  {got['starts_per_s']:.0f} starts/s"
            )


if __name__ == "__main__":
    main()
