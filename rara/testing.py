"""A test kit for handler authors: run a step's handler as a worker runs it, in a test.

    from rara.testing import run_step, temporary_database

    def test_greet(tmp_path):
        with temporary_database() as url:
            step = run_step(registry, "hello.greet@1", {"name": "Ada"},
                            database_url=url, artifacts=tmp_path / "artifacts")
        assert step.status == "succeeded", step.error
        assert step.result == {"greeting": "Hello, Ada!"}

No fake of rara's own logic: ``run_step`` applies a one-step definition naming the capability,
starts a run of it and serves it with a real ``rara.worker`` Worker (in a thread of the test
process, the handlers of ``registry`` in process), which leases the step, builds the same
StepContext a deployed worker gives (input, artifact store, checkpoints, progress,
cancellation), fences every write by its lease and records the outcome. What comes back is
read from the database: the step's status, result or error, its attempts and its artifacts.

The worker leases any queued step of the capability, in any namespace: give it a database of
its own (``temporary_database``: a new database on the server of ``DATABASE_URL`` or the
project's embedded server, migrated, dropped after), not one where real runs queue.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from rara.artifacts import open_store
from rara.client import Client
from rara.pg import artifacts as artifact_rows
from rara.pg import events
from rara.pg.connect import database_url as default_url
from rara.pg.migrate import migrate
from rara.worker.dispatch import InProcessExecutor
from rara.worker.registry import Registry, load_registry
from rara.worker.runner import Worker
from rara.worker.settings import WorkerSettings

# The worker's timings at test speed: a failed attempt is retried, and the worker stops, in
# well under a second; the lease is long enough for a handler that pauses in a debugger a bit.
_FAST: dict[str, Any] = {
    "lease_seconds": 10.0,
    "heartbeat_seconds": 1.0,
    "poll_seconds": 0.2,
    "listening_poll_seconds": 1.0,
    "reaper_seconds": 1.0,
    "cancel_grace_seconds": 0.5,
    "shutdown_grace_seconds": 5.0,
    "log_level": "warning",
}


@dataclass(frozen=True)
class StepRun:
    """What the step's run left in the database, as ``rara runs show`` reads it."""

    run_id: int
    status: str  # the step's: succeeded | failed | …
    result: Any  # what the handler returned (its StepOutcome's result)
    error: dict[str, Any] | None  # the last attempt's error: type, message, traceback, code
    attempts: list[dict[str, Any]]  # one per attempt: attempt, outcome, error
    artifacts: dict[str, str] = field(default_factory=dict)  # name -> sha256:… digest
    artifact_root: Path | None = None

    def read_artifact(self, name: str) -> bytes:
        """An output artifact's bytes, read back from the store (digest verified)."""
        return open_store(self.artifact_root).get_bytes(self.artifacts[name])


def run_step(
    handlers: Registry | str,
    capability: str,
    input: Mapping[str, Any] | None = None,
    *,
    database_url: str,
    artifacts: str | Path,
    step_input: Mapping[str, Any] | None = None,
    max_attempts: int = 1,
    timeout: float = 60.0,
) -> StepRun:
    """Run the handler ``handlers`` registers for ``capability`` once, as a worker would.

    ``handlers``: a Registry, or the dotted path of a module defining ``registry`` (what
    ``rara worker --handlers`` takes). ``input``: the run input; ``step_input``: the step's
    own ``input:`` in the definition (the run input overlays it, as in a run). Retries:
    ``max_attempts`` (10 ms apart), a later attempt seeing the checkpoint the
    earlier one saved. ``artifacts``: the local folder the artifact store writes to.
    TimeoutError when the step has not ended after ``timeout`` seconds."""
    registry = handlers if isinstance(handlers, Registry) else load_registry([handlers])
    if capability not in registry:
        raise KeyError(f"no handler for {capability} (registered: {', '.join(registry)})")
    root = Path(artifacts)
    name = "test-" + uuid.uuid4().hex[:12]
    step: dict[str, Any] = {
        "key": "step",
        "capability": capability,
        "retry": {"maxAttempts": max_attempts, "initialDelay": "10ms", "maxDelay": "10ms"},
    }
    if step_input:
        step["input"] = dict(step_input)
    client = Client(database_url)
    client.apply_definition(
        {
            "apiVersion": "rara.dev/v1alpha1",
            "kind": "WorkflowDefinition",
            "metadata": {"name": name},
            "spec": {"steps": [step]},
        }
    )
    # Queued before the worker starts: the start would otherwise refuse a capability no live
    # worker serves yet.
    run_id = client.start_run(name, input=dict(input or {}), queue_anyway=True).run_id
    settings = WorkerSettings(
        database_url=database_url, capabilities=[capability], artifact_root=root, **_FAST
    )
    # Its own event loop in its own thread: callable from sync tests and from async ones.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        deadline = time.monotonic() + timeout
        pool.submit(asyncio.run, _serve(settings, registry, client, run_id, deadline)).result()
    return _read(client, run_id, root)


async def _serve(
    settings: WorkerSettings, registry: Registry, client: Client, run_id: int, deadline: float
) -> None:
    url = str(settings.database_url)
    worker = Worker(settings, [InProcessExecutor(registry)], url)
    serving = asyncio.create_task(worker.run())
    try:
        while not (await asyncio.to_thread(client.get_run, run_id)).status.terminal:
            if serving.done():
                serving.result()  # the worker's own failure, raised here
                raise RuntimeError("the worker stopped before the step ended")
            if time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id}'s step did not end in time")
            await asyncio.sleep(0.05)
    finally:
        worker.stop()
        await serving


def _read(client: Client, run_id: int, root: Path) -> StepRun:
    view = client.get_run(run_id)
    (row,) = view.steps
    with psycopg.connect(client.url, autocommit=True) as conn:
        attempts = [
            {"attempt": a.attempt, "outcome": str(a.outcome), "error": a.error}
            for a in events.list_attempts(conn, run_id)
        ]
        stored = {a.name: a.digest for a in artifact_rows.list_for_run(conn, run_id)}
    return StepRun(
        run_id=run_id,
        status=str(row["status"]),
        result=row["result"],
        error=row["error"],
        attempts=attempts,
        artifacts=stored,
        artifact_root=root,
    )


def _on_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


@contextlib.contextmanager
def temporary_database(server_url: str | None = None) -> Iterator[str]:
    """A new, migrated database on the server of ``server_url`` (default: ``DATABASE_URL``,
    else the project's embedded server, started if needed); yields its URL, dropped after.
    The login needs CREATEDB (the embedded server's has it)."""
    server = default_url(server_url)
    name = "rara_test_" + uuid.uuid4().hex[:12]
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        url = _on_database(server, name)
        migrate(url)
        yield url
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
