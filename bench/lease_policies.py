"""``rara_step_lease`` with every admission policy at work, this tree against a commit: 100
namespaces with ready steps, a quota on half of them, concurrency keys on a quarter, a limit on
the capability. Leases of 10, and a held-back lease of 2 passing 50 namespaces by, each measured
rolled back (the queue unchanged: bench.common.server_ms), the two sides interleaved in one
server, medians. What bench.statements --against does for the plain path (one lane, no
policy), for the stages that path never reaches (docs/lease-protocol.md, "The lease's stages").

    .venv/bin/python -m bench.lease_policies --against 3eb3d50
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(1, str(ROOT))  # bench.* from the repository root

import psycopg  # noqa: E402

from bench.common import Server, bench_database, server_ms  # noqa: E402
from bench.statements import _database_at  # noqa: E402
from rara.pg import limits  # noqa: E402
from rara.pg.queries import sql  # noqa: E402
from rara.pg.runs import enqueue_many  # noqa: E402
from rara.worker.store import HOT_PATH_SESSION  # noqa: E402
from tests.support.definitions import apply  # noqa: E402
from tests.support.leasing import lease_params  # noqa: E402

CAPABILITY = "x@1"
NAMESPACES = 100


def _fill(conn: psycopg.Connection[Any]) -> None:
    limits.set_limit(conn, CAPABILITY, 100_000)
    for n in range(NAMESPACES):
        namespace = f"team-{n:03d}"
        apply(conn, "w", [{"key": "s", "capability": CAPABILITY}], namespace=namespace)
        enqueue_many(
            conn,
            definition="w",
            version=None,
            runs=30,
            steps=1,
            key="s",
            capability=CAPABILITY,
            namespace=namespace,
            concurrency_keys=3 if n % 4 == 0 else None,
        )
        if n % 2 == 0:
            limits.set_quota(conn, namespace, CAPABILITY, 50)
    conn.execute("VACUUM ANALYZE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", required=True, help="a git commit")
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    ref, rounds = args.against, args.rounds
    cases = {
        "lease of 10": lease_params([CAPABILITY], worker="w", limit=10),
        "held-back lease of 2, 50 namespaces passed by": lease_params(
            [CAPABILITY], worker="w", limit=2
        )
        | {"except_namespaces": [f"team-{n:03d}" for n in range(50)]},
    }
    with bench_database() as url:
        server = Server(url)
        sides = {
            "this": server.fresh("lease_policies_this"),
            ref: _database_at(server, ref, "lease_policies_ref"),
        }
        conns = {
            side: psycopg.connect(u, autocommit=True, **HOT_PATH_SESSION)
            for side, u in sides.items()
        }
        try:
            for conn in conns.values():
                _fill(conn)
            print(f"server us per lease, this tree vs {ref} (medians, interleaved):")
            for label, params in cases.items():
                times: dict[str, list[float]] = {side: [] for side in sides}
                for round_ in range(rounds):
                    order = list(conns.items())
                    for side, conn in order if round_ % 2 else reversed(order):
                        for _ in range(10):
                            ms = server_ms(conn, sql("step_lease"), params)
                            if round_ > 0:  # the first warms plans and pages
                                times[side].append(ms)
                old = statistics.median(times[ref]) * 1000
                new = statistics.median(times["this"]) * 1000
                print(f"  {label:48} {old:8.0f} -> {new:8.0f} ({new / old:.2f}x)")
        finally:
            for conn in conns.values():
                conn.close()


if __name__ == "__main__":
    main()
