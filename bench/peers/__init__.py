"""Comparators for rara's benchmark: the same no-op drain with PgQueuer and Procrastinate.

The peers are *only* comparators: they are never dependencies of rara. The bench installs them
itself, on first use, into a separate virtual environment ``.rara/bench-peers-venv`` (created
with ``python3 -m venv``; every directly installed package pinned, see ``PEER_REQUIREMENTS`` in
``harness.py``; skipped when that venv already holds exactly these pins). Each peer runs in a
database of its own (``bench_peer_<peer>``), created fresh by the bench on the same PostgreSQL
server rara is measured on, and dropped afterwards.

Files:

``run_peer.py``
    The script run by the peers' venv python (imports no rara): installs the peer's schema,
    enqueues N no-op jobs in bulk (not timed), drains them with K worker processes and prints
    JSON (``jobs``, ``seconds``, ``jobs_per_s``); ``--latency`` measures enqueue→job-start of
    an idle worker, one job at a time (``p50_ms``, ``p99_ms``).
``harness.py``
    Importable from rara's venv: ``ensure_peers_venv() -> Path``,
    ``run_peer(peer, dsn, jobs, workers, latency=False, timeout=…) -> dict`` (fresh database,
    subprocess with timeout) and ``run_all(dsn) -> list[dict]``.
``__main__.py``
    ``python -m bench.peers [--dsn URL]`` runs every peer and prints a table; without
    ``--dsn`` it uses a private server (``temporary_server(fast=True)``), destroyed afterwards.

Peers: ``pgqueuer-asyncpg`` and ``pgqueuer-psycopg`` (PgQueuer with each of its drivers) and
``procrastinate`` (psycopg 3 connector). Worker configuration (batch size, concurrency) is
commented in ``run_peer.py``; it can be overridden with ``PEER_PGQ_BATCH_SIZE`` and
``PEER_PROC_CONCURRENCY``. The machine is shared: treat single runs as noisy.
"""

from bench.peers.harness import (
    PEER_REQUIREMENTS,
    PEERS,
    ensure_peers_venv,
    peer_database,
    run_all,
    run_peer,
)

__all__ = [
    "PEERS",
    "PEER_REQUIREMENTS",
    "ensure_peers_venv",
    "peer_database",
    "run_all",
    "run_peer",
]
