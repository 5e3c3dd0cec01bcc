"""Worker test fixtures: workers in a thread of the test process (fast, can observe handler
state) and workers as real processes (signals, SIGKILL, many at once)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rara.runs import start_run
from rara.worker.dispatch import InProcessExecutor
from rara.worker.registry import load_registry
from rara.worker.runner import Worker
from rara.worker.settings import WorkerSettings
from rara.worker.store import WorkerStore, make_pool
from tests.helpers import apply, wait_for
from tests.worker.handlers import SEEN

ROOT = Path(__file__).resolve().parents[2]
HANDLERS = "tests.worker.handlers"

# Short leases so crash recovery takes seconds; everything else at test speed.
FAST = {"lease_seconds": 2.0, "heartbeat_seconds": 0.5, "reaper_seconds": 0.3,
        "poll_seconds": 0.5, "cancel_grace_seconds": 0.3, "shutdown_grace_seconds": 2.0,
        "log_level": "info"}


class ThreadWorker:
    """A Worker on its own event loop in a thread of the test process."""

    def __init__(self, url: str, tmp: Path, **settings: Any) -> None:
        values = {**FAST, "artifact_root": tmp / "artifacts", "handlers": [HANDLERS], **settings}
        self.settings = WorkerSettings(database_url=url, **values)
        self.loop = asyncio.new_event_loop()
        self.worker: Worker | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.worker = Worker(self.settings, [InProcessExecutor(load_registry(
                self.settings.handlers))], str(self.settings.database_url))
            self.loop.run_until_complete(self.worker.run())
        except BaseException as exc:  # surfaced by stop()
            self.error = exc
        finally:
            self.loop.close()

    def start(self, conn: psycopg.Connection[Any]) -> ThreadWorker:
        self.thread.start()
        wait_for(lambda: conn.execute("SELECT 1 FROM rara_workers WHERE id = %s",
                                      (self.settings.id,)).fetchone(), what="worker registered")
        return self

    def stop(self, timeout: float = 15.0) -> None:
        if self.thread.is_alive() and self.worker is not None:
            self.loop.call_soon_threadsafe(self.worker.stop)
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "worker thread did not stop"
        if self.error is not None:
            raise self.error


@asynccontextmanager
async def worker_store(url: str, worker: str, *, pool_size: int = 2,
                       hot: bool = False) -> AsyncIterator[WorkerStore]:
    """A worker's statements (``WorkerStore``) over a pool of their own, for tests that lease
    and end attempts by hand; ``hot``: with the worker's own lease and completion connections
    (``HOT_PATH_SESSION``), as a running worker has them."""
    pool = make_pool(url, pool_size)
    await pool.open()
    store = WorkerStore(pool, worker, own_url=url if hot else None)
    try:
        yield store
    finally:
        await store.close()
        await pool.close()


@pytest.fixture(autouse=True)
def _forget_seen() -> Iterator[None]:
    """Run ids restart at 1 in every test database: what handlers saw must not leak across."""
    SEEN.clear()
    yield
    SEEN.clear()


@pytest.fixture
def thread_worker(database_url: str, tmp_path: Path,
                  conn: psycopg.Connection[Any]) -> Iterator[Callable[..., ThreadWorker]]:
    started: list[ThreadWorker] = []

    def make(**settings: Any) -> ThreadWorker:
        worker = ThreadWorker(database_url, tmp_path, **settings).start(conn)
        started.append(worker)
        return worker

    yield make
    for worker in started:
        worker.stop()


class WorkerProcess:
    """``python -m rara.worker`` as a child process, logging to a file."""

    def __init__(self, url: str, worker_id: str, log: Path, **settings: Any) -> None:
        self.id = worker_id
        self.log = log
        args = [sys.executable, "-m", "rara.worker", "--handlers", HANDLERS,
                "--database-url", url, "--id", worker_id]
        for key, value in {**FAST, **settings}.items():
            flag = key.replace("_", "-")
            args += [f"--{flag}" if value else f"--no-{flag}"] if isinstance(value, bool) else [
                f"--{flag}", str(value)]
        # `-m` puts the working directory on sys.path, which is enough for the tests' modules.
        env = {**os.environ, "RARA_WORKER_LOG_JSON": "true"}
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=out, stderr=out)

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


@pytest.fixture
def spawn(database_url: str, tmp_path: Path,
          conn: psycopg.Connection[Any]) -> Iterator[Callable[..., WorkerProcess]]:
    procs: list[WorkerProcess] = []

    def make(worker_id: str, *, wait: bool = True, **settings: Any) -> WorkerProcess:
        proc = WorkerProcess(database_url, worker_id, tmp_path / f"{worker_id}.log",
                             artifact_root=tmp_path / "artifacts", **settings)
        procs.append(proc)
        if wait:
            def registered() -> bool:
                assert proc.proc.poll() is None, f"worker {worker_id} exited:\n{proc.output()}"
                return conn.execute("SELECT 1 FROM rara_workers WHERE id = %s",
                                    (worker_id,)).fetchone() is not None
            wait_for(registered, timeout=30, what=f"worker {worker_id} registered")
        return proc

    yield make
    for proc in procs:
        if proc.proc.poll() is None:
            proc.signal(signal.SIGKILL)
        proc.proc.wait(10)


def define(conn: psycopg.Connection[Any], name: str, steps: list[dict[str, Any]]) -> None:
    apply(conn, name, steps)


def start(conn: psycopg.Connection[Any], name: str, input: dict[str, Any] | None = None) -> int:
    return start_run(conn, name, input=input or {}, queue_anyway=True).run_id


def run_status(conn: psycopg.Connection[Any], run_id: int) -> str:
    row = conn.execute("SELECT status::text FROM rara_runs WHERE id = %s", (run_id,)).fetchone()
    assert row is not None
    return str(row[0])


def wait_run(conn: psycopg.Connection[Any], run_id: int, *, timeout: float = 30.0,
             status: str | None = None) -> str:
    """Wait until the run is terminal; optionally assert its status."""
    final = wait_for(lambda: (s := run_status(conn, run_id)) in ("succeeded", "failed", "cancelled")
                     and s, timeout=timeout, what=f"run {run_id} to end")
    if status is not None:
        assert final == status, steps_of(conn, run_id)
    return str(final)


def steps_of(conn: psycopg.Connection[Any], run_id: int) -> list[dict[str, Any]]:
    cur = conn.execute("SELECT key, status::text, attempt, releases, error, result, leased_by "
                       "FROM rara_steps WHERE run_id = %s ORDER BY id", (run_id,))
    names = [d.name for d in cur.description or []]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def attempts_of(conn: psycopg.Connection[Any], run_id: int) -> list[dict[str, Any]]:
    cur = conn.execute("SELECT s.key, a.attempt, a.worker, a.outcome::text AS outcome, a.error, "
                       "a.started_at, a.ended_at, a.ended_by FROM rara_attempts a "
                       "JOIN rara_steps s ON s.id = a.step_id WHERE a.run_id = %s "
                       "ORDER BY s.id, a.attempt", (run_id,))
    names = [d.name for d in cur.description or []]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
