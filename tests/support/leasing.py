"""Bulk enqueueing and leasing by hand, for tests and benchmarks (not used by the runtime).

``start_run`` is one transaction per run with validation and routing checks; filling a queue
with thousands of single-step runs that way measures the client, not the worker. This writes
the same rows in one statement (``run_enqueue_many``, db/queries/runs.sql).

Test-only code, so outside the wheel; the benchmarks (bench/) import it from here.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg

from rara.pg import runs
from rara.pg.queries import many
from rara.worker.store import LEASED
from rara.worker.vocabulary import LeasedStep


def enqueue_single_step_runs(
    conn: psycopg.Connection[Any],
    *,
    definition: str,
    version: int,
    key: str,
    capability: str,
    n: int,
    executor: str = "inprocess",
    input: dict[str, Any] | None = None,
    max_attempts: int = 3,
    initial_ms: int = 1000,
    max_ms: int = 60_000,
    priority: int = 0,
) -> list[int]:
    """``n`` runs of a one-step definition, ready at once; returns the run ids."""
    return runs.enqueue_many(
        conn,
        definition=definition,
        version=version,
        runs=n,
        steps=1,
        key=key,
        capability=capability,
        executor=executor,
        input=input,
        priority=priority,
        max_attempts=max_attempts,
        retry_initial_ms=initial_ms,
        retry_max_ms=max_ms,
    )


def lease_params(
    capabilities: list[str],
    *,
    worker: str,
    limit: int,
    lease_seconds: float = 30,
    executor: str = "inprocess",
) -> dict[str, Any]:
    """``step_lease``'s parameters as a worker sends them, every range scanned from the start
    (no lease cursor)."""
    return {
        "capabilities": capabilities,
        "executors": [executor] * len(capabilities),
        "limit": limit,
        "worker": worker,
        "lease_seconds": lease_seconds,
        "after_ranks": None,
        "after_ats": None,
        "after_ids": None,
        "after_namespaces": None,
        "except_namespaces": None,
    }


def lease_now(
    conn: psycopg.Connection[Any],
    capabilities: list[str],
    *,
    worker: str,
    limit: int,
    lease_seconds: float = 30,
    executor: str = "inprocess",
    passing: list[str] | None = None,
) -> list[LeasedStep]:
    """Lease as a worker does (``step_lease``), scanning every range from the start: the
    steps leased, for tests and benchmarks that take steps by hand. ``passing``: namespaces
    the lease passes by, as a worker's held-back slots do."""
    params = lease_params(
        capabilities, worker=worker, limit=limit, lease_seconds=lease_seconds, executor=executor
    )
    return many(conn, "step_lease", LEASED, **params | {"except_namespaces": passing})


def lease_concurrently(
    database_url: str, capabilities: list[str], *, leasers: int, rounds: int, limit: int
) -> None:
    """``leasers`` workers, each on a connection of its own, released at once by a barrier,
    each leasing ``rounds`` times up to ``limit`` steps: what a limit must hold against.
    Raises the first error any of them met."""
    start = threading.Barrier(leasers)
    errors: list[BaseException] = []

    def lease(n: int) -> None:
        try:
            with psycopg.connect(database_url, autocommit=True) as mine:
                start.wait()
                for _ in range(rounds):
                    lease_now(mine, capabilities, worker=f"w{n}", limit=limit)
        except BaseException as exc:  # re-raised below, in the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=lease, args=(n,)) for n in range(leasers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if errors:
        raise errors[0]
