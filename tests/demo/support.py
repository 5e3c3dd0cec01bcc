"""The demo's worker and executor as real processes (``rara_rag.demo.services``), for tests."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rara.client import Client, RunView
from rara_rag.demo.__main__ import DEFINITION, services, wait_until_served
from rara_rag.demo.processes import Child
from rara_rag.demo.release import GATE

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


def through_the_gate(client: Client, run_id: int, timeout: float) -> RunView:
    """Run ``run_id`` to its end, approving its gate (examples/rag-refresh.yaml) on the way,
    as a person would once it waits there; a run that ends before it (a failure) is returned
    as it ended."""
    view = client.wait(run_id, timeout=timeout, until_person=True)
    if view.status.terminal:
        return view
    assert [w.step_key for w in client.awaiting_person(run_id)] == [GATE], view.steps
    client.decide_approval(run_id, GATE, approve=True, reason="tests approve it")
    return client.wait(run_id, timeout=60)
