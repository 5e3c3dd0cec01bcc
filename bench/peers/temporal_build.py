"""Temporal's server for the ``temporal-*`` peers, built from the Go module proxy on first use.

    build() -> Path     the folder of ``temporal``, ``temporal-server``, ``temporal-sql-tool``

``bench/peers/temporal/build.sh`` builds the pinned versions once into
``~/.cache/rara/temporal-<version>/`` (10-20 minutes on 2 cores the first time; at once after).
A machine without ``go``, or where the build fails, gets a ``PeerUnavailable`` carrying the
reason, and the bench reports both Temporal rows as skipped with it (never a number).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from bench.peers.errors import PeerUnavailable

BUILD = Path(__file__).resolve().parent / "temporal" / "build.sh"
BUILD_TIMEOUT_S = 3600


def build() -> Path:
    """The binaries' folder, built on first use; PeerUnavailable with the reason if it cannot."""
    try:
        proc = subprocess.run(
            [str(BUILD)], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise PeerUnavailable(
            f"temporal: building the server took over {BUILD_TIMEOUT_S // 60} minutes"
        ) from None
    if proc.returncode != 0:
        raise PeerUnavailable(
            f"temporal: the server could not be built: {proc.stderr.strip()[-1500:]}"
        )
    return Path(proc.stdout.strip().splitlines()[-1])
