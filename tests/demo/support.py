"""The demo's worker and executor as real processes (``rara_rag.demo.services``), for tests."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rara.client import Client
from rara_rag.demo.__main__ import DEFINITION, services, wait_until_served
from rara_rag.demo.processes import Child

#: The smallest input that exercises every step: 12 documents, 32 train pairs, one epoch.
SMALL = {"limit": 12, "train": 32, "epochs": 1}


@dataclass
class Fleet:
    client: Client
    artifacts: str  # where both keep their artifacts: a directory or s3://…
    executor: Child
    worker: Child

    def flag(self, name: str) -> str:
        return self.executor.argv[self.executor.argv.index(name) + 1]


@contextlib.contextmanager
def running_fleet(
    database_url: str, home: Path, artifacts: str, lease_seconds: float = 5.0
) -> Iterator[Fleet]:
    """The rag-refresh definition applied, a worker and an executor serving it (stopped with
    SIGTERM after); S3 credentials, if any, are taken from this process's environment."""
    client = Client(database_url)
    client.apply_definition(DEFINITION.read_text())
    executor, worker = services(home, database_url, artifacts, lease_seconds=lease_seconds)
    for child in (executor, worker):
        child.start()
    try:
        wait_until_served(client, time.monotonic() + 90)
        yield Fleet(client, artifacts, executor, worker)
    finally:
        worker.terminate()
        executor.terminate()


def step_of(client: Client, run_id: int, key: str) -> dict[str, Any]:
    return next(s for s in client.get_run(run_id).steps if s["key"] == key)
