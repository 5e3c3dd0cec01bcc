"""Lease cost against queue depth: ms per lease batch with 1k, 100k and 1M ready steps.

Each sample leases a batch of 10 inside a transaction that is rolled back, so the depth stays
the same for every sample, on a session set up as the worker's lease connection
(``HOT_PATH_SESSION``). Prints the plan (EXPLAIN ANALYZE) at the deepest queue.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import psycopg

from bench.common import bench_database, bulk_ready_steps, percentiles
from rara.pg.queries import many, sql
from rara.worker.store import HOT_PATH_SESSION, LEASED
from tests.support.definitions import noop_definition
from tests.support.leasing import lease_params

# The worker's lease statement (routed by capability and executor kind, with the checkpoint and
# inputs folded in).
PARAMS = lease_params(["bench.noop@1"], worker="bench", limit=10)  # from the start


def measure(conn: psycopg.Connection[Any], samples: int) -> dict[str, float]:
    times = []
    for _ in range(samples):
        with conn.transaction(force_rollback=True):
            t0 = time.perf_counter()
            rows = many(conn, "step_lease", LEASED, **PARAMS)
            times.append((time.perf_counter() - t0) * 1000)
            assert len(rows) == 10
    return percentiles(times)


def explain(conn: psycopg.Connection[Any]) -> str:
    with conn.transaction(force_rollback=True):
        plan = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql("step_lease"), PARAMS
        ).fetchall()
    return "\n".join(line for (line,) in plan)


def measure_depths(
    conn: psycopg.Connection[Any], depths: list[int], samples: int, log: Any = print
) -> dict[str, Any]:
    """Fill the queue of ``conn``'s (migrated, empty) database up to each depth in turn and
    time the lease there; the p50 ratio deepest / shallowest, and the plan at the deepest."""
    results: dict[str, Any] = {}
    noop_definition(conn)
    depth = 0
    for target in depths:
        bulk_ready_steps(conn, target - depth)
        depth = target
        measure(conn, 20)  # warm caches and prepared statements
        results[str(depth)] = measure(conn, samples)
        log(
            f"depth {depth:>9,}: lease batch of 10  p50 {results[str(depth)]['p50']:.3f} ms"
            f"  p99 {results[str(depth)]['p99']:.3f} ms"
        )
    results["plan"] = explain(conn)
    first, last = str(depths[0]), str(depths[-1])
    results["ratio"] = results[last]["p50"] / results[first]["p50"]
    return results


def main() -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--depths", default="1000,100000,1000000")
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()
    with bench_database() as url, psycopg.connect(url, autocommit=True, **HOT_PATH_SESSION) as conn:
        results = measure_depths(conn, [int(d) for d in args.depths.split(",")], args.samples)
    print(f"\nEXPLAIN ANALYZE at the deepest queue:\n{results['plan']}")
    print(f"\nratio p50 deepest / shallowest: {results['ratio']:.2f}")
    return results


if __name__ == "__main__":
    print(json.dumps(main(), default=str)[:0])
