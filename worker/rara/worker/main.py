"""Running a worker process: settings → executors → ``Worker`` under signal handlers.

SIGTERM and SIGINT start a graceful stop (a second one skips the rest of the grace period).
With ``processes`` > 1 the process is a worker group's supervisor instead (rara.worker.group).
"""

from __future__ import annotations

import asyncio
import signal
import sys

import structlog

from rara import logs, metrics
from rara import settings as rara_settings
from rara.pg.connect import database_url
from rara.secrets import redact
from rara.worker import group, heap
from rara.worker.dispatch import Executor, InProcessExecutor
from rara.worker.grpc_executor import GrpcExecutor
from rara.worker.listener import Notifications
from rara.worker.registry import RegistryError, load_registry
from rara.worker.runner import Worker
from rara.worker.settings import WorkerSettings


def build_executors(settings: WorkerSettings) -> list[Executor]:
    """The executors of this process: the in-process registry, and a gRPC executor when
    endpoints are configured (without one, ``executor: grpc`` steps are not leased here)."""
    executors: list[Executor] = [InProcessExecutor(load_registry(settings.handlers))]
    if settings.executor_endpoints:
        executors.append(
            GrpcExecutor.from_token_file(
                settings.executor_endpoints,
                settings.executor_token_file,
                refresh_seconds=settings.executor_refresh_seconds,
                sessions=settings.executor_sessions,
            )
        )
    return executors


async def serve(settings: WorkerSettings, notifications: Notifications | None = None) -> None:
    url = database_url(settings.database_url)
    executors = build_executors(settings)  # (the handlers' modules imported)
    worker = Worker(settings, executors, url, notifications)
    heap.settle()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, worker.stop)
    if settings.metrics_port is not None:
        metrics.serve(settings.metrics_port)
    # Executors ask their endpoints what they serve now and then; the worker leases by that.
    stop_watching = asyncio.Event()
    remote = [e for e in executors if isinstance(e, GrpcExecutor)]
    for executor in remote:
        await executor.refresh()
        executor.on_change = worker.capabilities_changed
    watchers = [asyncio.create_task(e.watch(stop_watching)) for e in remote]
    try:
        await worker.run()
    finally:
        stop_watching.set()
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        for executor in remote:
            await executor.close()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def run(settings: WorkerSettings, notifications: Notifications | None = None) -> int:
    """Run until SIGTERM/SIGINT; the exit code (2: handlers that cannot be loaded).
    ``notifications``: a group member's relay (rara.worker.member) instead of a LISTEN."""
    if settings.processes > 1:
        return group.run(settings)
    logs.configure(settings.log_level, json=settings.log_json)
    structlog.contextvars.bind_contextvars(worker=settings.id)
    # uvloop where it is installed (a pinned dependency off Windows): the worker's hot path is
    # event-loop machinery as much as anything (tasks, futures, callbacks per attempt), and
    # uvloop cut the worker's CPU per no-op step by ~15% (bench: 2 workers, 20k steps).
    try:
        import uvloop
    except ImportError:  # pragma: no cover - Windows
        start = asyncio.run
    else:
        start = uvloop.run
    try:
        start(serve(settings, notifications))
    except (RegistryError, ImportError, FileNotFoundError) as exc:
        print(f"rara worker: {redact(str(exc))}", file=sys.stderr)
        return 2
    return 0


def main() -> None:
    """``python -m rara.worker``: the same command as ``rara worker``."""
    rara_settings.main(rara_settings.command(WorkerSettings, run), "worker")
