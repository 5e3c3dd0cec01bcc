"""Shared set-up for benchmarks: an embedded server of their own, migrated, and fast fixtures."""

from __future__ import annotations

import math
import re
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench.proc_cpu import postmaster_of, process_cpu, server_cpu
from rara.pg.clone import clone_database
from rara.pg.embedded import temporary_server
from rara.pg.migrate import migrate
from rara.pg.runs import enqueue_many
from rara.states import RunStatus
from tests.support.workers import worker_processes

Conn = psycopg.Connection[Any]
ROOT = Path(__file__).resolve().parents[1]
# Worker configuration for no-op drains: many attempts in flight, leased 100 at a time (the
# peers get their best configuration too, see bench/peers/run_peer.py).
CONCURRENCY = 128
LEASE_BATCH = 100


@contextmanager
def bench_database(**settings: str) -> Iterator[str]:
    """A fresh embedded server (fsync off, like the peers are run) with rara's schema;
    ``settings``: server settings over those (``max_connections``, say)."""
    server = temporary_server(fast=True, **settings)
    url = server.up()
    try:
        migrate(url)
        yield url
    finally:
        server.destroy()


def bulk_ready_steps(
    conn: psycopg.Connection[Any],
    count: int,
    capability: str = "bench.noop@1",
    definition: str = "noop",
) -> None:
    """`count` ready steps in one run of ``definition``, inserted set-wise (run_enqueue_many:
    a bench fixture, not the runtime path)."""
    enqueue_many(
        conn,
        definition=definition,
        version=None,
        runs=1,
        steps=count,
        key="s",
        capability=capability,
    )
    conn.execute("ANALYZE rara_steps")


def percentiles(samples: list[float]) -> dict[str, float]:
    """Nearest-rank percentiles: the p99 of 100 samples is the 99th smallest, not the largest
    (so a p99 means more than the max only from 100 samples on)."""
    ordered = sorted(samples)

    def pick(q: float) -> float:
        return ordered[max(0, math.ceil(q * len(ordered)) - 1)]

    return {"p50": pick(0.50), "p99": pick(0.99), "mean": statistics.fmean(ordered)}


class CpuMeter:
    """CPU seconds spent by the bench's server and by given processes (the workers) between
    ``start()`` and ``stop()`` (``bench.proc_cpu``): where a drain's steps cost. The server is
    found through ``url`` (its postmaster's process tree), so other servers on the machine
    never count."""

    def __init__(self, url: str, pids: list[int]) -> None:
        with psycopg.connect(url) as conn:  # the backend's parent, while the backend lives
            row = conn.execute("SELECT pg_backend_pid()").fetchone()
            assert row is not None
            self.postmaster = postmaster_of(int(row[0]))
        self.pids = pids
        self._before = (0.0, 0.0)
        self.postgres = self.processes = 0.0

    def _sample(self) -> tuple[float, float]:
        return server_cpu(self.postmaster), sum(process_cpu(pid) for pid in self.pids)

    def start(self) -> None:
        self._before = self._sample()

    def stop(self) -> None:
        after = self._sample()
        self.postgres = after[0] - self._before[0]
        self.processes = after[1] - self._before[1]

    def per(self, units: int) -> dict[str, float]:
        """Microseconds per unit of work (``units`` steps), of each side."""
        return {
            "postgres_us": round(self.postgres / units * 1e6, 1),
            "workers_us": round(self.processes / units * 1e6, 1),
        }


class Server:
    """The bench server: fresh databases cloned from the migrated one."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.template = url.rsplit("/", 1)[1]
        self.admin = url.rsplit("/", 1)[0] + "/postgres"

    def fresh(self, name: str) -> str:
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
            clone_database(conn, self.template, name)
        return self.url.rsplit("/", 1)[0] + "/" + name

    def drop(self, name: str) -> None:
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def wait_until(
    condition: Callable[[], bool], timeout: float, what: str, every: float = 0.05
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(every)


EXECUTION_TIME = re.compile(r"Execution Time: ([\d.]+) ms")


def server_ms(conn: Conn, statement: str, params: dict[str, Any]) -> float:
    """A statement's execution in the server alone (no round trip, no parse, no rows sent),
    rolled back: EXPLAIN ANALYZE with TIMING OFF, so the plan's nodes are not timed."""
    with conn.transaction(force_rollback=True):
        plan = conn.execute("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) " + statement, params)
        found = EXECUTION_TIME.search("\n".join(line for (line,) in plan.fetchall()))
    assert found is not None
    return float(found.group(1))


def scalar(conn: Conn, query: str, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


@contextmanager
def workers(
    url: str,
    names: list[str],
    logs: Path,
    endpoint: str | None = None,
    concurrency: int = CONCURRENCY,
    tmp: Path | None = None,
    handlers: str | None = None,
    held_back_slots: int = 0,
) -> Iterator[list[int]]:
    """Worker processes as configured for the drains (``worker_processes``), registered;
    yields their pids. ``handlers``: a handler module served beside
    ``tests.support.bench_handlers``; ``held_back_slots``: the worker setting."""
    flags: dict[str, Any] = {"concurrency": concurrency}
    if handlers is not None:
        flags["handlers"] = handlers
    if held_back_slots:
        flags["held_back_slots"] = held_back_slots
    if endpoint is not None:
        assert tmp is not None
        flags.update(executor_endpoint=endpoint, executor_token_file=tmp / "token")
    with (
        worker_processes(
            url, names, logs, env={"RARA_WORKER_LEASE_BATCH": str(LEASE_BATCH)}, **flags
        ) as procs,
        psycopg.connect(url, autocommit=True) as conn,
    ):
        wait_until(
            lambda: (
                scalar(conn, "SELECT count(*) FROM rara_workers WHERE id = ANY(%s)", (names,))
                == len(names)
            ),
            60,
            "workers to register",
        )
        yield [p.pid for p in procs]


_RUN_ENDS = frozenset(s.value for s in RunStatus if s.terminal)


def wait_run_succeeded(listener: Conn, run_id: int, timeout: float = 30.0) -> None:
    """Until run ``run_id`` succeeded, reading its status on a connection that LISTENs on
    rara_run whenever a notification wakes it (the channel names no run: any login may
    LISTEN, docs/least-privilege.md); RuntimeError when it ended otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        row = listener.execute(
            "SELECT status::text FROM rara_runs WHERE id = %s", (run_id,)
        ).fetchone()
        status = None if row is None else row[0]
        if status == RunStatus.SUCCEEDED:
            return
        if status in _RUN_ENDS:
            raise RuntimeError(f"run {run_id} ended {status}")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"run {run_id} did not finish")
        for _ in listener.notifies(timeout=min(remaining, 1.0), stop_after=1):
            pass
