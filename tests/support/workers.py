"""Workers for tests: in a thread of the test process (fast, can observe handler state), as
real processes (signals, SIGKILL, many at once), or a worker's statements by hand."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import psycopg

from rara.worker.dispatch import InProcessExecutor
from rara.worker.registry import load_registry
from rara.worker.runner import Worker
from rara.worker.settings import WorkerSettings
from rara.worker.store import WorkerStore, make_pool
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
HANDLERS = "tests.worker.handlers"

# Short leases so crash recovery takes seconds; everything else at test speed.
FAST = {
    "lease_seconds": 2.0,
    "heartbeat_seconds": 0.5,
    "reaper_seconds": 0.3,
    "poll_seconds": 0.5,
    "cancel_grace_seconds": 0.3,
    "shutdown_grace_seconds": 2.0,
    "log_level": "info",
}


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
            self.worker = Worker(
                self.settings,
                [InProcessExecutor(load_registry(self.settings.handlers))],
                str(self.settings.database_url),
            )
            self.loop.run_until_complete(self.worker.run())
        except BaseException as exc:  # surfaced by stop()
            self.error = exc
        finally:
            self.loop.close()

    def start(self, conn: psycopg.Connection[Any]) -> ThreadWorker:
        self.thread.start()
        wait_until(
            lambda: conn.execute(
                "SELECT 1 FROM rara_workers WHERE id = %s", (self.settings.id,)
            ).fetchone(),
            message="worker registered",
        )
        return self

    def stop(self, timeout: float = 15.0) -> None:
        if self.thread.is_alive() and self.worker is not None:
            self.loop.call_soon_threadsafe(self.worker.stop)
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "worker thread did not stop"
        if self.error is not None:
            raise self.error


@asynccontextmanager
async def worker_store(url: str, worker: str, *, pool_size: int = 2) -> AsyncIterator[WorkerStore]:
    """A worker's statements (``WorkerStore``) over a pool of their own, as a running worker
    has them (``HOT_PATH_SESSION``), for tests that lease and end attempts by hand."""
    pool = make_pool(url, pool_size)
    await pool.open()
    store = WorkerStore(pool, worker)
    try:
        yield store
    finally:
        await pool.close()


class WorkerProcess:
    """``python -m rara.worker`` as a child process, logging to a file."""

    def __init__(self, url: str, worker_id: str, log: Path, **settings: Any) -> None:
        self.id = worker_id
        self.log = log
        args = [
            sys.executable,
            "-m",
            "rara.worker",
            "--handlers",
            HANDLERS,
            "--database-url",
            url,
            "--id",
            worker_id,
        ]
        for key, value in {**FAST, **settings}.items():
            flag = key.replace("_", "-")
            args += (
                [f"--{flag}" if value else f"--no-{flag}"]
                if isinstance(value, bool)
                else [f"--{flag}", str(value)]
            )
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


@contextmanager
def worker_processes(
    url: str, names: list[str], logs: Path, *, env: dict[str, str] | None = None, **flags: Any
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """One ``python -m rara.worker`` per name (handlers: ``tests.support.bench_handlers``),
    logging JSON to ``logs/<name>.log``; ``flags`` become ``--flag value`` options, ``env``
    adds settings (``RARA_WORKER_*``). At the end SIGTERM (a graceful stop), SIGKILL after 20 s."""
    procs = []
    for name in names:
        args = [
            sys.executable,
            "-m",
            "rara.worker",
            "--handlers",
            "tests.support.bench_handlers",
            "--database-url",
            url,
            "--id",
            name,
            "--log-level",
            "warning",
        ]
        for key, value in flags.items():
            args += [f"--{key.replace('_', '-')}", str(value)]
        with open(logs / f"{name}.log", "ab") as out:
            procs.append(
                subprocess.Popen(
                    args,
                    cwd=ROOT,
                    stdout=out,
                    stderr=out,
                    env={**os.environ, "RARA_WORKER_LOG_JSON": "true", **(env or {})},
                )
            )
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
