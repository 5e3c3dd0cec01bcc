"""`python -m bench.peers [--dsn URL]`: every peer's drain and wake-up latency, as a table."""

from __future__ import annotations

import argparse
import json
from typing import Any

from bench.peers.harness import DEFAULT_JOBS, PEERS, run_all


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'peer':<18} {'jobs':>7} {'workers':>7} {'seconds':>8} {'jobs/s':>9}"
        f" {'p50 ms':>8} {'p99 ms':>8}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        if "skipped" in r:
            lines.append(f"{r['peer']:<18} skipped: {r['skipped'].splitlines()[0]}")
            continue
        if "error" in r:
            lines.append(f"{r['peer']:<18} drain failed: {r['error'].splitlines()[0]}")
            continue
        p50 = f"{r['p50_ms']:.1f}" if "p50_ms" in r else "-"
        p99 = f"{r['p99_ms']:.1f}" if "p99_ms" in r else "-"
        lines.append(
            f"{r['peer']:<18} {r['jobs']:>7} {r['workers']:>7} {r['seconds']:>8.2f}"
            f" {r['jobs_per_s']:>9.0f} {p50:>8} {p99:>8}"
        )
        if "latency_error" in r:
            lines.append(f"{'':<18} latency failed: {r['latency_error'].splitlines()[0]}")
    return "\n".join(lines)


def main() -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--dsn", help="a database URL on the server to use (default: a private one)"
    )
    parser.add_argument("--peers", default=",".join(PEERS))
    parser.add_argument("--workers", type=int, default=2, help="worker processes per drain")
    parser.add_argument("--pgqueuer-jobs", type=int, default=DEFAULT_JOBS["pgqueuer-asyncpg"])
    parser.add_argument("--procrastinate-jobs", type=int, default=DEFAULT_JOBS["procrastinate"])
    parser.add_argument(
        "--dbos-jobs",
        type=int,
        default=DEFAULT_JOBS["dbos-1step"],
        help="1-step workflows (3-step: two thirds of it)",
    )
    parser.add_argument(
        "--temporal-jobs",
        type=int,
        default=DEFAULT_JOBS["temporal-1step"],
        help="1-step workflows (3-step: half of it)",
    )
    parser.add_argument("--river-jobs", type=int, default=DEFAULT_JOBS["river"])
    parser.add_argument("--no-latency", action="store_true")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON too")
    args = parser.parse_args()
    jobs = {
        "pgqueuer-asyncpg": args.pgqueuer_jobs,
        "pgqueuer-psycopg": args.pgqueuer_jobs,
        "procrastinate": args.procrastinate_jobs,
        "dbos-1step": args.dbos_jobs,
        "dbos-3step": args.dbos_jobs * 2 // 3,
        "temporal-1step": args.temporal_jobs,
        "temporal-3step": args.temporal_jobs // 2,
        "river": args.river_jobs,
    }
    peers = tuple(p for p in args.peers.split(",") if p)

    def run(dsn: str) -> list[dict[str, Any]]:
        return run_all(dsn, peers, args.workers, jobs, latency=not args.no_latency)

    if args.dsn:
        rows = run(args.dsn)
    else:
        from rara.pg.embedded import temporary_server

        server = temporary_server(fast=True)
        try:
            rows = run(server.up())
        finally:
            server.destroy()
    print(table(rows))
    if args.json:
        print(json.dumps(rows))
    return rows


if __name__ == "__main__":
    main()
