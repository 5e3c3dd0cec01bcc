"""Run the peer comparators from rara's venv: their own venv, their own databases, a subprocess.

    ensure_peers_venv() -> Path          the peers' python (venv created/updated on first use)
    run_peer(peer, dsn, jobs, workers, latency=False, timeout=None) -> dict
    run_all(dsn, ...) -> list[dict]      every peer: drain, then wake-up latency

``dsn`` is any database URL on the server under test; each run gets a fresh database
``bench_peer_<peer>`` on that server, dropped afterwards.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from bench.peers.errors import PeerError, PeerUnavailable
from bench.proc_cpu import postmaster_of

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RUN_PEER = HERE / "run_peer.py"
VENV = REPO / ".rara" / "bench-peers-venv"

PEERS = (
    "pgqueuer-asyncpg",
    "pgqueuer-psycopg",
    "procrastinate",
    "dbos-1step",
    "dbos-3step",
    "temporal-1step",
    "temporal-3step",
    "river",
)

# Every package installed directly is pinned (transitive ones follow from these).
PEER_REQUIREMENTS = (
    "pgqueuer==1.6.0",
    "asyncpg==0.32.0",  # PgQueuer's asyncpg driver
    "psycopg[binary]==3.3.9",  # PgQueuer's psycopg driver and Procrastinate's connector
    "psycopg-pool==3.3.3",  # Procrastinate's PsycopgConnector pool
    "procrastinate==3.10.0",
    "dbos==3.4.0",  # DBOS Transact (its system database through SQLAlchemy 2 and psycopg 3)
    "temporalio==1.35.0",  # Temporal's Python SDK (its server: bench/peers/temporal/build.sh)
)

# Jobs per drain: enough for a steady state, bounded in time on a small machine.
DEFAULT_JOBS = {
    "pgqueuer-asyncpg": 20_000,
    "pgqueuer-psycopg": 20_000,
    "procrastinate": 3_000,
    "dbos-1step": 3_000,
    "dbos-3step": 2_000,
    "temporal-1step": 2_000,
    "temporal-3step": 1_000,
    "river": 50_000,
}
# Wake-up samples. PgQueuer's psycopg driver wakes after ~1 s (its notifies() watcher holds the
# connection lock for its 1 s timeout, so the dequeue waits), so it gets fewer samples.
DEFAULT_LATENCY_SAMPLES = {
    "pgqueuer-asyncpg": 200,
    "pgqueuer-psycopg": 30,
    "procrastinate": 200,
    "dbos-1step": 100,
    "dbos-3step": 100,
    "temporal-1step": 100,
    "temporal-3step": 100,
    "river": 200,
}


def _base_python() -> str:
    return shutil.which("python3") or sys.executable


def ensure_peers_venv(venv: Path = VENV) -> Path:
    """Create/update the peers' venv when it lacks these exact pins; returns its python.

    Idempotent and safe to call from concurrent processes (a file lock beside the venv).
    """
    python = venv / "bin" / "python"
    marker = venv / "bench-peers-requirements.txt"
    wanted = "\n".join(PEER_REQUIREMENTS) + "\n"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if python.exists() and marker.exists() and marker.read_text() == wanted:
            return python
        if not python.exists():
            subprocess.run(
                [_base_python(), "-m", "venv", str(venv)], cwd=HERE, check=True, timeout=300
            )
        marker.unlink(missing_ok=True)
        proc = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", *PEER_REQUIREMENTS],
            cwd=HERE,  # `-m` puts the working directory on sys.path: keep the repo's off it
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        if proc.returncode != 0:
            raise PeerUnavailable(
                f"pip install into {venv} failed:\n{proc.stdout}{proc.stderr}"[-4000:]
            )
        marker.write_text(wanted)
    return python


def _with_database(dsn: str, database: str) -> str:
    parts = urlsplit(dsn)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ValueError(f"expected a postgresql:// URL, got {dsn!r}")
    return urlunsplit(parts._replace(path="/" + database))


def _database_name(peer: str) -> str:
    return "bench_peer_" + re.sub(r"[^a-z0-9]+", "_", peer.lower())


@contextlib.contextmanager
def peer_database(dsn: str, peer: str, keep: bool = False) -> Iterator[str]:
    """A fresh, empty database for ``peer`` on the server of ``dsn``; yields its URL."""
    name = _database_name(peer)
    ident = sql.Identifier(name)
    admin = _with_database(dsn, "postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(ident))
    try:
        yield _with_database(dsn, name)
    finally:
        if not keep:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))


def _postmaster(url: str) -> int:
    """The pid of the server behind ``url``: its CPU alone is counted, never another's."""
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        return postmaster_of(int(row[0]))  # while the backend is there to be read


def run_peer(
    peer: str,
    dsn: str,
    jobs: int,
    workers: int,
    latency: bool = False,
    timeout: float | None = None,
) -> dict[str, Any]:
    """One peer measurement in a fresh database on ``dsn``'s server; the script's JSON.

    Drain: ``jobs`` no-op jobs, ``workers`` worker processes -> ``jobs``, ``seconds``,
    ``jobs_per_s``. ``latency=True``: ``jobs`` samples with one idle worker -> ``p50_ms``,
    ``p99_ms``. ``timeout`` bounds the timed part (default 300 s drain, 120 s latency); the
    whole subprocess gets 120 s more for set-up, and is killed (with its workers) past that.
    """
    if peer not in PEERS:
        raise ValueError(f"unknown peer {peer!r}; one of {PEERS}")
    timeout = timeout or (120.0 if latency else 300.0)
    if peer == "river":  # a Go driver (bench/peers/river), run from here
        from bench.peers import river_peer

        with peer_database(dsn, peer) as url:
            return river_peer.run(url, jobs, latency, timeout, _postmaster(url))
    temporal: list[str] = []
    if peer.startswith("temporal-"):  # its server, built once (bench/peers/temporal/build.sh)
        from bench.peers import temporal_build

        temporal = ["--temporal-bin", str(temporal_build.build())]
    python = ensure_peers_venv()
    with peer_database(dsn, peer) as url:
        cmd = [
            str(python),
            str(RUN_PEER),
            *("--peer", peer, "--dsn", url, "--jobs", str(jobs), "--workers", str(workers)),
            *("--timeout", str(timeout), "--postmaster", str(_postmaster(url))),
            *(["--latency"] if latency else []),
            *temporal,
        ]
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        proc = subprocess.Popen(
            cmd,
            cwd=HERE,  # nothing here shadows the standard library (see run_peer.main)
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its worker processes share the group: kill them all
        )
        try:
            out, err = proc.communicate(timeout=timeout + 120)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise PeerError(
                f"{peer}: timed out after {timeout + 120:.0f} s\n{err[-3000:]}"
            ) from None
        if proc.returncode != 0:
            raise PeerError(f"{peer}: exit {proc.returncode}\n{err[-3000:]}")
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if not lines:
        raise PeerError(f"{peer}: no JSON on stdout\n{out[-1000:]}\n{err[-2000:]}")
    return dict(json.loads(lines[-1]))


def run_all(
    dsn: str,
    peers: tuple[str, ...] = PEERS,
    workers: int = 2,
    jobs: dict[str, int] | None = None,
    latency_samples: dict[str, int] | None = None,
    latency: bool = True,
) -> list[dict[str, Any]]:
    """Drain then latency for each peer; a failed measurement is a row with ``error``."""
    jobs = {**DEFAULT_JOBS, **(jobs or {})}
    samples = {**DEFAULT_LATENCY_SAMPLES, **(latency_samples or {})}
    rows: list[dict[str, Any]] = []
    for peer in peers:
        row: dict[str, Any] = {"peer": peer}
        try:
            drain = run_peer(peer, dsn, jobs[peer], workers)
            row.update(drain)
        except PeerUnavailable as exc:  # not installable here: said so, nothing measured
            row["skipped"] = str(exc)
            rows.append(row)
            continue
        except PeerError as exc:
            row["error"] = str(exc)
        if latency:
            try:
                lat = run_peer(peer, dsn, samples[peer], 1, latency=True)
                row.update(p50_ms=lat["p50_ms"], p99_ms=lat["p99_ms"], latency=lat)
            except PeerError as exc:
                row["latency_error"] = str(exc)
        rows.append(row)
    return rows
