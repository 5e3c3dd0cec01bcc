"""Two namespaces on one fleet (``make bench`` section ``tenants``; issue 34, item 3): how soon a
run of namespace B gets its first lease while namespace A holds a backlog, and how two busy
namespaces split the workers' throughput.

    .venv/bin/python -m bench.tenants [--backlog 100000] [--samples 20] [--workers 2]

Today the lease takes ready steps in one order across namespaces (priority, then when they
became ready, then id: docs/lease-protocol.md), so a namespace's backlog is everyone's wait:
these figures are the baseline that fair share at lease time has to beat (its goals: B's p99
within 2x an idle database's, the split within 10% of the namespaces' weights).

1. ``--samples`` one-step runs of B, one every 0.1 s, into idle workers: start to first lease.
2. A's ``--backlog`` one-step runs inserted at once (``run_enqueue_many``), then B's runs, one
   every 0.25 s while the workers drain A: start (the run row's creation) to first lease.
3. Both busy: 10,000 runs of A, then 10,000 of B, inserted back to back; when half of all
   steps are done, each namespace's share of them (equal weights: 50% each would be fair).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(1, str(ROOT))  # bench.* from the repository root

import psycopg  # noqa: E402

from bench.common import Server, bench_database, scalar, wait_until, workers  # noqa: E402
from bench.run_size import _first_lease_ms, _pcts  # noqa: E402
from rara.pg.runs import enqueue_many  # noqa: E402
from rara.runs import start_run  # noqa: E402
from tests.support.definitions import noop_definition  # noqa: E402

A, B = "team-a", "team-b"
CAPABILITY = "bench.noop@1"  # tests.support.bench_handlers: returns at once


def _ended(conn: psycopg.Connection[Any], ids: list[int]) -> bool:
    return not scalar(
        conn,
        "SELECT count(*) FROM rara_runs WHERE id = ANY(%s) AND status IN ('pending', 'running')",
        (ids,),
    )


def _starts(conn: psycopg.Connection[Any], count: int, every: float) -> list[int]:
    ids = []
    for _ in range(count):
        time.sleep(every)
        ids.append(start_run(conn, "small", queue_anyway=True, namespace=B).run_id)
    return ids


def _backlog(conn: psycopg.Connection[Any], namespace: str, runs: int) -> None:
    enqueue_many(
        conn,
        definition="noop",
        version=None,
        runs=runs,
        steps=1,
        key="s0",
        capability=CAPABILITY,
        namespace=namespace,
    )


def _done(conn: psycopg.Connection[Any]) -> dict[str, int]:
    rows = conn.execute(
        "SELECT r.namespace, count(*) FROM rara_steps s JOIN rara_runs r ON r.id = s.run_id"
        " WHERE s.status = 'succeeded' AND r.definition_version_id IN"
        " (SELECT id FROM rara_definition_versions WHERE name = 'noop') GROUP BY 1"
    ).fetchall()
    return {ns: int(n) for ns, n in rows}


def measure(
    server: Server, logs: Path, *, backlog: int, samples: int = 20, n_workers: int = 2
) -> dict[str, Any]:
    name = f"bench_tenants_{backlog}"
    url = server.fresh(name)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            for namespace in (A, B):
                noop_definition(conn, "noop", namespace=namespace)
            noop_definition(conn, "small", namespace=B)
            names = [f"{name}-{i}" for i in range(n_workers)]
            with workers(url, names, logs):
                idle = _starts(conn, samples, 0.1)
                wait_until(lambda: _ended(conn, idle), 60, "B's runs on idle workers")
                _backlog(conn, A, backlog)
                left = "SELECT count(*) FROM rara_steps WHERE status <> 'succeeded'"
                left_before = scalar(conn, left)
                behind = _starts(conn, samples, 0.25)
                left_after = scalar(conn, left)
                wait_until(lambda: _ended(conn, behind), 900, "B's runs behind A's backlog")
                wait_until(lambda: scalar(conn, left) == 0, 900, "A's backlog drained")
                before = _done(conn)
                busy = 10_000
                _backlog(conn, A, busy)
                _backlog(conn, B, busy)

                def half_done() -> bool:
                    now = _done(conn)
                    return sum(now.values()) - sum(before.values()) >= busy

                wait_until(half_done, 600, "half of the two namespaces' steps")
                after = _done(conn)
            split = {ns: after.get(ns, 0) - before.get(ns, 0) for ns in (A, B)}
            total = sum(split.values()) or 1
            return {
                "backlog": backlog,
                "workers": n_workers,
                "idle": _pcts(_first_lease_ms(conn, idle)),
                "behind_backlog": _pcts(_first_lease_ms(conn, behind)),
                # steps not yet done when B's first and last run started: A's backlog was
                # draining throughout when the second is well above 0
                "backlog_left": [left_before, left_after],
                "split_at_half": {ns: round(n / total, 3) for ns, n in split.items()},
            }
    finally:
        server.drop(name)


def line(r: dict[str, Any]) -> str:
    idle, behind = r["idle"], r["behind_backlog"]
    split = r["split_at_half"]
    return (
        f"B's start -> first lease: idle p50 {idle['p50']:.1f} ms p99 {idle['p99']:.1f} ms; "
        f"behind A's {r['backlog']:,} p50 {behind['p50']:.0f} ms p99 {behind['p99']:.0f} ms "
        f"({behind['p99'] / max(idle['p99'], 0.001):.0f}x); two busy namespaces, at half done: "
        f"A {split[A]:.0%}, B {split[B]:.0%}"
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    logs = Path(tempfile.mkdtemp(prefix="rara-bench-logs-"))
    with bench_database() as url:
        out = measure(
            Server(url), logs, backlog=args.backlog, samples=args.samples, n_workers=args.workers
        )
    print(line(out))
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
