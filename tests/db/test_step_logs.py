"""The step-log table's writes and reads in the database (migration 0032,
db/functions/step_logs.sql): fenced like every write of an attempt, bounded, readable only in
the run's namespace."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from rara.pg.step_logs import LogCursor, list_chunks
from rara.runs import start_run
from tests.support.definitions import apply
from tests.support.waiting import wait_until_async
from tests.support.workers import worker_store

PAIRS = [("test.echo@1", "inprocess")]
QUICK_RETRY = {"maxAttempts": 3, "initialDelay": "1ms", "maxDelay": "1ms"}


def _stored(conn: psycopg.Connection[Any]) -> list[tuple[int, int, str]]:
    return conn.execute("SELECT attempt, seq, body FROM rara_step_logs ORDER BY 1, 2").fetchall()


async def test_a_worker_that_lost_its_lease_writes_no_log(
    conn: psycopg.Connection[Any], role_url: Any
) -> None:
    """The first owner's lease expires and another worker takes the step: the old owner's
    chunks are refused (the answer leaves its step out), the new owner's land on attempt 2."""
    apply(conn, "logs", [{"key": "s", "capability": "test.echo@1", "retry": QUICK_RETRY}])
    start_run(conn, "logs", queue_anyway=True)
    url = role_url("rara_worker")
    async with worker_store(url, "old-owner") as old, worker_store(url, "new-owner") as new:
        await old.register(["test.echo@1"], [])
        await new.register(["test.echo@1"], [])
        [mine] = await old.lease(PAIRS, 5, lease_seconds=0.2)
        assert await old.write_logs([(mine.id, mine.lease_token, 1, "mine\n", 0)]) == {mine.id}
        taken: list[Any] = []

        async def leased_again() -> bool:
            await new.reap(10, 0.0)
            taken.extend(await new.lease(PAIRS, 5, lease_seconds=30))
            return bool(taken)

        await wait_until_async(leased_again, timeout=10, message="the step leased again")
        assert await old.write_logs([(mine.id, mine.lease_token, 2, "late\n", 0)]) == set()
        assert await new.write_logs([(mine.id, taken[0].lease_token, 1, "new\n", 0)]) == {mine.id}
        # Another login may not speak for this worker's id, whatever token it brings.
        async with worker_store(role_url("rara_worker"), "new-owner") as impostor:
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="another login"):
                await impostor.write_logs([(mine.id, taken[0].lease_token, 2, "x\n", 0)])
    assert _stored(conn) == [(1, 1, "mine\n"), (2, 1, "new\n")]
    # No role writes the table itself.
    with (
        psycopg.connect(url, autocommit=True) as worker,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        worker.execute(
            "INSERT INTO rara_step_logs (step_id, attempt, seq, body) VALUES (%s, 1, 9, 'x')",
            (mine.id,),
        )


async def test_an_attempt_keeps_no_more_than_the_bound(
    conn: psycopg.Connection[Any], role_url: Any
) -> None:
    apply(conn, "logs", [{"key": "s", "capability": "test.echo@1"}])
    start_run(conn, "logs", queue_anyway=True)
    async with worker_store(role_url("rara_worker"), "w") as store:
        await store.register(["test.echo@1"], [])
        [step] = await store.lease(PAIRS, 5, lease_seconds=30)
        chunk = "x" * 65536
        with pytest.raises(psycopg.errors.CheckViolation):  # one chunk is 64 KiB at most
            await store.write_logs([(step.id, step.lease_token, 1, chunk + "y", 0)])
        sent = [(step.id, step.lease_token, seq, chunk, 0) for seq in range(1, 17)]
        assert await store.write_logs(sent) == {step.id}  # exactly 1 MiB
        assert await store.write_logs(sent[-1:]) == {step.id}  # a replay adds nothing
        with pytest.raises(psycopg.errors.ProgramLimitExceeded) as refused:
            await store.write_logs([(step.id, step.lease_token, 17, "y" * 2048, 0)])
        assert f"step {step.id} attempt 1: 1050624 bytes of log" in str(refused.value)
    assert len(_stored(conn)) == 16


def test_a_team_reads_the_logs_of_its_own_runs_only(
    conn: psycopg.Connection[Any], role_url: Any
) -> None:
    """With isolation on, a login of team-a reads its run's log and nothing of team-b's, by
    the reader (rara.pg.step_logs) or the table."""
    for team in ("team-a", "team-b"):
        apply(conn, "logs", [{"key": "s", "capability": "test.echo@1"}], namespace=team)
    mine = start_run(conn, "logs", namespace="team-a", queue_anyway=True).run_id
    theirs = start_run(conn, "logs", namespace="team-b", queue_anyway=True).run_id
    for run_id in (mine, theirs):  # written as the owner: this test is about reading
        conn.execute(
            "INSERT INTO rara_step_logs (step_id, attempt, seq, body)"
            " SELECT id, 1, 1, 'run ' || run_id || E'\\n' FROM rara_steps WHERE run_id = %s",
            (run_id,),
        )
    url = role_url("rara_client")
    login = url.split("//", 1)[1].split("@", 1)[0]
    conn.execute("SELECT rara_namespace_isolation(true)")
    conn.execute(
        "INSERT INTO rara_namespace_access (role, namespace) VALUES (%s, 'team-a')", (login,)
    )
    with psycopg.connect(url, autocommit=True) as team:
        assert [c.body for c in list_chunks(team, mine, cursor=LogCursor())] == [f"run {mine}\n"]
        assert list_chunks(team, theirs) == []
        assert team.execute("SELECT count(*) FROM rara_step_logs").fetchone() == (1,)
    assert [c.body for c in list_chunks(conn, theirs)] == [f"run {theirs}\n"]
