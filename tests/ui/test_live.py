"""The live hub: one read per wake for every viewer together, nothing while nobody watches,
and a NOTIFY wakes it before the polling interval would."""

from __future__ import annotations

import asyncio
import contextlib
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from rara.runs import start_run
from rara.ui.live import RUNS, LiveHub
from tests.support.definitions import apply


def test_viewers_share_one_read_and_idle_costs_nothing(
    database_url: str, conn: psycopg.Connection[Any]
) -> None:
    """On an event loop of its own thread: the browser tests' Playwright (sync API) holds one
    in the main thread for the session."""
    apply(conn, "d", [{"key": "a", "capability": "test.noop@1", "executor": "inprocess"}])
    run_id = start_run(conn, "d", queue_anyway=True).run_id
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, _viewers(database_url, conn, run_id)).result(timeout=120)


async def _viewers(database_url: str, conn: psycopg.Connection[Any], run_id: int) -> None:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        database_url, min_size=1, max_size=2, open=False, kwargs={"autocommit": True}
    )
    await pool.open()
    hub = LiveHub(database_url, pool, interval=60.0)  # no polling within the test: NOTIFY only
    await hub.start()
    try:
        async with asyncio.timeout(10):
            await hub.listening.wait()
        assert hub.ticks == 0  # nobody watches: no reads
        topic = f"run:{run_id}"
        async with hub.watch(topic) as first, hub.watch(RUNS) as runs:
            assert (await first.get(5)) is not None
            assert (await runs.get(5)) is not None
            ticks = hub.ticks
            # 50 more viewers of the same run: they get the last state at once, no reads.
            async with contextlib.AsyncExitStack() as stack:
                boxes = [await stack.enter_async_context(hub.watch(topic)) for _ in range(50)]
                for box in boxes:
                    assert (await box.get(1)) is not None
                assert hub.ticks == ticks
                # A change the database announces reaches every viewer, with one read.
                conn.execute(
                    "UPDATE rara_runs SET status = 'cancelled', finished_at = now(),"
                    " cancel_requested = true WHERE id = %s",
                    (run_id,),
                )
                conn.execute("NOTIFY rara_run")
                states = [await box.get(5) for box in boxes]
                assert all(s is not None and '"cancelled"' in s for s in states)
                assert hub.ticks - ticks <= 2
    finally:
        await hub.stop()
        await pool.close()


def test_a_runs_list_viewer_gets_its_namespaces_runs_only(
    database_url: str, conn: psycopg.Connection[Any]
) -> None:
    """The runs list's topic is a view per set of namespaces (rara ui --user-roles): a viewer
    of team-a never receives team-b's run, a viewer of every namespace gets both."""
    runs = {}
    for team in ("team-a", "team-b"):
        apply(conn, "d", [{"key": "a", "capability": "test.noop@1"}], namespace=team)
        runs[team] = start_run(conn, "d", queue_anyway=True, namespace=team).run_id
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, _scoped_viewers(database_url, runs)).result(timeout=120)


async def _scoped_viewers(database_url: str, runs: dict[str, int]) -> None:
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        database_url, min_size=1, max_size=2, open=False, kwargs={"autocommit": True}
    )
    await pool.open()
    hub = LiveHub(database_url, pool, interval=0.2)
    await hub.start()
    try:
        async with (
            hub.watch(RUNS, frozenset({"team-a"})) as team_a,
            hub.watch(RUNS, frozenset({"team-b"})) as team_b,
            hub.watch(RUNS) as everyone,
        ):
            seen = {}
            for name, box in (("a", team_a), ("b", team_b), ("all", everyone)):
                state = await box.get(10)
                assert state is not None, name
                seen[name] = {run_id for run_id, _ in json.loads(state)["runs"]}
        assert seen == {
            "a": {runs["team-a"]},
            "b": {runs["team-b"]},
            "all": {runs["team-a"], runs["team-b"]},
        }
    finally:
        await hub.stop()
        await pool.close()
