"""``python -m rara.executor.main`` on loopback as a child process, serving the conformance
plugins (``test.*`` capabilities) or another plugin module."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def free_address() -> str:
    """A loopback address nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


CONFORMANCE_PLUGINS = "rara.executor.conformance_plugins"
# The jobs a test's executor still runs when the test stops it (a ``test.hang@1`` step the
# worker leased meanwhile) get this long after SIGTERM, not the default 30 s: the callers wait
# 30 s for the exit, and the default grace raced that wait (the process exited at 30 s and
# change, and the wait timed out).
STOP_GRACE_S = 2


def start_executor(
    address: str,
    artifact_root: Path,
    plugins: str = CONFORMANCE_PLUGINS,
    grace: float = STOP_GRACE_S,
) -> subprocess.Popen[bytes]:
    """The executor, listening on ``address`` (it answers once it has started)."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rara.executor.main",
            "--listen",
            address,
            "--insecure-loopback",
            "--plugins",
            plugins,
            "--artifact-root",
            str(artifact_root),
            "--grace",
            str(grace),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@contextmanager
def executor_process(
    address: str,
    artifact_root: Path,
    plugins: str = CONFORMANCE_PLUGINS,
    grace: float = STOP_GRACE_S,
) -> Iterator[subprocess.Popen[bytes]]:
    """``start_executor``; SIGTERM at the end (it exits within ``grace`` and its shutdown)."""
    proc = start_executor(address, artifact_root, plugins, grace)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
        proc.wait(30)
