"""CPU seconds of processes, read from ``/proc`` (Linux): where a drain's work went.

Standalone (no rara imports): the peers' script (``bench/peers/run_peer.py``) runs in another
virtual environment and measures itself with the same two functions.
"""

from __future__ import annotations

import os
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")
TICK_SECONDS = 1 / _TICK  # the resolution of every figure read here


def _stat(pid: int | str) -> list[str]:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):  # gone meanwhile
        return []


def process_cpu(pid: int) -> float:
    """User + system seconds of one process so far (0 when it is gone)."""
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / _TICK if fields else 0.0


def server_cpu(postmaster: int | None = None) -> float:
    """User + system seconds of a PostgreSQL server so far, with the time of the backends that
    already exited (the postmaster's reaped children), so connections may come and go.

    With ``postmaster`` (its pid): that server alone, its postmaster and live children. Without:
    every process named ``postgres`` — right only where the bench's server is the only one; on
    a machine where other servers come and go (other test runs) it can even read negative."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat(entry.name)
        if not fields:
            continue
        if postmaster is None:
            try:
                if (entry / "comm").read_text().strip() != "postgres":
                    continue
            except OSError:
                continue
            total += sum(int(f) for f in fields[11:15]) / _TICK  # utime, stime, cutime, cstime
        elif int(entry.name) == postmaster:
            total += sum(int(f) for f in fields[11:15]) / _TICK
        elif fields[1] == str(postmaster):  # a live backend: its own time only
            total += sum(int(f) for f in fields[11:13]) / _TICK
    return total


def postmaster_of(backend_pid: int) -> int:
    """The postmaster of a backend (``SELECT pg_backend_pid()``): its parent process."""
    return int(_stat(backend_pid)[1])
