"""Drain (or wake-up latency) of no-op jobs with one peer queue, run by the peers' venv python.

    .rara/bench-peers-venv/bin/python bench/peers/run_peer.py \
        --peer pgqueuer-asyncpg|pgqueuer-psycopg|procrastinate|dbos-1step|dbos-3step \
        --dsn URL --jobs N --workers K
    ... --peer temporal-1step|temporal-3step --temporal-bin DIR [--temporal-store sqlite]
    ... --latency --jobs M        # enqueue→start latency of an idle worker, one job at a time

This script must not import rara (it runs in a separate virtual environment with the peers'
pinned versions). It installs the peer's schema into the (fresh, empty) database behind
``--dsn``, enqueues N no-op jobs in one bulk statement (not timed), spawns K worker
*processes*, which connect, register the task and report ready, then releases them all at once;
``seconds`` runs from that release until the last worker has returned from its drain (its
completions flushed to the database). Afterwards it checks in the database that every job is
recorded as completed, and prints one JSON object on stdout.

A no-op job means the same as for rara: a row is leased/locked by a worker, the (empty) task
runs, and its completion is written to the database (PgQueuer: the job row is deleted and a
``successful`` row logged in ``pgqueuer_log``; Procrastinate: the row's status becomes
``succeeded``; DBOS: a workflow of 1 or 3 no-op steps, each step checkpointed, its status
``SUCCESS``, see ``dbos_peer.py``, which also says why DBOS's drain is timed from its rows;
Temporal: the same workflows of 1 or 3 activities on Temporal's server, started here for the
run, on this PostgreSQL server or on SQLite, see ``temporal_peer.py``).
Each peer otherwise gets its best reasonable throughput configuration from its docs; the
choices are commented below.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import queue
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(1, str(Path(__file__).resolve().parents[2]))  # bench.proc_cpu (imports no rara)
import dbos_peer  # beside this script (its folder is sys.path[0])
import temporal_peer

from bench.proc_cpu import process_cpu, server_cpu

PEERS = (
    "pgqueuer-asyncpg",
    "pgqueuer-psycopg",
    "procrastinate",
    "dbos-1step",
    "dbos-3step",
    "temporal-1step",
    "temporal-3step",
)

# PgQueuer: rows per dequeue. QueueManager.run defaults to 10; its completion-log buffer flushes
# every `batch_size` completions (or on its timer), so a larger batch also batches the
# acknowledgements (one DELETE … / INSERT INTO pgqueuer_log per flush) and the drain-mode
# bookkeeping queries run once per batch. Measured on 2 cores with 2 processes: 10 -> ~2.9k/s,
# 50 -> ~7-9k/s, 100 -> ~12k/s (quiet moment), 200 no better; 100 it is.
PGQ_BATCH_SIZE = int(os.environ.get("PEER_PGQ_BATCH_SIZE", "100"))
# Procrastinate fetches one job per call (procrastinate_fetch_job_v2); throughput comes from
# `concurrency` (asyncio jobs per worker, docs: howto/production/concurrency, for async tasks).
# 1, 2, 4 and 8 per process (2 processes) measured within the noise of a shared 2-core machine
# (~250…570 jobs/s); 2 lets one slot's fetch overlap the other's finish without adding lock
# contention in the fetch function. Pool: a fetch and a finish per slot, plus the LISTEN one.
PROC_CONCURRENCY = int(os.environ.get("PEER_PROC_CONCURRENCY", "2"))

READY_TIMEOUT_S = 60.0


# --------------------------------------------------------------------------------------------
# PgQueuer
# --------------------------------------------------------------------------------------------


async def _pgq_driver(peer: str, dsn: str) -> Any:
    if peer == "pgqueuer-asyncpg":
        import asyncpg
        from pgqueuer.db import AsyncpgDriver

        return AsyncpgDriver(await asyncpg.connect(dsn))
    import psycopg
    from pgqueuer.db import PsycopgDriver

    # PgQueuer requires autocommit on psycopg connections (each query its own transaction).
    return PsycopgDriver(await psycopg.AsyncConnection.connect(dsn, autocommit=True))


async def _pgq_setup(peer: str, dsn: str, jobs: int) -> None:
    from pgqueuer.queries import Queries

    queries = Queries(await _pgq_driver(peer, dsn))
    if not await queries.schema_is_installed():
        # Default durability ("durable": every table LOGGED), like rara's tables.
        await queries.install()
    if jobs:
        # One INSERT … SELECT unnest($arrays): the bulk path of Queries.enqueue.
        await queries.enqueue(["noop"] * jobs, [None] * jobs, [0] * jobs)
        await queries.driver.execute("ANALYZE")


async def _pgq_worker(peer: str, dsn: str, ready: Any, go: Any, starts: Any, latency: bool) -> None:
    from pgqueuer.qm import QueueManager
    from pgqueuer.queries import Queries
    from pgqueuer.types import QueueExecutionMode

    qm = QueueManager(Queries(await _pgq_driver(peer, dsn)))

    if latency:

        @qm.entrypoint("noop")
        async def noop_timed(job: Any) -> None:
            starts.put((int(job.id), time.monotonic()))

    else:

        @qm.entrypoint("noop")
        async def noop(job: Any) -> None:
            return None

    ready.put(os.getpid())
    await asyncio.get_running_loop().run_in_executor(None, go.wait)
    await qm.run(
        batch_size=1 if latency else PGQ_BATCH_SIZE,
        # drain: exit once the queue is empty and the completion buffer flushed;
        # continuous (latency): sleep on LISTEN until a NOTIFY from the enqueue trigger.
        mode=QueueExecutionMode.continuous if latency else QueueExecutionMode.drain,
        # Unlimited in-flight jobs per worker (no max_concurrent_tasks cap): the jobs are no-ops.
        max_concurrent_tasks=None,
        # The periodic pgqueuer_log -> statistics fold is off: it is not part of a job's path.
        log_aggregation_interval=timedelta(0),
    )


async def _pgq_count_done(peer: str, dsn: str) -> tuple[int, int]:
    from pgqueuer.queries import Queries

    queries = Queries(await _pgq_driver(peer, dsn))
    left = await queries.driver.fetch("SELECT count(*) AS n FROM pgqueuer")
    done = await queries.driver.fetch(
        "SELECT count(*) AS n FROM pgqueuer_log WHERE status = 'successful'"
    )
    return int(done[0]["n"]), int(left[0]["n"])


class _PgqEnqueuer:
    def __init__(self, peer: str, dsn: str) -> None:
        self.peer, self.dsn = peer, dsn

    async def open(self) -> None:
        from pgqueuer.queries import Queries

        self.queries = Queries(await _pgq_driver(self.peer, self.dsn))

    async def enqueue_one(self, i: int) -> int:
        (job_id,) = await self.queries.enqueue("noop", None)
        return int(job_id)


# --------------------------------------------------------------------------------------------
# Procrastinate
# --------------------------------------------------------------------------------------------


def _proc_app(dsn: str, pool_size: int, starts: Any = None) -> Any:
    import procrastinate

    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(
            conninfo=dsn, min_size=pool_size, max_size=pool_size
        )
    )

    # An async task: a sync one would be run through a thread (sync_to_async) per job.
    @app.task(name="noop")
    async def noop(i: int = 0) -> None:
        if starts is not None:
            starts.put((i, time.monotonic()))

    return app


async def _proc_setup(dsn: str, jobs: int) -> None:
    app = _proc_app(dsn, 1)
    async with app.open_async():
        async with app.connector.pool.connection() as conn:
            installed = await (
                await conn.execute("SELECT to_regclass('procrastinate_jobs') IS NOT NULL")
            ).fetchone()
        if not installed[0]:
            await app.schema_manager.apply_schema_async()
        if jobs:
            # One call of procrastinate_defer_jobs_v1 with an array of N jobs.
            await app.tasks["noop"].batch_defer_async(*([{}] * jobs))
            async with app.connector.pool.connection() as conn:
                await conn.execute("ANALYZE")


async def _proc_worker(dsn: str, ready: Any, go: Any, starts: Any, latency: bool) -> None:
    concurrency = 1 if latency else PROC_CONCURRENCY
    # A fetch and a finish may overlap per slot; +1: the LISTEN connection, held throughout.
    app = _proc_app(dsn, 2 * concurrency + 1, starts if latency else None)
    async with app.open_async():
        ready.put(os.getpid())
        await asyncio.get_running_loop().run_in_executor(None, go.wait)
        await app.run_worker_async(
            concurrency=concurrency,
            # wait=False: return once the queues are caught up (drain). Latency: wait forever.
            wait=latency,
            # LISTEN/NOTIFY on job_inserted wakes an idle worker (the polling interval, default
            # 5 s, is only the fallback).
            listen_notify=True,
            # Keep finished rows (status 'succeeded'), the default, like rara keeps its steps.
            delete_jobs="never",
            install_signal_handlers=False,
        )


async def _proc_count_done(dsn: str) -> tuple[int, int]:
    import psycopg

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        row = await (
            await conn.execute(
                "SELECT count(*) FILTER (WHERE status = 'succeeded'),"
                " count(*) FILTER (WHERE status <> 'succeeded') FROM procrastinate_jobs"
            )
        ).fetchone()
    return int(row[0]), int(row[1])


class _ProcEnqueuer:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    async def open(self) -> None:
        self.app = _proc_app(self.dsn, 1)
        await self.app.open_async()

    async def enqueue_one(self, i: int) -> int:
        await self.app.tasks["noop"].defer_async(i=i)
        return i


# --------------------------------------------------------------------------------------------
# Processes and measurements
# --------------------------------------------------------------------------------------------


def _worker_process(
    peer: str, dsn: str, ready: Any, go: Any, starts: Any, done: Any, latency: bool
) -> None:
    async def main() -> None:
        if peer == "procrastinate":
            await _proc_worker(dsn, ready, go, starts, latency)
        else:
            await _pgq_worker(peer, dsn, ready, go, starts, latency)

    try:
        if peer.startswith("dbos-"):
            # DBOS refuses its synchronous API inside an event loop; its workflows run in the
            # threads of its executor pool.
            dbos_peer.worker(dsn, dbos_peer.steps_of(peer), ready, go, starts, latency)
        elif peer.startswith("temporal-"):
            temporal_peer.worker(temporal_peer.steps_of(peer), ready, go, starts, latency)
        else:
            asyncio.run(main())
        done.put(("ok", os.getpid(), time.monotonic()))
    except BaseException as exc:  # report, the parent decides
        done.put(("error", os.getpid(), f"{type(exc).__name__}: {exc}"))
        raise


def _spawn(peer: str, dsn: str, workers: int, latency: bool) -> tuple[list[Any], Any, Any, Any]:
    ctx = mp.get_context("spawn")
    ready, starts, done, go = ctx.Queue(), ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [
        ctx.Process(
            target=_worker_process,
            args=(peer, dsn, ready, go, starts, done, latency),
            daemon=True,
        )
        for _ in range(workers)
    ]
    for p in procs:
        p.start()
    deadline = time.monotonic() + READY_TIMEOUT_S
    waiting = workers
    while waiting:
        try:
            ready.get(timeout=0.5)
            waiting -= 1
        except queue.Empty:
            dead = [p.exitcode for p in procs if p.exitcode is not None]
            if dead or time.monotonic() > deadline:
                _stop(procs)
                raise RuntimeError(f"{waiting} worker(s) not ready (exit codes {dead})") from None
    return procs, go, starts, done


def _stop(procs: list[Any]) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(5)


def _setup(peer: str, dsn: str, jobs: int) -> None:
    if peer.startswith("dbos-"):
        dbos_peer.setup(dsn, jobs, dbos_peer.steps_of(peer))  # outside any event loop
    elif peer.startswith("temporal-"):
        temporal_peer.setup(jobs, temporal_peer.steps_of(peer))  # its server: main()
    elif peer == "procrastinate":
        asyncio.run(_proc_setup(dsn, jobs))
    else:
        asyncio.run(_pgq_setup(peer, dsn, jobs))


async def _count_done(peer: str, dsn: str) -> tuple[int, int]:
    if peer.startswith("dbos-"):
        return dbos_peer.count_done(dsn)
    if peer.startswith("temporal-"):
        return await temporal_peer.count_done_async()
    if peer == "procrastinate":
        return await _proc_count_done(dsn)
    return await _pgq_count_done(peer, dsn)


def drain(
    peer: str,
    dsn: str,
    jobs: int,
    workers: int,
    timeout: float,
    postmaster: int | None = None,
    peer_server: int | None = None,
) -> dict[str, Any]:
    """``peer_server``: the pid of a peer's own server process (Temporal's), whose CPU is
    counted with PostgreSQL's as the server side."""
    _setup(peer, dsn, 0)
    before, queued = asyncio.run(_count_done(peer, dsn))
    if queued:
        raise RuntimeError(f"{peer}: the database already holds {queued} unfinished jobs")
    _setup(peer, dsn, jobs)
    procs, go, _starts, done = _spawn(peer, dsn, workers, latency=False)
    # CPU over the drain, measured as rara's is (bench.proc_cpu): the server's, and the worker
    # processes' (their time at the release subtracted; after they exit it is in ours).
    children = os.times()
    workers_cpu = -sum(process_cpu(p.pid) for p in procs if p.pid is not None)
    try:
        server_before = server_cpu(postmaster)
        peer_server_before = process_cpu(peer_server) if peer_server else 0.0
        t0, t0_epoch = time.monotonic(), time.time()
        go.set()
        ends = []
        for _ in procs:
            status, pid, value = done.get(timeout=max(1.0, t0 + timeout - time.monotonic()))
            if status != "ok":
                raise RuntimeError(f"worker {pid} failed: {value}")
            ends.append(value)
        seconds = max(ends) - t0
        server = server_cpu(postmaster) - server_before
        peer_server_cpu = process_cpu(peer_server) - peer_server_before if peer_server else 0.0
    finally:
        _stop(procs)
    after = os.times()
    workers_cpu += (
        after.children_user
        + after.children_system
        - children.children_user
        - children.children_system
    )
    completed, left = asyncio.run(_count_done(peer, dsn))
    completed -= before
    if completed != jobs or left:
        raise RuntimeError(f"{peer}: {completed} of {jobs} jobs completed, {left} left")
    extra: dict[str, Any] = {}
    if peer.startswith("dbos-"):
        steps = dbos_peer.steps_of(peer)
        if dbos_peer.checkpoints(dsn) != jobs * steps:
            raise RuntimeError(
                f"{peer}: {dbos_peer.checkpoints(dsn)} step outputs recorded, "
                f"{jobs * steps} expected"
            )
        # From DBOS's rows (first claim to last end): the launch of each process is not timed.
        extra = {
            "steps_per_job": steps,
            "seconds_release_to_exit": round(seconds, 4),
            "poll_s": dbos_peer.POLL_S,
            "worker_concurrency": dbos_peer.WORKER_CONCURRENCY,
        }
        seconds = dbos_peer.db_seconds(dsn)
    if peer.startswith("temporal-"):
        steps = temporal_peer.steps_of(peer)
        for key in (0, jobs - 1):  # the first and the last started
            ran = temporal_peer.activities_completed(f"bench-{key}")
            if ran != steps:
                raise RuntimeError(f"{peer}: workflow bench-{key} ran {ran} of {steps} activities")
        # From Temporal's visibility records: the release to the last workflow's close.
        extra = {
            "steps_per_job": steps,
            "seconds_release_to_exit": round(seconds, 4),
            "store": temporal_peer.STORE,
        }
        seconds = temporal_peer.last_close(jobs, time.monotonic() + 60) - t0_epoch
    return {
        "peer": peer,
        "mode": "drain",
        "jobs": jobs,
        "workers": workers,
        "seconds": round(seconds, 4),
        "jobs_per_s": round(jobs / seconds, 1),
        "completed_in_db": completed,
        "cpu_per_job": {
            "postgres_us": round(server / jobs * 1e6, 1),
            "workers_us": round(workers_cpu / jobs * 1e6, 1),
            # A peer's own server between its workers and PostgreSQL (Temporal's).
            **({"peer_server_us": round(peer_server_cpu / jobs * 1e6, 1)} if peer_server else {}),
        },
        **extra,
    }


def latency(peer: str, dsn: str, samples: int, timeout: float, warmup: int = 5) -> dict[str, Any]:
    """One idle worker; jobs enqueued one at a time, each after the previous one started."""
    _setup(peer, dsn, 0)
    procs, go, starts, _done = _spawn(peer, dsn, 1, latency=True)
    deadline = time.monotonic() + timeout

    async def measure() -> list[float]:
        enqueuer: Any = (
            dbos_peer.Enqueuer(dsn)
            if peer.startswith("dbos-")
            else temporal_peer.Enqueuer(temporal_peer.steps_of(peer))
            if peer.startswith("temporal-")
            else _ProcEnqueuer(dsn)
            if peer == "procrastinate"
            else _PgqEnqueuer(peer, dsn)
        )
        await enqueuer.open()
        loop = asyncio.get_running_loop()
        go.set()
        await asyncio.sleep(1.0)  # the worker is up, listening, idle
        out = []
        for i in range(warmup + samples):
            await asyncio.sleep(0.02)  # let the worker finish the last job and go idle again
            t0 = time.monotonic()
            key = await enqueuer.enqueue_one(i)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{peer}: latency run past {timeout} s")
                got, started = await loop.run_in_executor(None, starts.get, True, left)
                if got == key:
                    break
            if i >= warmup:
                out.append((started - t0) * 1000)
        return out

    try:
        ms = asyncio.run(measure())
    finally:
        _stop(procs)
    ordered = sorted(ms)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {
        "peer": peer,
        "mode": "latency",
        "jobs": samples,
        "p50_ms": round(pick(0.50), 3),
        "p99_ms": round(pick(0.99), 3),
        "mean_ms": round(statistics.fmean(ordered), 3),
        "max_ms": round(ordered[-1], 3),
        **({"poll_s": dbos_peer.POLL_S} if peer.startswith("dbos-") else {}),
        **({"store": temporal_peer.STORE} if peer.startswith("temporal-") else {}),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--peer", choices=PEERS, required=True)
    parser.add_argument("--dsn", required=True, help="postgresql:// URL of an empty database")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=2, help="worker processes (drain)")
    parser.add_argument("--latency", action="store_true", help="wake-up latency instead of drain")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds for the timed part")
    parser.add_argument(
        "--postmaster",
        type=int,
        default=None,
        help="pid of the server's postmaster: its CPU alone is counted",
    )
    parser.add_argument(
        "--temporal-bin",
        type=Path,
        help="folder of Temporal's binaries (bench/peers/temporal/build.sh prints it)",
    )
    parser.add_argument(
        "--temporal-store",
        choices=temporal_peer.STORES,
        default=os.environ.get("PEER_TEMPORAL_STORE", "postgresql"),
        help="where Temporal's server keeps its state: this PostgreSQL server, or SQLite (the"
        " CLI's dev server)",
    )
    args = parser.parse_args(argv)
    if args.peer.startswith("temporal-") and args.temporal_bin is None:
        parser.error(f"--peer {args.peer} needs --temporal-bin")
    return args


def main() -> int:
    args = parse_args()
    # Spawned workers put the working directory first on sys.path: run from this folder so
    # that nothing in the caller's directory (e.g. a repo folder named like a stdlib module,
    # such as rara's `operator/`) shadows the standard library in the workers.
    os.chdir(os.path.dirname(os.path.abspath(__file__)))
    with contextlib.ExitStack() as stack:
        peer_server = None
        if args.peer.startswith("temporal-"):
            temporal_peer.STORE = args.temporal_store
            peer_server = stack.enter_context(
                temporal_peer.server(args.temporal_bin, args.dsn, args.temporal_store)
            )
        if args.latency:
            result = latency(args.peer, args.dsn, args.jobs, args.timeout)
        else:
            result = drain(
                args.peer,
                args.dsn,
                args.jobs,
                args.workers,
                args.timeout,
                args.postmaster,
                peer_server,
            )
    result["versions"] = _versions(args.peer, args.temporal_bin)
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0


def _versions(peer: str, temporal_bin: Path | None = None) -> dict[str, str]:
    from importlib.metadata import version

    if peer.startswith("dbos-"):
        return dbos_peer.versions()
    if peer.startswith("temporal-"):
        return temporal_peer.versions(temporal_bin)
    names = ["procrastinate", "psycopg"] if peer == "procrastinate" else ["pgqueuer"]
    names += {"pgqueuer-asyncpg": ["asyncpg"], "pgqueuer-psycopg": ["psycopg"]}.get(peer, [])
    return {name: version(name) for name in names}


if __name__ == "__main__":
    sys.exit(main())
