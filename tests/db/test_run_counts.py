"""Runs aggregated by counters (migration 0006, issue 17 item 2): a run's step counts move with
its steps' ends, the run ends when they reach its number of steps, and the cost of an end does
not grow with the size of its run."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import psycopg
import pytest

from rara.pg.migrate import migrate, retired
from rara.pg.queries import sql
from rara.pg.runs import enqueue_many
from rara.runs import cancel_run, start_run
from rara.states import AttemptOutcome
from rara.worker.store import end_many, reap
from rara.worker.vocabulary import Ending, Fence, LeasedStep
from tests.support.databases import empty_database
from tests.support.definitions import apply
from tests.support.history import run_count_violations
from tests.support.leasing import lease_now

DIAMOND = [
    {"key": "a", "capability": "x@1", "retry": {"maxAttempts": 1}},
    {"key": "b", "capability": "x@1", "dependsOn": ["a"]},
    {"key": "c", "capability": "x@1", "dependsOn": ["a"]},
    {"key": "d", "capability": "x@1", "dependsOn": ["b", "c"]},
    {"key": "side", "capability": "x@1"},
]


def _counts(conn: psycopg.Connection[Any], run_id: int) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT status::text, steps_total, steps_succeeded, steps_failed, "
        "steps_cancelled FROM rara_runs WHERE id = %s",
        (run_id,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def _end_all(url: str, endings: list[Ending]) -> list[Any]:
    async def end() -> list[Any]:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as aconn:
            return await end_many(aconn, endings)

    return asyncio.run(end())


def _won(step: LeasedStep) -> Ending:
    return Ending(Fence(step.id, "w", step.lease_token), step.run_id, AttemptOutcome.SUCCEEDED)


def test_start_counts_the_steps_and_records_the_dependants(conn: psycopg.Connection[Any]) -> None:
    apply(conn, "diamond", DIAMOND)
    run = start_run(conn, "diamond", queue_anyway=True).run_id
    assert _counts(conn, run) == ("pending", 5, 0, 0, 0)
    rows = dict(
        conn.execute("SELECT key, dependants FROM rara_steps WHERE run_id = %s", (run,)).fetchall()
    )
    assert rows == {"a": ["b", "c"], "b": ["d"], "c": ["d"], "d": [], "side": []}


def test_a_mixed_batch_counts_each_end_once(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    """Successes, a failure for good (its downstream cancelled) and a cancel in one batch."""
    apply(conn, "diamond", DIAMOND)
    runs = [start_run(conn, "diamond", queue_anyway=True).run_id for _ in range(2)]
    leased = {(s.run_id, s.key): s for s in lease_now(conn, ["x@1"], worker="w", limit=10)}
    failing = leased[(runs[0], "a")]
    answers = _end_all(
        database_url,
        [
            _won(leased[(runs[0], "side")]),
            Ending(
                Fence(failing.id, "w", failing.lease_token),
                runs[0],
                AttemptOutcome.FAILED,
                error={"code": "X", "message": "boom"},
                retryable=False,
            ),
            _won(leased[(runs[1], "a")]),
            Ending(
                Fence(leased[(runs[1], "side")].id, "w", leased[(runs[1], "side")].lease_token),
                runs[1],
                AttemptOutcome.CANCELLED,
            ),
        ],
    )
    assert answers == ["succeeded", "failed", "succeeded", "cancelled"]
    assert _counts(conn, runs[0]) == ("failed", 5, 1, 1, 3)  # b, c, d cancelled downstream
    assert _counts(conn, runs[1]) == ("running", 5, 1, 0, 1)  # b and c now ready
    assert run_count_violations(conn) == []


def test_cancel_and_reaper_count_what_they_end(conn: psycopg.Connection[Any]) -> None:
    apply(conn, "diamond", DIAMOND)
    run = start_run(conn, "diamond", queue_anyway=True).run_id
    lease_now(conn, ["x@1"], worker="w", limit=10, lease_seconds=0.001)  # a, side: expire
    conn.execute("SELECT pg_sleep(0.01)")

    async def reap_once() -> list[Any]:
        async with await psycopg.AsyncConnection.connect(conn.info.dsn, autocommit=True) as aconn:
            return await reap(aconn, "r", limit=10, jitter=0.0)

    assert sorted(s for _, s in asyncio.run(reap_once())) == ["failed", "ready"]
    assert _counts(conn, run) == ("running", 5, 0, 1, 3)  # a failed for good, side to retry
    other = start_run(conn, "diamond", queue_anyway=True).run_id
    assert cancel_run(conn, other)
    assert _counts(conn, other) == ("cancelled", 5, 0, 0, 5)
    assert run_count_violations(conn) == []


def _buffers(conn: psycopg.Connection[Any], successes: str) -> int:
    """Shared buffers step_end_many touches for ``successes`` (rolled back)."""
    with conn.transaction(force_rollback=True):
        [[plan]] = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql("step_end_many"),
            {"worker": "w", "successes": successes, "others": "[]"},
        ).fetchall()
    # The function runs whole in the first fetch of its scan node, whose buffer counts are
    # therefore everything its statements touched.
    node = plan[0]["Plan"]
    return int(node["Shared Hit Blocks"]) + int(node["Shared Read Blocks"])


def test_completing_a_step_costs_the_same_in_a_big_run(conn: psycopg.Connection[Any]) -> None:
    """Ten ends in a run of 20,000 steps touch no more pages than ten ends of one-step runs
    (before 0006: every end walked its run's steps twice, dependants and aggregation)."""
    apply(conn, "one", [{"key": "s", "capability": "x@1"}])
    enqueue_many(conn, definition="one", version=None, runs=10, steps=1, key="s", capability="x@1")
    enqueue_many(
        conn,
        definition="one",
        version=None,
        runs=1,
        steps=20_000,
        key="s",
        capability="x@1",
        priority=-1,
    )
    conn.execute("VACUUM ANALYZE")
    small = lease_now(conn, ["x@1"], worker="w", limit=10)
    big = lease_now(conn, ["x@1"], worker="w", limit=10)
    assert len({s.run_id for s in small}) == 10
    assert len({s.run_id for s in big}) == 1

    def endings(steps: list[LeasedStep]) -> str:
        return json.dumps([{"id": s.id, "token": str(s.lease_token)} for s in steps])

    in_small, in_big = _buffers(conn, endings(small)), _buffers(conn, endings(big))
    assert in_big <= in_small * 1.5 + 20, (in_big, in_small)


@pytest.mark.parametrize(
    ("counts", "status"),
    [
        ((False, 3, 1, 0, 1), None),  # a step not terminal yet
        ((False, 3, 3, 0, 0), "succeeded"),
        ((True, 3, 1, 1, 1), "failed"),  # a failure wins over cancel
        ((True, 3, 3, 0, 0), "cancelled"),  # cancel asked
        ((False, 3, 2, 0, 1), "cancelled"),  # a step cancelled
    ],
)
def test_the_end_rule(
    conn: psycopg.Connection[Any], counts: tuple[Any, ...], status: str | None
) -> None:
    row = conn.execute("SELECT rara_run_end_status(%s, %s, %s, %s, %s)::text", counts).fetchone()
    assert row == (status,)


def test_the_end_rule_is_inlined(conn: psycopg.Connection[Any]) -> None:
    """The rule is an expression in the plans that use it, not a call of a SQL function per
    run row (migration 0010: 0006's cast of a text CASE to the enum kept it from inlining)."""
    plan = "\n".join(
        row[0]
        for row in conn.execute(
            "EXPLAIN VERBOSE SELECT rara_run_end_status(r.cancel_requested, r.steps_total + 1, "
            "r.steps_succeeded + 1, r.steps_failed, r.steps_cancelled) FROM rara_runs r"
        )
    )
    assert "rara_run_end_status" not in plan, plan
    assert "CASE WHEN" in plan, plan


def test_migration_counts_the_runs_that_exist(pg_admin_url: str) -> None:
    """0006 on a database with runs: their counts and dependants from their steps."""
    with empty_database(pg_admin_url, "rara_mig_counts") as url:
        before = [m for m in retired() if m.name != "run_counters"]
        counters = next(m for m in retired() if m.name == "run_counters")
        migrate(url, [m for m in before if m.version < counters.version])
        with psycopg.connect(url, autocommit=True) as conn:
            # (as 0005 left it: no functions yet, only tables)
            conn.execute("INSERT INTO rara_definitions (name) VALUES ('diamond')")
            conn.execute(
                "INSERT INTO rara_definition_versions (name, version, digest, spec) "
                "VALUES ('diamond', 1, %s, %s)",
                ("sha256:" + "0" * 64, json.dumps({"steps": [{"key": "a", "capability": "x@1"}]})),
            )
            run = conn.execute(
                "INSERT INTO rara_runs (definition_version_id) SELECT id FROM "
                "rara_definition_versions RETURNING id"
            ).fetchone()
            assert run is not None
            for key, deps, status in (
                ("a", [], "succeeded"),
                ("b", ["a"], "succeeded"),
                ("c", ["a"], "failed"),
                ("d", ["b", "c"], "cancelled"),
                ("side", [], "ready"),
            ):
                conn.execute(
                    "INSERT INTO rara_steps (run_id, key, depends_on, capability, executor, "
                    "max_attempts, retry_initial_ms, retry_max_ms, retry_coefficient, status, "
                    "finished_at) VALUES (%s, %s, %s, 'x@1', 'inprocess', 1, 1, 1, 2, %s, "
                    "CASE WHEN %s <> 'ready' THEN now() END)",
                    (run[0], key, deps, status, status),
                )
            migrate(url)
            assert _counts(conn, run[0]) == ("pending", 5, 2, 1, 1)
            rows = dict(conn.execute("SELECT key, dependants FROM rara_steps").fetchall())
            assert rows == {"a": ["b", "c"], "b": ["d"], "c": ["d"], "d": [], "side": []}
