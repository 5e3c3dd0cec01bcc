"""Comparators for rara's benchmark: the same no-op drain with PgQueuer, Procrastinate, DBOS,
Temporal and River.

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
``dbos_peer.py``
    DBOS's part of ``run_peer.py`` (its system database, queue, workflows of 1 or 3 steps).
``temporal_peer.py``, ``temporal/build.sh`` and ``temporal_build.py``
    Temporal's part of ``run_peer.py`` (its server started for the run, on the same
    PostgreSQL server, workflows of 1 or 3 activities) and its server's build: the pinned CLI
    and server modules from the Go module proxy, once, into ``~/.cache/rara/temporal-<version>``
    (10-20 minutes on 2 cores the first time). Without ``go``, or where the build fails,
    Temporal is reported skipped, with the reason.
``river/`` and ``river_peer.py``
    River's driver, a Go module on River's library modules (``river/build.sh`` builds it
    once per state of its sources into ``~/.cache/rara/bench-river``), and its runner, called
    from rara's venv. Without ``go`` (or where the build fails) River is reported skipped,
    with the reason.
``harness.py``
    Importable from rara's venv: ``ensure_peers_venv() -> Path``,
    ``run_peer(peer, dsn, jobs, workers, latency=False, timeout=…) -> dict`` (fresh database,
    subprocess with timeout) and ``run_all(dsn) -> list[dict]``.
``__main__.py``
    ``python -m bench.peers [--dsn URL]`` runs every peer and prints a table; without
    ``--dsn`` it uses a private server (``temporary_server(fast=True)``), destroyed afterwards.

Peers: ``pgqueuer-asyncpg`` and ``pgqueuer-psycopg`` (PgQueuer with each of its drivers),
``procrastinate`` (psycopg 3 connector), ``dbos-1step`` and ``dbos-3step`` (DBOS workflows of
1 and 3 no-op steps through a DBOS queue), ``temporal-1step`` and ``temporal-3step`` (Temporal
workflows of 1 and 3 no-op activities) and ``river`` (one Go process). Worker configuration
(batch size, concurrency, polling) is commented in ``run_peer.py``, ``dbos_peer.py`` and
``river/main.go``; it can be overridden with ``PEER_PGQ_BATCH_SIZE``, ``PEER_PROC_CONCURRENCY``,
``PEER_DBOS_POLL_S``, ``PEER_DBOS_CONCURRENCY`` and ``PEER_TEMPORAL_STORE`` (``sqlite``: the
CLI's dev server instead of the server on PostgreSQL). Server CPU is that of the bench's server
alone (its postmaster's process tree). The machine is shared: treat single runs as noisy.
"""

from bench.peers.errors import PeerError, PeerUnavailable
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
    "PeerError",
    "PeerUnavailable",
    "ensure_peers_venv",
    "peer_database",
    "run_all",
    "run_peer",
]
