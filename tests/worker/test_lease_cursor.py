"""The lease cursor (``rara.worker.lease_cursor``): a lease resumes after the last step the
worker leased, so it does not walk over the dead index entries of the steps leased before —
which a held xmin horizon keeps — and a scan from the start still finds what arrived behind."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import psycopg
import pytest

from rara.pg.queries import sql
from rara.worker.lease_cursor import LeaseCursors
from rara.worker.store import WorkerStore
from tests.support.leasing import enqueue_single_step_runs
from tests.support.plans import nested_plans
from tests.support.runs import define
from tests.support.workers import worker_store

PAIRS = [("test.echo@1", "inprocess")]


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[WorkerStore]:
    async with worker_store(database_url, "cursor") as store:
        yield store


def _enqueue(conn: psycopg.Connection[Any], n: int, priority: int = 0) -> None:
    """``n`` ready single-step runs of "one" at once (set-wise, like a bulk producer)."""
    enqueue_single_step_runs(
        conn, definition="one", version=1, key="s", capability="test.echo@1", n=n, priority=priority
    )


def _lease_scan_buffers(conn: psycopg.Connection[Any], after: dict[str, Any]) -> int:
    """Leases one step as the worker does (auto_explain's analyze; rolled back) and returns
    the pages its scan of the lease index touched: index and heap pages of every entry it
    walked."""
    plans = nested_plans(
        conn,
        sql("step_lease"),
        {
            "capabilities": [c for c, _ in PAIRS],
            "executors": [e for _, e in PAIRS],
            "limit": 1,
            "worker": "cursor",
            "lease_seconds": 30,
            "except_namespaces": None,
            **after,
        },
        analyze=True,
    )

    def scans(node: dict[str, Any]) -> list[dict[str, Any]]:
        found = [node] if node.get("Index Name") == "rara_steps_ready" else []
        return found + [s for child in node.get("Plans", []) for s in scans(child)]

    [scan] = [scan for plan in plans for scan in scans(plan["Plan"])]
    assert scan["Actual Rows"] == 1
    return int(scan["Shared Hit Blocks"]) + int(scan["Shared Read Blocks"])


async def test_under_a_held_horizon_the_cursor_lease_skips_the_dead_entries(
    conn: psycopg.Connection[Any], database_url: str, store: WorkerStore
) -> None:
    define(conn, "one", [{"key": "s", "capability": "test.echo@1"}])
    _enqueue(conn, 1000)
    cursors = LeaseCursors()
    with psycopg.connect(database_url) as holder:  # an old snapshot: nothing can be vacuumed
        holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM rara_steps").fetchone()
        for _ in range(6):
            cursors.advance(
                await store.lease(PAIRS, 100, 30, cursors.after(PAIRS, from_start=False))
            )
        conn.execute("VACUUM rara_steps")  # removes nothing while the snapshot is open
        after_cursor = _lease_scan_buffers(conn, cursors.after(PAIRS, from_start=False))
        from_start = _lease_scan_buffers(conn, cursors.after(PAIRS, from_start=True))
        holder.rollback()
    # 600 leased steps left 600 dead entries at the front of the range: the scan from the
    # start visits them all, and their heap pages (~17 of them); the cursor's starts past them
    # (measured: 23 pages against 3).
    assert after_cursor <= 4, after_cursor
    assert from_start >= 15, from_start


async def test_a_step_behind_the_cursor_is_found_by_the_scan_from_the_start(
    conn: psycopg.Connection[Any], store: WorkerStore
) -> None:
    define(conn, "one", [{"key": "s", "capability": "test.echo@1"}])
    _enqueue(conn, 10)
    cursors = LeaseCursors()
    cursors.advance(await store.lease(PAIRS, 3, 30, cursors.after(PAIRS, from_start=True)))
    _enqueue(conn, 1, priority=5)  # sorts before everything: behind the cursor
    [urgent] = conn.execute("SELECT id FROM rara_steps WHERE priority = 5").fetchone() or []

    past = await store.lease(PAIRS, 1, 30, cursors.after(PAIRS, from_start=False))
    assert [s.id for s in past] != [urgent]
    assert past[0].rank == 0
    rescan = await store.lease(PAIRS, 1, 30, cursors.after(PAIRS, from_start=True))
    assert [s.id for s in rescan] == [urgent]
    assert rescan[0].rank == -5


def test_the_rescan_is_due_at_first_then_stretched_by_its_cost() -> None:
    cursors = LeaseCursors(rescan_seconds=1.0, rescan_factor=20.0)
    assert cursors.due(now=0.0)
    cursors.scanned_from_start(sent=10.0, seconds=0.001)  # cheap: the period
    assert not cursors.due(now=10.9)
    assert cursors.due(now=11.01)
    cursors.scanned_from_start(sent=20.0, seconds=0.25)  # walked many dead entries: 20x it
    assert not cursors.due(now=24.9)
    assert cursors.due(now=25.25)


def test_an_announced_arrival_brings_the_rescan_forward_but_not_back_to_back() -> None:
    """A NOTIFY (ready steps committed) may mean a step behind the cursor: the next lease scans
    from the start, no sooner than 20x the last such scan's cost after it."""
    cursors = LeaseCursors(rescan_seconds=1.0, rescan_factor=20.0)
    cursors.scanned_from_start(sent=10.0, seconds=0.005)  # ends at 10.005
    assert not cursors.due(now=10.2)
    cursors.announced(now=10.2)
    assert cursors.due(now=10.2)  # past 10.005 + 20 x 0.005
    cursors.scanned_from_start(sent=10.2, seconds=0.05)  # expensive: ends at 10.25
    cursors.announced(now=10.3)
    assert not cursors.due(now=11.0)  # not before 10.25 + 20 x 0.05 = 11.25
    assert cursors.due(now=11.25)
    # Heard while a scan from the start was in flight: that scan may have missed it.
    cursors.scanned_from_start(sent=12.0, seconds=0.001)
    cursors.announced(now=11.9)
    assert not cursors.due(now=12.5)  # heard before the scan was sent: covered by it
    cursors.announced(now=12.0005)
    assert cursors.due(now=12.5)


def test_the_cursor_keeps_the_furthest_key_per_lane() -> None:
    from rara.worker.vocabulary import LeasedStep

    at = datetime(2026, 1, 1, tzinfo=UTC)

    def step(
        id_: int, rank: int, executor: str = "inprocess", namespace: str = "default"
    ) -> LeasedStep:
        return LeasedStep(
            id_,
            1,
            "s",
            "c@1",
            executor,
            {},
            1,
            3,
            UUID(int=id_),
            at,
            None,
            None,
            (),
            {},
            at,
            rank=rank,
            available_at=at,
            namespace=namespace,
        )

    cursors = LeaseCursors()
    cursors.advance(
        [step(5, 0), step(9, -1), step(7, 0), step(2, 0, "grpc"), step(3, 0, namespace="team-b")]
    )
    after = cursors.after(
        [("c@1", "inprocess"), ("c@1", "grpc"), ("d@1", "inprocess")], from_start=False
    )
    assert after == {  # a pair once per lane cursor, or once with NULLs
        "capabilities": ["c@1", "c@1", "c@1", "d@1"],
        "executors": ["inprocess", "inprocess", "grpc", "inprocess"],
        "after_namespaces": ["default", "team-b", "default", None],
        "after_ranks": [0, 0, 0, None],
        "after_ats": [at, at, at, None],
        "after_ids": [7, 3, 2, None],
    }
    assert cursors.after([("c@1", "inprocess")], from_start=True)["after_ids"] == [None]
