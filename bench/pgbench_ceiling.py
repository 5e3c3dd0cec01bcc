"""The server's own ceiling on this machine: pgbench, single-row UPDATE by random id.

`pgbench -i` at a small scale (100k accounts per scale unit) in a database of its own, then a
custom script (`-f`, no vacuum `-n`, prepared statements) with one UPDATE of a random
`pgbench_accounts` row per transaction, `-c 4 -j 2 -T 10`: the tps a queue's acknowledgement
(one-row UPDATE, autocommit) cannot beat on this server and machine.

    python -m bench.pgbench_ceiling [--dsn URL] [--clients 4 --threads 2 --seconds 10]

Without `--dsn` it starts a private server (`temporary_server(fast=True)`, like the other
benches). The machine is shared: treat one run as noisy.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from rara.pg.embedded import EmbeddedPostgres, find_pg_bin, temporary_server

DATABASE = "bench_pgbench"
SCRIPT = """\\set aid random(1, 100000 * :scale)
UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid;
"""


def _with_database(dsn: str, database: str) -> str:
    return urlunsplit(urlsplit(dsn)._replace(path="/" + database))


def _pgbench(*args: str, timeout: float) -> str:
    proc = subprocess.run(
        [str(find_pg_bin() / "pgbench"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"pgbench {' '.join(args[:-1])} failed:\n{proc.stdout}{proc.stderr}")
    return proc.stdout + proc.stderr


def measure_ceiling(
    dsn_or_server: str | EmbeddedPostgres,
    scale: int = 1,
    clients: int = 4,
    threads: int = 2,
    seconds: int = 10,
    keep: bool = False,
) -> dict[str, Any]:
    """tps of single-row UPDATEs by random id on the server of ``dsn_or_server``.

    A fresh database ``bench_pgbench`` is initialised on that server and dropped afterwards
    (unless ``keep``). Returns tps (without initial connection time), mean latency in ms,
    transactions, failed transactions and the settings used.
    """
    # A server is started if needed, else reused (`up` is idempotent).
    dsn = dsn_or_server.up() if isinstance(dsn_or_server, EmbeddedPostgres) else dsn_or_server
    admin, url = _with_database(dsn, "postgres"), _with_database(dsn, DATABASE)
    ident = sql.Identifier(DATABASE)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(ident))
    try:
        _pgbench("-i", "-q", "-s", str(scale), url, timeout=600)
        with tempfile.TemporaryDirectory(prefix="rara-pgbench-") as tmp:
            script = Path(tmp) / "update_one.sql"
            script.write_text(SCRIPT)
            out = _pgbench(
                "-n",
                "-M", "prepared",
                "-f", str(script),
                "-c", str(clients),
                "-j", str(threads),
                "-T", str(seconds),
                url,
                timeout=seconds + 120,
            )  # fmt: skip
    finally:
        if not keep:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))

    def number(pattern: str) -> float | None:
        found = re.search(pattern, out)
        return float(found.group(1)) if found else None

    tps = number(r"tps = ([\d.]+) \(without initial connection time\)")
    if tps is None:
        raise RuntimeError(f"no tps in pgbench output:\n{out}")
    return {
        "tps": round(tps, 1),
        "latency_avg_ms": number(r"latency average = ([\d.]+) ms"),
        "transactions": number(r"number of transactions actually processed: (\d+)"),
        "failed": number(r"number of failed transactions: (\d+)"),
        "scale": scale,
        "clients": clients,
        "threads": threads,
        "seconds": seconds,
        "statement": "UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid",
        "pgbench": str(find_pg_bin() / "pgbench"),
    }


def main() -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--dsn", help="a database URL on the server to measure (default: a private one)"
    )
    parser.add_argument("--scale", type=int, default=1)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=int, default=10)
    args = parser.parse_args()
    settings = dict(
        scale=args.scale, clients=args.clients, threads=args.threads, seconds=args.seconds
    )
    if args.dsn:
        result = measure_ceiling(args.dsn, **settings)
    else:
        server = temporary_server(fast=True)
        try:
            result = measure_ceiling(server, **settings)
        finally:
            server.destroy()
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
