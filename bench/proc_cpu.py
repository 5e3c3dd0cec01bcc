"""CPU seconds of processes, read from ``/proc`` (Linux): where a drain's work went.

Standalone (no rara imports): the peers' script (``bench/peers/run_peer.py``) runs in another
virtual environment and measures itself with the same two functions.
"""

from __future__ import annotations

import os
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int | str) -> list[str]:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):  # gone meanwhile
        return []


def process_cpu(pid: int) -> float:
    """User + system seconds of one process so far (0 when it is gone)."""
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / _TICK if fields else 0.0


def server_cpu() -> float:
    """User + system seconds of the PostgreSQL server so far: every process named ``postgres``
    (the bench's server is the only one while it runs), with the time of the backends that
    already exited (the postmaster's reaped children), so connections may come and go."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != "postgres":
                continue
        except OSError:
            continue
        fields = _stat(entry.name)
        if fields:  # utime, stime, cutime, cstime
            total += sum(int(f) for f in fields[11:15]) / _TICK
    return total
