"""Test database: one real PostgreSQL per test session, a fresh database per test.

The server is rara's own embedded server (the same code `rara db up` runs) in a temporary
directory, or the server given by RARA_TEST_DATABASE_URL. A template database is migrated once;
each test gets `CREATE DATABASE … TEMPLATE` (fast: a file copy), dropped WITH (FORCE) after.

The process and server fixtures any folder uses live here too: workers (in a thread, or as
processes), `rara ui` servers and executors. The classes behind them are in tests/support/.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from rara.artifacts.store import LocalArtifactStore
from rara.executor.auth import AuthConfig
from rara.executor.client import ExecutorClient
from rara.executor.plugins import PluginRegistry
from rara.executor.server import create_server
from rara.pg.clone import clone_database
from rara.pg.embedded import EmbeddedPostgres, temporary_server
from rara.pg.migrate import migrate
from tests.executor import plugins as test_plugins
from tests.executor.support import TOKEN, Executor, StartExecutor, extra_plugins
from tests.support.ui import UiServer
from tests.support.waiting import wait_until
from tests.support.workers import ThreadWorker, WorkerProcess
from tests.worker.handlers import FAILING, SEEN, TALLY

# One template per test process: under pytest-xdist (make test) each process has a server of its
# own, but processes given one RARA_TEST_DATABASE_URL share it.
TEMPLATE = "rara_template_" + os.environ.get("PYTEST_XDIST_WORKER", "main")


def _with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + database))


@pytest.fixture(scope="session")
def pg_server() -> Iterator[EmbeddedPostgres | None]:
    if os.environ.get("RARA_TEST_DATABASE_URL"):
        yield None
        return
    server = temporary_server(fast=True)
    server.up()
    try:
        yield server
    finally:
        server.destroy()


@pytest.fixture(scope="session")
def pg_admin_url(pg_server: EmbeddedPostgres | None) -> str:
    if pg_server is None:
        return _with_database(os.environ["RARA_TEST_DATABASE_URL"], "postgres")
    return pg_server.url("postgres")


@pytest.fixture(scope="session")
def template_db(pg_admin_url: str) -> str:
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {TEMPLATE}")
    # Isolation between namespaces off, where a new database has it on (rara migrate): most
    # tests act in `default` as plain rara_client or rara_reader logins, which isolation
    # gives no namespace; the tests of isolation turn it on themselves, and
    # tests/db/test_isolation_default.py checks the default.
    migrate(_with_database(pg_admin_url, TEMPLATE), isolation=False)
    return TEMPLATE


@pytest.fixture
def fresh_database(pg_admin_url: str, template_db: str) -> Iterator[Callable[[], str]]:
    """Makes freshly migrated databases (clones of the template), as many as a test asks for;
    all dropped after it."""
    names: list[str] = []

    def make() -> str:
        name = f"rara_test_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(pg_admin_url, autocommit=True) as conn:
            clone_database(conn, template_db, name)
        names.append(name)
        return _with_database(pg_admin_url, name)

    yield make
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        for name in names:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def database_url(fresh_database: Callable[[], str]) -> str:
    """A freshly migrated database of its own for one test."""
    return fresh_database()


@pytest.fixture
def conn(database_url: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with psycopg.connect(database_url, autocommit=True) as connection:
        yield connection


@pytest.fixture
def role_url(database_url: str) -> Iterator[Callable[[str], str]]:
    """``role_url(group)``: the URL of this test's database for a new login role that is a
    member of ``group`` (rara_worker, rara_operator, rara_client, rara_reader: migrations 0002,
    0007), as a deployment gives each process its own, or of no role at all when ``group`` is
    None (any login of a shared server: tests/security); dropped after the test. (Connections
    of their own: a chaos test restarts the server under the test's ``conn``.)"""
    made: list[str] = []

    def make(group: str | None) -> str:
        name = f"t_{group or 'nobody'}_{uuid.uuid4().hex[:8]}"
        member = f" IN ROLE {group}" if group else ""
        with psycopg.connect(database_url, autocommit=True) as admin:
            admin.execute(f"CREATE ROLE {name} LOGIN{member}")
        made.append(name)
        parts = urlsplit(database_url)
        return urlunsplit(parts._replace(netloc=f"{name}@{parts.hostname}:{parts.port}"))

    yield make
    with psycopg.connect(database_url, autocommit=True) as admin:
        for name in made:
            admin.execute(f"DROP OWNED BY {name}")
            admin.execute(f"DROP ROLE {name}")


# Workers


@pytest.fixture(autouse=True)
def _forget_seen() -> Iterator[None]:
    """Run ids restart at 1 in every test database: what handlers saw must not leak across."""
    SEEN.clear()
    TALLY.clear()
    FAILING.clear()
    yield
    SEEN.clear()
    TALLY.clear()
    FAILING.clear()


@pytest.fixture
def thread_worker(
    database_url: str, tmp_path: Path, conn: psycopg.Connection[Any]
) -> Iterator[Callable[..., ThreadWorker]]:
    started: list[ThreadWorker] = []

    def make(**settings: Any) -> ThreadWorker:
        worker = ThreadWorker(database_url, tmp_path, **settings).start(conn)
        started.append(worker)
        return worker

    yield make
    for worker in started:
        worker.stop()


@pytest.fixture
def spawn(
    database_url: str, tmp_path: Path, conn: psycopg.Connection[Any]
) -> Iterator[Callable[..., WorkerProcess]]:
    procs: list[WorkerProcess] = []

    def make(worker_id: str, *, wait: bool = True, **settings: Any) -> WorkerProcess:
        proc = WorkerProcess(
            database_url,
            worker_id,
            tmp_path / f"{worker_id}.log",
            artifact_root=tmp_path / "artifacts",
            **settings,
        )
        procs.append(proc)
        if wait:

            def registered() -> bool:
                assert proc.proc.poll() is None, f"worker {worker_id} exited:\n{proc.output()}"
                return (
                    conn.execute(
                        "SELECT 1 FROM rara_workers WHERE id = %s", (worker_id,)
                    ).fetchone()
                    is not None
                )

            wait_until(registered, timeout=30, message=f"worker {worker_id} registered")
        return proc

    yield make
    for proc in procs:
        if proc.proc.poll() is None:
            proc.signal(signal.SIGKILL)
        proc.proc.wait(10)


# Servers


@pytest.fixture
def ui_server(database_url: str, tmp_path: Path) -> Iterator[Callable[..., UiServer]]:
    started: list[UiServer] = []

    def make(*args: str, env: dict[str, str] | None = None, url: str | None = None) -> UiServer:
        """``url``: another database URL (a login role's) than the test database's owner's."""
        server = UiServer(url or database_url, tmp_path / f"ui-{len(started)}.log", *args, env=env)
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


@pytest.fixture
async def start_executor(tmp_path: Path) -> AsyncIterator[StartExecutor]:
    """Factory: start an executor with overrides; everything started is stopped after."""
    started: list[Executor] = []

    async def start(
        *, auth_config: AuthConfig | None = None, token: str | None = TOKEN, **kwargs: Any
    ) -> Executor:
        registry = PluginRegistry()
        test_plugins.register(registry)
        extra_plugins(registry)
        store = LocalArtifactStore(tmp_path / "artifacts", durable=False)
        kwargs.setdefault("max_concurrency", 4)
        kwargs.setdefault("cancel_grace", 0.5)
        server, port = create_server(
            registry, store, auth_config=auth_config or AuthConfig(token=token), **kwargs
        )
        await server.start()
        address = f"127.0.0.1:{port}"
        ex = Executor(server, address, ExecutorClient(address, token=token), store)
        started.append(ex)
        return ex

    yield start
    for ex in started:
        await ex.client.close()
        await ex.server.stop(1.0)
