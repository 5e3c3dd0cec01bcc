"""Running a worker process: settings → executors → ``Worker`` under signal handlers.

SIGTERM and SIGINT start a graceful stop (a second one skips the rest of the grace period).
"""

from __future__ import annotations

import asyncio
import signal

import structlog

from rara import logs
from rara.pg.connect import database_url
from rara.worker.dispatch import Executor, InProcessExecutor
from rara.worker.registry import load_registry
from rara.worker.runner import Worker
from rara.worker.settings import WorkerSettings


def build_executors(settings: WorkerSettings) -> list[Executor]:
    """The executors of this process. A gRPC executor joins here once it exists; until then
    ``executor: grpc`` steps are simply not leased by this worker."""
    return [InProcessExecutor(load_registry(settings.handlers))]


async def serve(settings: WorkerSettings) -> None:
    url = database_url(settings.database_url)
    worker = Worker(settings, build_executors(settings), url)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, worker.stop)
    try:
        await worker.run()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def run(settings: WorkerSettings) -> None:
    logs.configure(settings.log_level, json=settings.log_json)
    structlog.contextvars.bind_contextvars(worker=settings.id)
    asyncio.run(serve(settings))
