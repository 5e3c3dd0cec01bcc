"""Temporal as a peer: no-op workflows of 1 or 3 activities, on Temporal's own server.

Imported by ``run_peer.py`` in the peers' venv (never by rara). Temporal is a workflow runtime
with a server of its own (Go, built by ``bench/peers/temporal/build.sh`` into
``~/.cache/rara/temporal-<version>/``) between the workers and the database; the Python SDK
(``temporalio``) talks gRPC to it. A workflow is durable the way a rara run is: its start is an
event in its history, each activity's scheduling, start and completion are history events
(written by the server, one workflow task between activities), and its end is the last event.

Where the server keeps its state (``--temporal-store``, or ``PEER_TEMPORAL_STORE``):

- ``postgresql`` (the default): ``temporal-server`` with the ``postgres12`` SQL plugin on the
  bench's own PostgreSQL server, in the peer's fresh database (``bench_peer_temporal_…``) and a
  second one for its visibility store (``…_visibility``), both created with Temporal's schema
  tool and dropped afterwards: the same server rara and the other peers are measured on.
- ``sqlite``: the CLI's dev server (``temporal server start-dev``), one process on a SQLite
  file in a temporary folder.

The server's own CPU (one Go process) is counted with PostgreSQL's as the server's side.

How the bench drives it, as it drives DBOS (``dbos_peer.py``):

- set-up: the server started, the workflows started by a client on a task queue no worker
  polls yet (not timed);
- drain: K worker processes, each connected and its worker built, then started on the release;
  each watches the server until no workflow is open. ``seconds`` runs from the release to the
  last workflow's close time (Temporal's visibility record), the way DBOS's and rara's drains
  are timed from their rows;
- latency: one idle worker; the client starts one workflow, its first activity stamps its
  start: start → first activity running, as rara's start → handler.

Worker configuration: the SDK's defaults (100 workflow tasks and 100 activities at once per
worker, 5 pollers of each kind), with the unsandboxed workflow runner (the sandbox re-imports
the workflow's module per run; the SDK documents turning it off for speed).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from temporalio import activity, workflow

NAMESPACE = "default"
TASK_QUEUE = "bench"
WORKFLOW = "bench_noop"
ACTIVITY = "bench_noop_step"
STORES = ("postgresql", "sqlite")
STORE = "postgresql"  # this run's, set by run_peer.main (reported with the results)
# The frontend's address, set by `server()` in the parent; spawned workers inherit it.
ADDRESS_ENV = "PEER_TEMPORAL_ADDRESS"
SERVER_READY_S = 120.0


def steps_of(peer: str) -> int:
    """``temporal-1step`` -> 1, ``temporal-3step`` -> 3."""
    return int(peer.removeprefix("temporal-").removesuffix("step"))


@workflow.defn(name=WORKFLOW)
class NoopWorkflow:
    """``steps`` no-op activities, one after the other."""

    @workflow.run
    async def run(self, i: int, steps: int) -> int:
        for step in range(steps):
            await workflow.execute_activity(
                ACTIVITY, args=[i, step == 0], start_to_close_timeout=timedelta(seconds=60)
            )
        return steps


# --------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------


def _free_ports(n: int) -> list[int]:
    """``n`` ports free now, below 32768: Temporal keeps membership ports in a ``smallint``."""
    socks: list[socket.socket] = []
    try:
        while len(socks) < n:
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", random.randrange(20_000, 32_768)))
            except OSError:  # taken
                s.close()
                continue
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def _sql_tool(binaries: Path, dsn: str, database: str, *args: str) -> None:
    parts = urlsplit(dsn)
    cmd = [
        str(binaries / "temporal-sql-tool"),
        *("--plugin", "postgres12", "--ep", parts.hostname or "127.0.0.1"),
        *("-p", str(parts.port or 5432), "-u", unquote(parts.username or "postgres")),
        *(["--pw", unquote(parts.password)] if parts.password else []),
        *("--db", database, *args),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"temporal-sql-tool {' '.join(args)}: {proc.stderr[-2000:]}")


def _postgres_config(dsn: str, database: str, ports: list[int]) -> str:
    """temporal-server's config (its development-postgres12.yaml, ports free, no metrics)."""
    parts = urlsplit(dsn)
    store = f"""
        pluginName: "postgres12"
        connectAddr: "{parts.hostname or "127.0.0.1"}:{parts.port or 5432}"
        connectProtocol: "tcp"
        user: "{unquote(parts.username or "postgres")}"
        password: "{unquote(parts.password or "")}"
        maxConnLifetime: "1h\""""
    grpc = dict(zip(("frontend", "history", "matching", "worker"), ports[0:4], strict=True))
    member = dict(zip(("frontend", "history", "matching", "worker"), ports[4:8], strict=True))
    services = "".join(
        f"""
  {name}:
    rpc:
      grpcPort: {grpc[name]}
      membershipPort: {member[name]}
      bindOnLocalHost: true"""
        + (f"\n      httpPort: {ports[8]}" if name == "frontend" else "")
        for name in grpc
    )
    return f"""
log:
  stdout: true
  level: error
persistence:
  defaultStore: default
  visibilityStore: visibility
  numHistoryShards: 4
  datastores:
    default:
      sql:{store}
        databaseName: "{database}"
        maxConns: 20
        maxIdleConns: 20
    visibility:
      sql:{store}
        databaseName: "{database}_visibility"
        maxConns: 2
        maxIdleConns: 2
global:
  membership:
    maxJoinDuration: 30s
    broadcastAddress: "127.0.0.1"
services:{services}
clusterMetadata:
  enableGlobalNamespace: false
  failoverVersionIncrement: 10
  masterClusterName: "active"
  currentClusterName: "active"
  clusterInformation:
    active:
      enabled: true
      initialFailoverVersion: 1
      rpcName: "frontend"
      rpcAddress: "127.0.0.1:{grpc["frontend"]}"
dcRedirectionPolicy:
  policy: "noop"
"""


def _drop_database(dsn: str, name: str) -> None:
    import psycopg
    from psycopg import sql

    admin = urlunsplit(urlsplit(dsn)._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@contextlib.contextmanager
def server(binaries: Path, dsn: str, store: str) -> Iterator[int]:
    """Temporal's server, up and serving namespace ``default``; yields its pid and sets
    ``PEER_TEMPORAL_ADDRESS`` for the worker processes spawned afterwards."""
    if store not in STORES:
        raise ValueError(f"--temporal-store must be one of {STORES}, got {store!r}")
    folder = Path(tempfile.mkdtemp(prefix="rara-bench-temporal-"))
    database = urlsplit(dsn).path.lstrip("/")
    visibility = f"{database}_visibility"
    if store == "sqlite":
        (port,) = _free_ports(1)
        http, metrics = _free_ports(2)
        cmd = [
            str(binaries / "temporal"),
            *("server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port)),
            *("--http-port", str(http), "--metrics-port", str(metrics)),
            *("--db-filename", str(folder / "temporal.db"), "--log-level", "error"),
        ]
    else:
        ports = _free_ports(9)
        port = ports[0]
        _drop_database(dsn, visibility)
        _sql_tool(binaries, dsn, database, "setup-schema", "-v", "0.0")
        _sql_tool(
            binaries, dsn, database, "update-schema", "--schema-name", "postgresql/v12/temporal"
        )
        _sql_tool(binaries, dsn, visibility, "create-database")
        _sql_tool(binaries, dsn, visibility, "setup-schema", "-v", "0.0")
        _sql_tool(
            binaries, dsn, visibility, "update-schema", "--schema-name", "postgresql/v12/visibility"
        )
        (folder / "config").mkdir()
        (folder / "config" / "bench.yaml").write_text(_postgres_config(dsn, database, ports))
        cmd = [
            str(binaries / "temporal-server"),
            *("--root", str(folder), "--config", "config", "--env", "bench", "--allow-no-auth"),
            "start",
        ]
    address = f"127.0.0.1:{port}"
    log = open(folder / "server.log", "w")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        if store == "postgresql":
            _register_namespace(binaries, address, proc, folder)
        asyncio.run(_wait_serving(address, proc, folder))
        os.environ[ADDRESS_ENV] = address
        yield proc.pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
        shutil.rmtree(folder, ignore_errors=True)
        if store == "postgresql":
            _drop_database(dsn, visibility)


def _server_log(folder: Path) -> str:
    try:
        return (folder / "server.log").read_text()[-2000:]
    except OSError:
        return ""


def _register_namespace(
    binaries: Path, address: str, proc: subprocess.Popen[bytes], folder: Path
) -> None:
    """Namespace ``default`` (the dev server makes it itself), through the CLI, once the
    frontend answers."""
    deadline = time.monotonic() + SERVER_READY_S
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"temporal-server exited {proc.returncode}: {_server_log(folder)}")
        done = subprocess.run(
            [
                str(binaries / "temporal"),
                *("operator", "namespace", "create", "--address", address),
                *("--retention", "24h", "--namespace", NAMESPACE),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if done.returncode == 0 or "already" in done.stderr.lower():
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"namespace not created: {done.stderr[-1000:]}")
        time.sleep(0.5)


async def _wait_serving(address: str, proc: subprocess.Popen[bytes], folder: Path) -> None:
    """Until the frontend answers a query in namespace ``default`` (its namespace cache has
    it: a namespace registered just now is refused for a few seconds)."""
    from temporalio.client import Client

    deadline = time.monotonic() + SERVER_READY_S
    last: BaseException | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"Temporal's server exited {proc.returncode}: {_server_log(folder)}")
        try:
            client = await Client.connect(address, namespace=NAMESPACE)
            await client.count_workflows()
            return
        except Exception as exc:  # not up yet
            last = exc
            await asyncio.sleep(0.25)
    raise RuntimeError(f"Temporal's server not serving after {SERVER_READY_S:.0f} s: {last}")


# --------------------------------------------------------------------------------------------
# Set-up, workers, counts
# --------------------------------------------------------------------------------------------


async def _client() -> Any:
    from temporalio.client import Client

    return await Client.connect(os.environ[ADDRESS_ENV], namespace=NAMESPACE)


def setup(jobs: int, steps: int) -> None:
    """Start ``jobs`` workflows on the task queue (no worker polls it yet)."""
    if jobs:
        asyncio.run(_start_many(jobs, steps))


async def _start_many(jobs: int, steps: int) -> None:
    client = await _client()
    limit = asyncio.Semaphore(50)

    async def start(i: int) -> None:
        async with limit:
            await client.start_workflow(
                WORKFLOW, args=[i, steps], id=f"bench-{i}", task_queue=TASK_QUEUE
            )

    await asyncio.gather(*(start(i) for i in range(jobs)))
    # Visibility records are written after the starts, asynchronously: the workers count open
    # workflows there to know when they are done, so all must be listed before the release.
    deadline = time.monotonic() + 120
    while (await client.count_workflows("ExecutionStatus = 'Running'")).count < jobs:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{jobs} started workflows not all visible after 120 s")
        await asyncio.sleep(0.1)


async def count_done_async() -> tuple[int, int]:
    """(workflows completed, workflows still open), from the server's visibility store."""
    client = await _client()
    done = await client.count_workflows("ExecutionStatus = 'Completed'")
    open_ = await client.count_workflows("ExecutionStatus = 'Running'")
    return done.count, open_.count


def last_close(jobs: int, deadline: float) -> float:
    """The latest close time (epoch seconds) of the completed workflows, once visibility holds
    all ``jobs`` of them (it is written after the close, asynchronously)."""

    async def read() -> float:
        client = await _client()
        while True:
            closes = [
                w.close_time.timestamp()
                async for w in client.list_workflows("ExecutionStatus = 'Completed'")
                if w.close_time is not None
            ]
            if len(closes) >= jobs or time.monotonic() > deadline:
                if len(closes) < jobs:
                    raise RuntimeError(f"{len(closes)} of {jobs} closes in visibility")
                return max(closes)
            await asyncio.sleep(0.2)

    return asyncio.run(read())


def activities_completed(workflow_id: str) -> int:
    """ActivityTaskCompleted events in one workflow's history: that its steps did run."""

    async def read() -> int:
        from temporalio.api.enums.v1 import EventType

        client = await _client()
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        kind = EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
        return sum(1 for e in history.events if e.event_type == kind)

    return asyncio.run(read())


def worker(steps: int, ready: Any, go: Any, starts: Any, latency: bool) -> None:
    """One worker process: connected and built now, polling from the release."""
    asyncio.run(_worker(ready, go, starts, latency))


async def _worker(ready: Any, go: Any, starts: Any, latency: bool) -> None:
    from temporalio.worker import UnsandboxedWorkflowRunner, Worker

    @activity.defn(name=ACTIVITY)
    async def noop_step(i: int, first: bool) -> None:
        if latency and first:
            starts.put((i, time.monotonic()))

    client = await _client()
    built = Worker(
        client,
        task_queue=TASK_QUEUE,
        workflows=[NoopWorkflow],
        activities=[noop_step],
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    ready.put(os.getpid())
    await asyncio.get_running_loop().run_in_executor(None, go.wait)
    async with built:
        if latency:
            await asyncio.Event().wait()  # served until the parent stops this process
        while True:  # until no workflow is open (a Temporal worker never exits by itself)
            _done, left = await count_done_async()
            if not left:
                break
            await asyncio.sleep(0.1)


class Enqueuer:
    """One workflow at a time through a Temporal client, as an application would start one."""

    def __init__(self, steps: int) -> None:
        self.steps = steps

    async def open(self) -> None:
        self.client = await _client()

    async def enqueue_one(self, i: int) -> int:
        await self.client.start_workflow(
            WORKFLOW, args=[i, self.steps], id=f"latency-{i}", task_queue=TASK_QUEUE
        )
        return i


def versions(binaries: Path | None) -> dict[str, str]:
    from importlib.metadata import version

    out = {"temporalio": version("temporalio")}
    if binaries is not None:  # "temporal version 1.5.1 (Server 1.29.1, UI 2.41.0)"
        said = subprocess.run(
            [str(binaries / "temporal"), "--version"], capture_output=True, text=True, check=False
        )
        out["temporal"] = said.stdout.strip().removeprefix("temporal version ")
    return out
