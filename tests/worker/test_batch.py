"""The completion batch path: ``rara.worker.store.end_many`` (many attempts' ends in one
transaction, each fenced on its own) and the worker's ``CompletionBatcher`` around it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any
from uuid import UUID

import psycopg
import pytest
from prometheus_client import REGISTRY

from rara.states import AttemptOutcome, StepStatus
from rara.worker.batcher import CompletionBatcher
from rara.worker.store import WorkerStore, end_many
from rara.worker.vocabulary import Ending, Fence, LeasedStep
from tests.support.history import check_history
from tests.support.runs import attempts_of, define, run_status, start, steps_of, wait_run
from tests.support.waiting import wait_until, wait_until_async
from tests.support.workers import worker_store

PAIRS = [("test.echo@1", "inprocess")]
ONE_TRY = {"maxAttempts": 1}
_TOKEN = UUID(int=1)


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[WorkerStore]:
    async with worker_store(database_url, "batcher", pool_size=4) as store:
        yield store


async def _lease(store: WorkerStore, n: int = 50) -> dict[tuple[int, str], LeasedStep]:
    return {(s.run_id, s.key): s for s in await store.lease(PAIRS, n, lease_seconds=30)}


def _won(step: LeasedStep, result: Any = None, artifacts: Sequence[dict[str, Any]] = ()) -> Ending:
    return Ending(
        Fence(step.id, "batcher", step.lease_token),
        step.run_id,
        AttemptOutcome.SUCCEEDED,
        result=result,
        artifacts=artifacts,
    )


def _lost(step: LeasedStep, *, retryable: bool) -> Ending:
    return Ending(
        Fence(step.id, "batcher", step.lease_token),
        step.run_id,
        AttemptOutcome.FAILED,
        error={"code": "X", "message": "boom"},
        retryable=retryable,
        jitter=0.0,
    )


async def test_a_lost_fence_in_a_batch_affects_only_that_step(
    conn: psycopg.Connection[Any], store: WorkerStore
) -> None:
    define(conn, "one", [{"key": "s", "capability": "test.echo@1"}])
    runs = [start(conn, "one") for _ in range(3)]
    leased = await _lease(store)
    # Another owner took the middle run's step behind our back (as after a partition + reap).
    conn.execute("UPDATE rara_steps SET leased_by = 'intruder' WHERE run_id = %s", (runs[1],))
    answers = await store.end_many([_won(leased[(r, "s")], {"run": r}) for r in runs])
    assert answers == ["succeeded", None, "succeeded"]
    for run in (runs[0], runs[2]):
        [step] = steps_of(conn, run)
        assert (step["status"], step["result"]) == ("succeeded", {"run": run})
        assert run_status(conn, run) == "succeeded"
        assert [a["outcome"] for a in attempts_of(conn, run)] == ["succeeded"]
    [taken] = steps_of(conn, runs[1])
    assert (taken["status"], taken["leased_by"], taken["result"]) == ("running", "intruder", None)
    assert [a["outcome"] for a in attempts_of(conn, runs[1])] == ["running"]
    assert run_status(conn, runs[1]) == "running"


async def test_siblings_in_one_batch_unblock_their_dependant_and_finish_the_run(
    conn: psycopg.Connection[Any], store: WorkerStore
) -> None:
    define(
        conn,
        "fan",
        [
            {"key": "a", "capability": "test.echo@1"},
            {"key": "b", "capability": "test.echo@1"},
            {"key": "c", "capability": "test.echo@1", "dependsOn": ["a", "b"]},
        ],
    )
    define(
        conn,
        "pair",
        [{"key": "a", "capability": "test.echo@1"}, {"key": "b", "capability": "test.echo@1"}],
    )
    fan, pair = start(conn, "fan"), start(conn, "pair")
    leased = await _lease(store)
    assert set(leased) == {(fan, "a"), (fan, "b"), (pair, "a"), (pair, "b")}
    assert await store.end_many([_won(s) for s in leased.values()]) == ["succeeded"] * 4
    # Both dependencies of c finished in one statement: c counted down by two, now ready.
    c = conn.execute(
        "SELECT status::text, pending_deps FROM rara_steps WHERE run_id = %s AND key = 'c'", (fan,)
    ).fetchone()
    assert c == ("ready", 0)
    assert run_status(conn, pair) == "succeeded"
    assert run_status(conn, fan) == "running"
    [(_, last)] = (await _lease(store)).items()
    assert await store.end_many([_won(last)]) == ["succeeded"]
    assert run_status(conn, fan) == "succeeded"
    check_history(conn)


async def test_failures_in_a_batch(conn: psycopg.Connection[Any], store: WorkerStore) -> None:
    define(
        conn,
        "mixed",
        [
            {"key": "a", "capability": "test.echo@1", "retry": ONE_TRY},
            {"key": "b", "capability": "test.echo@1", "retry": ONE_TRY},
            {"key": "d", "capability": "test.echo@1", "dependsOn": ["b"]},
        ],
    )
    define(
        conn,
        "flaky",
        [
            {
                "key": "s",
                "capability": "test.echo@1",
                "retry": {"maxAttempts": 3, "initialDelay": "1h", "maxDelay": "1h"},
            }
        ],
    )
    mixed, flaky = start(conn, "mixed"), start(conn, "flaky")
    leased = await _lease(store)
    batch = [
        _won(leased[(mixed, "a")]),
        _lost(leased[(mixed, "b")], retryable=False),
        _lost(leased[(flaky, "s")], retryable=True),
    ]
    assert await store.end_many(batch) == ["succeeded", "failed", "ready"]
    statuses = {s["key"]: s["status"] for s in steps_of(conn, mixed)}
    assert statuses == {"a": "succeeded", "b": "failed", "d": "cancelled"}
    assert run_status(conn, mixed) == "failed"
    [retry] = steps_of(conn, flaky)
    assert (retry["status"], retry["error"]["code"]) == ("ready", "X")
    assert run_status(conn, flaky) == "running"
    outcomes = {a["key"]: a["outcome"] for a in attempts_of(conn, mixed)}
    assert outcomes == {"a": "succeeded", "b": "failed"}
    check_history(conn)


async def test_artifacts_in_a_batch_land_with_their_step(
    conn: psycopg.Connection[Any], store: WorkerStore
) -> None:
    define(conn, "one", [{"key": "s", "capability": "test.echo@1"}])
    runs = [start(conn, "one") for _ in range(2)]
    leased = await _lease(store)
    digest = "sha256:" + "ab" * 32
    manifest = [{"name": "out.txt", "digest": digest, "size": 3, "media_type": "text/plain"}]
    conn.execute("UPDATE rara_steps SET leased_by = 'intruder' WHERE run_id = %s", (runs[1],))
    answers = await store.end_many([_won(leased[(r, "s")], artifacts=manifest) for r in runs])
    assert answers == ["succeeded", None]
    rows = conn.execute(
        "SELECT s.run_id, a.name, a.attempt FROM rara_step_artifacts a "
        "JOIN rara_steps s ON s.id = a.step_id"
    ).fetchall()
    assert rows == [(runs[0], "out.txt", 1)]  # the lost step recorded nothing


async def test_sibling_batches_in_concurrent_transactions_end_the_run(
    conn: psycopg.Connection[Any], database_url: str, store: WorkerStore
) -> None:
    """The race the run's lock exists for: two batches each finishing one sibling, concurrently.
    Both write their step first, then queue on the run's lock (held here); the second to get it
    must count on top of the first's commit, or the run stays running forever."""
    define(
        conn,
        "pair",
        [{"key": "a", "capability": "test.echo@1"}, {"key": "b", "capability": "test.echo@1"}],
    )
    run = start(conn, "pair")
    leased = await _lease(store)
    async with await psycopg.AsyncConnection.connect(database_url) as holder:
        await holder.execute("SELECT id FROM rara_runs WHERE id = %s FOR NO KEY UPDATE", (run,))
        first = asyncio.create_task(_end_alone(database_url, _won(leased[(run, "a")])))
        second = asyncio.create_task(_end_alone(database_url, _won(leased[(run, "b")])))
        await wait_until_async(
            lambda: _waiting_on_locks(conn, 2),
            timeout=5,
            message="the batches to queue on the run lock",
            interval=0.01,
        )
        await holder.commit()
        assert await first == ["succeeded"]
        assert await second == ["succeeded"]
    assert run_status(conn, run) == "succeeded"


async def _end_alone(url: str, ending: Ending) -> list[StepStatus | None]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as c:
        return await end_many(c, [ending])


def _waiting_on_locks(conn: psycopg.Connection[Any], n: int) -> bool:
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = "
        "current_database() AND wait_event_type = 'Lock'"
    ).fetchone()
    return bool(row and row[0] >= n)


async def test_batcher_groups_what_ends_together_and_splits_a_bad_batch() -> None:
    seen: list[list[int]] = []

    class Store:
        """Answers by step id (odd: succeeded, even: lease lost); refuses a batch with 13."""

        async def end_many(self, endings: Sequence[Ending]) -> list[StepStatus | None]:
            ids = [e.fence.step_id for e in endings]
            seen.append(ids)
            await asyncio.sleep(0.01)  # a flush in flight: what ends meanwhile waits
            if 13 in ids:
                raise ValueError("a row the database refuses")
            return [StepStatus.SUCCEEDED if i % 2 else None for i in ids]

    batcher = CompletionBatcher(Store(), max_batch=4)

    def ending(i: int) -> Ending:
        return Ending(Fence(i, "w", _TOKEN), 1, AttemptOutcome.SUCCEEDED)

    answers = await asyncio.gather(*(batcher.submit(ending(i)) for i in range(1, 7)))
    assert answers == ["succeeded", None, "succeeded", None, "succeeded", None]
    assert seen == [[1, 2, 3, 4], [5, 6]]  # one flush at a time, size capped
    seen.clear()
    results = await asyncio.gather(
        *(batcher.submit(ending(i)) for i in (11, 12, 13)), return_exceptions=True
    )
    assert results[:2] == ["succeeded", None]  # the bad one fails alone
    assert isinstance(results[2], ValueError)
    assert seen == [[11, 12, 13], [11], [12], [13]]


async def test_batcher_hands_transient_errors_to_every_attempt() -> None:
    class Store:
        async def end_many(self, endings: Sequence[Ending]) -> list[StepStatus | None]:
            raise psycopg.OperationalError("connection lost")

    batcher = CompletionBatcher(Store())
    endings = [Ending(Fence(i, "w", _TOKEN), 1, AttemptOutcome.SUCCEEDED) for i in range(3)]
    results = await asyncio.gather(*(batcher.submit(e) for e in endings), return_exceptions=True)
    assert all(isinstance(r, psycopg.OperationalError) for r in results)


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_worker_batches_completions_and_counts_them(
    conn: psycopg.Connection[Any], thread_worker: Any
) -> None:
    define(conn, "noop", [{"key": "s", "capability": "test.noop@1"}])
    runs = [start(conn, "noop") for _ in range(60)]
    cap = {"capability": "test.noop@1"}
    before = (
        _sample("rara_leases_total", **cap),
        _sample("rara_completions_total", **cap, outcome="succeeded"),
        _sample("rara_step_duration_seconds_count", **cap),
    )
    worker = thread_worker(concurrency=60)
    for run in runs:
        wait_run(conn, run, status="succeeded")
    assert worker.worker is not None
    assert worker.worker.batcher.batches < len(runs)  # several ends per transaction
    check_history(conn)
    wait_until(lambda: not worker.worker.attempts, message="attempts to finish")
    after = (
        _sample("rara_leases_total", **cap),
        _sample("rara_completions_total", **cap, outcome="succeeded"),
        _sample("rara_step_duration_seconds_count", **cap),
    )
    assert [a - b for a, b in zip(after, before, strict=True)] == [60, 60, 60]
    assert _sample("rara_attempts_running") == 0


async def test_hot_path_plans_made_on_empty_tables_never_scan_them(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    """The worker's connections plan each statement once (generic plans,
    ``HOT_PATH_SESSION``), often on a fresh database: a plan that scans a table because it was
    empty then kept scanning it as it grew (the attempts update of every completion batch read
    the whole attempts table, ~25 µs a step by a 20,000-step drain)."""
    define(
        conn,
        "pair",
        [
            {"key": "a", "capability": "test.echo@1"},
            {"key": "b", "capability": "test.echo@1", "dependsOn": ["a"]},
        ],
    )
    runs = [start(conn, "pair") for _ in range(2)]
    plans: list[str] = []
    # One connection, so that the leases and the ends run where auto_explain is loaded.
    async with worker_store(database_url, "batcher", pool_size=1) as hot:
        async with hot.pool.connection() as c:
            c.add_notice_handler(lambda d: plans.append(d.message_primary or ""))
            for setting in (
                "auto_explain.log_min_duration = 0",
                "auto_explain.log_level = notice",
                "auto_explain.log_nested_statements = on",
            ):
                await c.execute("LOAD 'auto_explain'")
                await c.execute(f"SET {setting}")
        for _ in range(2):  # a, then the b it unblocked
            leased = await hot.lease(PAIRS, 10, lease_seconds=30)
            assert len(leased) == len(runs)
            assert await hot.end_many([_won(s) for s in leased]) == ["succeeded"] * len(runs)
    assert [run_status(conn, r) for r in runs] == ["succeeded"] * len(runs)
    assert len(plans) >= 4
    scans = [p for p in plans if "Seq Scan on rara_" in p]
    assert scans == [], scans[0]
