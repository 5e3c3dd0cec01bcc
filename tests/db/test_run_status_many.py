"""``run_status_many``: the operator's one read per tick (rara.operator.runsync), as the
``rara_operator`` role: its step counts agree with the step rows, a missing run has no row."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import psycopg

from rara.pg import runs
from rara.runs import start_run
from rara.states import AttemptOutcome, RunStatus
from rara.worker.store import end_many
from rara.worker.vocabulary import Ending, Fence
from tests.support.definitions import apply
from tests.support.leasing import lease_now

STEPS = [
    {"key": "collect", "capability": "demo.collect@1"},
    {"key": "index", "capability": "demo.index@1", "dependsOn": ["collect"]},
]


async def _succeed(dsn: str, leased: list[Any]) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await end_many(
            conn,
            [
                Ending(
                    Fence(s.id, "w", s.lease_token), s.run_id, AttemptOutcome.SUCCEEDED, result={}
                )
                for s in leased
            ],
        )


def test_status_of_many_runs_in_one_read(
    conn: psycopg.Connection[Any],
    role_url: Callable[[str], str],
) -> None:
    apply(conn, "rag", STEPS)
    first, second = (start_run(conn, "rag", queue_anyway=True).run_id for _ in range(2))
    (leased,) = lease_now(conn, ["demo.collect@1"], worker="w", limit=1)
    asyncio.run(_succeed(conn.info.dsn, [leased]))

    with psycopg.connect(role_url("rara_operator"), autocommit=True) as operator:
        rows = {r.id: r for r in runs.status_many(operator, [first, second, 10**9])}
    assert set(rows) == {first, second}  # the missing run has no row
    counted = dict(
        conn.execute(
            "SELECT run_id, count(*) FILTER (WHERE status = 'succeeded') FROM rara_steps "
            "GROUP BY run_id"
        ).fetchall()
    )
    for run_id, row in rows.items():
        assert (row.done, row.total) == (counted[run_id], 2)
        assert row.version == 1
    assert rows[leased.run_id].status is RunStatus.RUNNING
    assert rows[leased.run_id].started_at is not None
    other = second if leased.run_id == first else first
    assert (rows[other].status, rows[other].done, rows[other].started_at) == (
        RunStatus.PENDING,
        0,
        None,
    )
