"""DBOS (dbos-transact-py) as a peer: no-op workflows of 1 or 3 steps through a DBOS queue.

Imported by ``run_peer.py`` in the peers' venv (never by rara). DBOS keeps everything in its
*system database*: here the peer's fresh database on the bench's server (``bench_peer_dbos_…``),
its tables in schema ``dbos``. A workflow is durable the way a rara run is: its status row is
written when it is enqueued, claimed by a worker process (``started_at_epoch_ms``), each step's
output is checkpointed (a row in ``operation_outputs``), and its end is written
(``status = 'SUCCESS'``, ``updated_at``).

How the bench drives it:

- set-up: one ``DBOS.launch()`` with no queue (creates and migrates the schema), then N
  workflows enqueued with ``DBOSClient.enqueue_in_transaction`` in one transaction (not timed);
- drain: K worker processes, each launched, then registering the queue on the release (DBOS
  starts polling a queue within a second of its registration); a DBOS worker never exits by
  itself, so each watches the database until nothing is queued or pending, then
  ``DBOS.destroy()``. ``seconds`` comes from DBOS's own rows, first claim
  (``min(started_at_epoch_ms)``) to last end (``max(updated_at)``), as rara's drain is timed
  from its attempt rows: the launch of a process is not part of a workflow's path;
- latency: one idle worker; the client enqueues one workflow, the workflow stamps its start.

DBOS queues are polled, not notified: a worker claims what its queue allows every
``polling_interval_sec`` (DBOS default 1.0 s; it backs off on contention). Both the drain's
throughput and the wake-up latency follow from that interval, so it is a parameter
(``PEER_DBOS_POLL_S``) and reported with the results.
"""

from __future__ import annotations

import os
import time
from typing import Any

QUEUE = "bench"
WORKFLOW = "bench_noop"
# The queue's polling interval. 0.05 s: DBOS claims up to WORKER_CONCURRENCY workflows per poll
# and process, so the interval bounds the drain at about WORKER_CONCURRENCY / interval per
# process and the wake-up at about half of it. Measured on 2 cores (2 processes, 1-step): see
# docs/benchmarks.md.
POLL_S = float(os.environ.get("PEER_DBOS_POLL_S", "0.01"))
# Workflows running at once per process: DBOS runs each in a thread of an unbounded pool, so
# this is the only bound on threads; 64 keeps a poll's claim large without thousands of threads.
WORKER_CONCURRENCY = int(os.environ.get("PEER_DBOS_CONCURRENCY", "64"))


def steps_of(peer: str) -> int:
    """``dbos-1step`` -> 1, ``dbos-3step`` -> 3."""
    return int(peer.removeprefix("dbos-").removesuffix("step"))


def _config(dsn: str, pool: int = 10) -> Any:
    return {
        "name": "rara-bench",
        "system_database_url": dsn,
        "sys_db_pool_size": pool,
        "log_level": "WARNING",
        # One version for the client's enqueues and every worker (DBOS otherwise derives it
        # from the hash of the registered workflows' source).
        "application_version": "bench",
    }


def _register(steps: int, starts: Any = None) -> None:
    """The workflow and its step, registered with this process's DBOS instance."""
    from dbos import DBOS

    @DBOS.step(name="bench_noop_step")
    def noop_step() -> None:
        return None

    @DBOS.workflow(name=WORKFLOW)
    def noop_workflow(i: int) -> None:
        if starts is not None:
            starts.put((i, time.monotonic()))
        for _ in range(steps):
            noop_step()


def setup(dsn: str, jobs: int, steps: int) -> None:
    """Create the system database's schema; enqueue ``jobs`` workflows in one transaction."""
    import sqlalchemy as sa
    from dbos import DBOS, DBOSClient

    DBOS(config=_config(dsn, pool=2))
    try:
        DBOS.launch()  # no queue registered: nothing is claimed here
    finally:
        DBOS.destroy()
    if not jobs:
        return
    client = DBOSClient(system_database_url=dsn)
    engine = sa.create_engine(dsn.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        options: Any = {"queue_name": QUEUE, "workflow_name": WORKFLOW, "app_version": "bench"}
        with engine.begin() as conn:
            for i in range(jobs):
                client.enqueue_in_transaction(conn, options, i)
        with engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").execute(sa.text("ANALYZE"))
    finally:
        engine.dispose()
        client.destroy()


def count_done(dsn: str) -> tuple[int, int]:
    """(workflows succeeded, workflows not finished) in the system database."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE status = 'SUCCESS'),"
            " count(*) FILTER (WHERE status IN ('ENQUEUED', 'PENDING'))"
            " FROM dbos.workflow_status"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def db_seconds(dsn: str) -> float:
    """First claim to last end of the drained workflows, from DBOS's own rows."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT (max(updated_at) - min(started_at_epoch_ms)) / 1000.0"
            " FROM dbos.workflow_status WHERE status = 'SUCCESS'"
        ).fetchone()
    assert row is not None
    return float(row[0])


def checkpoints(dsn: str) -> int:
    """Step outputs recorded (one row per step run): that the steps did run, durably."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM dbos.operation_outputs").fetchone()
    assert row is not None
    return int(row[0])


def worker(dsn: str, steps: int, ready: Any, go: Any, starts: Any, latency: bool) -> None:
    """One DBOS process: launched on the release; drains the queue (or serves, for latency)."""
    from dbos import DBOS

    DBOS(config=_config(dsn))
    _register(steps, starts if latency else None)
    DBOS.launch()  # the queue is not registered yet: nothing is claimed before the release
    try:
        ready.put(os.getpid())
        go.wait()
        # DBOS persists the queue and its thread starts polling it within a second.
        DBOS.register_queue(
            QUEUE, worker_concurrency=WORKER_CONCURRENCY, polling_interval_sec=POLL_S
        )
        if latency:
            while True:  # served until the parent stops this process
                time.sleep(3600)
        while count_done(dsn)[1]:
            time.sleep(0.1)
    finally:
        DBOS.destroy(workflow_completion_timeout_sec=5)


class Enqueuer:
    """One workflow at a time through a DBOS client, as an application outside DBOS would."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    async def open(self) -> None:
        from dbos import DBOSClient

        self.client = DBOSClient(system_database_url=self.dsn)
        self.options: Any = {"queue_name": QUEUE, "workflow_name": WORKFLOW, "app_version": "bench"}

    async def enqueue_one(self, i: int) -> int:
        await self.client.enqueue_async(self.options, i)
        return i


def versions() -> dict[str, str]:
    from importlib.metadata import version

    return {
        "dbos": version("dbos"),
        "sqlalchemy": version("sqlalchemy"),
        "psycopg": version("psycopg"),
    }
