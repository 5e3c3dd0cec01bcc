"""River (the Go PostgreSQL queue) as a peer: its driver built and run from rara's venv.

    run(dsn, jobs, latency=False, timeout=300.0, postmaster=None) -> dict

``bench/peers/river/`` is a Go module of its own, on River's library modules (pinned in its
go.mod); ``build.sh`` builds it once per state of its sources into ``~/.cache/rara/bench-river``
(needs ``go`` and the Go module proxy the first time). The driver migrates River's schema into
the peer's fresh database, inserts the jobs, prints ``ready`` and waits for a line on stdin: the
server's CPU is sampled here around the timed part, as ``run_peer.py`` does for the Python
peers. A machine without ``go``, or where the build fails, gets a ``PeerUnavailable`` carrying
the reason, and the bench reports River as skipped with it (never a number).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.peers.errors import PeerError, PeerUnavailable
from bench.proc_cpu import server_cpu

BUILD = Path(__file__).resolve().parent / "river" / "build.sh"


def build() -> Path:
    """The driver's binary, built on first use; PeerUnavailable with the reason if it cannot."""
    try:
        proc = subprocess.run(
            [str(BUILD)], capture_output=True, text=True, timeout=600, check=False
        )
    except subprocess.TimeoutExpired:
        raise PeerUnavailable("river: building the driver took over 10 minutes") from None
    if proc.returncode != 0:
        raise PeerUnavailable(
            f"river: the driver could not be built: {proc.stderr.strip()[-1500:]}"
        )
    return Path(proc.stdout.strip().splitlines()[-1])


def _readline(proc: subprocess.Popen[str], deadline: float) -> str:
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            return proc.stdout.readline()
        if proc.poll() is not None:
            return ""
    raise TimeoutError


def run(
    dsn: str,
    jobs: int,
    latency: bool = False,
    timeout: float = 300.0,
    postmaster: int | None = None,
) -> dict[str, Any]:
    """One River measurement in the (empty) database of ``dsn``: the driver's JSON, with the
    server's and the driver's CPU per job for a drain."""
    binary = build()
    proc = subprocess.Popen(
        [
            str(binary),
            "-dsn",
            dsn,
            "-jobs",
            str(jobs),
            "-timeout",
            f"{timeout:.0f}s",
            *(["-latency"] if latency else []),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdin is not None
    try:
        if _readline(proc, time.monotonic() + 120) != "ready\n":
            raise PeerError(f"river: set-up failed: {_stderr(proc)}")
        before = server_cpu(postmaster)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        line = _readline(proc, time.monotonic() + timeout + 60)
        server = server_cpu(postmaster) - before
        if not line.startswith("{"):
            raise PeerError(f"river: no result: {_stderr(proc)}")
        proc.wait(30)
    except TimeoutError:
        raise PeerError(f"river: timed out after {timeout + 60:.0f} s") from None
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if proc.returncode != 0:
        raise PeerError(f"river: exit {proc.returncode}: {_stderr(proc)}")
    result: dict[str, Any] = json.loads(line)
    if not latency:
        result["cpu_per_job"] = {
            "postgres_us": round(server / jobs * 1e6, 1),
            "workers_us": round(result["cpu_seconds"] / jobs * 1e6, 1),
        }
    return result


def _stderr(proc: subprocess.Popen[str]) -> str:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.stderr is not None
    return proc.stderr.read()[-2000:]
