"""Map steps (migration 0008, db/functions/maps.sql, docs/map-steps.md): a step that expands,
once its upstream succeeded, into one child per element of a list from an upstream result or
the run input; children are ordinary steps (lease, attempts, retries, artifacts); the map step
ends when they did; its downstream sees their artifacts in index order. Driven as the worker
drives steps (rara.worker.store), checked with the history invariants (tests/history.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from pydantic import ValidationError

from rara.cli.watch import summary
from rara.definitions.parse import definition_from_object
from rara.pg import steps as step_sql
from rara.pg.migrate import retired
from rara.runs import cancel_run, start_run
from rara.states import UNLEASED_STEP_TRANSITIONS, AttemptOutcome, StepStatus
from rara.worker.store import end_many, reap
from rara.worker.vocabulary import Ending, Fence, LeasedStep
from tests.support.definitions import apply, definition
from tests.support.history import check_history
from tests.support.leasing import lease_now

SPLIT = {"key": "split", "capability": "split@1"}
WORK = {
    "key": "work",
    "capability": "work@1",
    "dependsOn": ["split"],
    "map": {"over": "split.result.items"},
    "retry": {"maxAttempts": 1},
}
JOIN = {"key": "join", "capability": "join@1", "dependsOn": ["work"]}


def _end(url: str, *endings: Ending) -> list[StepStatus | None]:
    async def end() -> list[StepStatus | None]:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as aconn:
            return await end_many(aconn, list(endings))

    return asyncio.run(end())


def _won(
    step: LeasedStep, result: Any = None, artifacts: tuple[dict[str, Any], ...] = ()
) -> Ending:
    return Ending(
        Fence(step.id, "w", step.lease_token),
        step.run_id,
        AttemptOutcome.SUCCEEDED,
        result,
        artifacts,
    )


def _lost(step: LeasedStep) -> Ending:
    return Ending(
        Fence(step.id, "w", step.lease_token),
        step.run_id,
        AttemptOutcome.FAILED,
        error={"code": "BOOM"},
        retryable=False,
    )


def _steps(conn: psycopg.Connection[Any], run_id: int) -> dict[str, str]:
    return dict(
        conn.execute(
            "SELECT key, status::text FROM rara_steps WHERE run_id = %s", (run_id,)
        ).fetchall()
    )


def _run(conn: psycopg.Connection[Any], run_id: int) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT status::text, steps_total, steps_succeeded, steps_failed, "
        "steps_cancelled FROM rara_runs WHERE id = %s",
        (run_id,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def _blob(n: int) -> dict[str, Any]:
    return {
        "name": "part",
        "digest": "sha256:" + f"{n:064x}",
        "size": n,
        "media_type": "text/plain",
    }


def test_a_map_expands_over_an_upstream_result_and_its_downstream_sees_the_children(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    apply(conn, "fan", [SPLIT, WORK, JOIN])
    run_id = start_run(conn, "fan", queue_anyway=True).run_id
    [split] = lease_now(conn, ["split@1"], worker="w", limit=5)
    items = [f"shard-{i}" for i in range(12)]
    assert _end(database_url, _won(split, {"items": items}, (_blob(99),))) == [StepStatus.SUCCEEDED]

    children = lease_now(conn, ["work@1"], worker="w", limit=50)
    assert sorted(c.key for c in children) == sorted(f"work[{i}]" for i in range(12))
    for child in children:
        index = int(child.key[5:-1])
        assert child.payload["map"] == {"item": f"shard-{index}", "index": index}
        assert child.inputs["split/part"].size == 99  # the map's upstream artifacts
    # Out of order, in two batches: the map waits for every child.
    by_index = sorted(children, key=lambda c: int(c.key[5:-1]))
    _end(
        database_url,
        *[_won(c, {"i": i}, (_blob(i + 1),)) for i, c in reversed(list(enumerate(by_index)))][:6],
    )
    assert _steps(conn, run_id)["work"] == "blocked"
    assert lease_now(conn, ["join@1"], worker="w", limit=5) == []
    # Seen by people (runs show / watch, the UI): the map as one line, not a line per child.
    assert [(s.key, s.children) for s in step_sql.list_for_run(conn, run_id)] == [
        ("split", None),
        ("work", "map: 6/12 done, 6 running, 0 failed"),
        ("join", None),
    ]
    work = next(s for s in step_sql.list_progress(conn, run_id) if s.key == "work")
    assert (work.fraction, work.message) == (0.5, "map: 6/12 done, 6 running, 0 failed")
    assert work.is_map
    # ... and in the summary table `runs watch` ends with: its tally, not "0/3" attempts.
    attempts = list(summary(database_url, run_id).columns[2].cells)  # split, work, join
    assert str(attempts[1]) == "map: 6/12 done, 6 running, 0 failed"
    _end(
        database_url,
        *[_won(c, {"i": i}, (_blob(i + 1),)) for i, c in list(enumerate(by_index))[:6]],
    )
    assert _steps(conn, run_id)["work"] == "succeeded"

    [join] = lease_now(conn, ["join@1"], worker="w", limit=5)
    # In index order (not the keys' text order: work[10] after work[9]).
    assert [(name, ref.size) for name, ref in join.inputs.items()] == [
        (f"work[{i}]/part", i + 1) for i in range(12)
    ]
    _end(database_url, _won(join))
    assert _run(conn, run_id) == ("succeeded", 15, 15, 0, 0)
    check_history(conn)


def test_a_map_over_the_run_input_expands_at_start_and_an_empty_list_succeeds_at_once(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    apply(
        conn,
        "inputs",
        [
            {"key": "each", "capability": "work@1", "map": {"over": "input.files"}},
            {"key": "after", "capability": "join@1", "dependsOn": ["each"]},
        ],
    )
    run_id = start_run(
        conn, "inputs", input={"files": ["a", "b"], "mode": "fast"}, queue_anyway=True
    ).run_id
    children = lease_now(conn, ["work@1"], worker="w", limit=5)
    assert sorted(c.payload["map"]["item"] for c in children) == ["a", "b"]
    # Each child gets its element and the rest of the input, not the whole list (a lease of a
    # child costs the same whatever the size of the map).
    assert [c.run_input for c in children] == [{"mode": "fast"}] * 2
    _end(database_url, *[_won(c) for c in children])
    [after] = lease_now(conn, ["join@1"], worker="w", limit=5)
    _end(database_url, _won(after))
    assert _run(conn, run_id) == ("succeeded", 4, 4, 0, 0)

    empty = start_run(conn, "inputs", input={"files": []}, queue_anyway=True).run_id
    assert _steps(conn, empty) == {"each": "succeeded", "after": "ready"}
    check_history(conn)


def test_a_list_that_is_not_one_fails_the_map_naming_it(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    apply(conn, "fan", [SPLIT, WORK, JOIN])
    run_id = start_run(conn, "fan", queue_anyway=True).run_id
    [split] = lease_now(conn, ["split@1"], worker="w", limit=5)
    _end(database_url, _won(split, {"items": {"not": "a list"}}))
    [[error]] = conn.execute(
        "SELECT error FROM rara_steps WHERE run_id = %s AND key = 'work'", (run_id,)
    ).fetchall()
    assert error["code"] == "MAP_NOT_A_LIST"
    assert error["message"] == "map.over split.result.items is object, not a list"
    assert _steps(conn, run_id) == {"split": "succeeded", "work": "failed", "join": "cancelled"}
    assert _run(conn, run_id) == ("failed", 3, 1, 1, 1)
    check_history(conn)


def test_max_parallel_bounds_the_children_ready_or_running(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    apply(
        conn,
        "narrow",
        [SPLIT, {**WORK, "map": {"over": "split.result.items", "maxParallel": 3}}, JOIN],
    )
    run_id = start_run(conn, "narrow", queue_anyway=True).run_id
    [split] = lease_now(conn, ["split@1"], worker="w", limit=5)
    _end(database_url, _won(split, {"items": list(range(10))}))
    done = 0
    while done < 10:
        active = conn.execute(
            "SELECT count(*) FROM rara_steps WHERE run_id = %s AND map_index IS NOT NULL AND "
            "status IN ('ready', 'running')",
            (run_id,),
        ).fetchone()
        assert active == (min(3, 10 - done),)
        leased = lease_now(conn, ["work@1"], worker="w", limit=2)
        _end(database_url, *[_won(c) for c in leased])
        done += len(leased)
    assert _steps(conn, run_id)["join"] == "ready"
    check_history(conn)


def test_a_child_failing_for_good_fails_the_map_and_cancels_the_rest(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    apply(
        conn,
        "fan",
        [SPLIT, {**WORK, "map": {"over": "split.result.items", "maxParallel": 4}}, JOIN],
    )
    run_id = start_run(conn, "fan", queue_anyway=True).run_id
    [split] = lease_now(conn, ["split@1"], worker="w", limit=5)
    _end(database_url, _won(split, {"items": list(range(8))}))
    first, second, *_ = lease_now(conn, ["work@1"], worker="w", limit=2)
    assert _end(database_url, _lost(first)) == [StepStatus.FAILED]
    statuses = _steps(conn, run_id)
    assert statuses["work"] == "failed"
    assert statuses["join"] == "cancelled"
    # Waiting children cancelled; the running one asked to stop, then ends as cancelled. The
    # four past the window were never inserted (elements of the list until a slot frees):
    # they count as cancelled in the run all the same, and their elements are dropped.
    assert sorted(v for k, v in statuses.items() if k.startswith("work[")) == ["cancelled"] * 2 + [
        "failed",
        "running",
    ]
    assert conn.execute("SELECT count(*) FROM rara_map_lists").fetchone() == (0,)
    [[flag]] = conn.execute(
        "SELECT cancel_requested FROM rara_steps WHERE id = %s", (second.id,)
    ).fetchall()
    assert flag
    cancelled = Ending(Fence(second.id, "w", second.lease_token), run_id, AttemptOutcome.CANCELLED)
    assert _end(database_url, cancelled) == [StepStatus.CANCELLED]
    [[error]] = conn.execute(
        "SELECT error FROM rara_steps WHERE run_id = %s AND key = 'work'", (run_id,)
    ).fetchall()
    assert error["code"] == "MAP_CHILD_FAILED"
    assert _run(conn, run_id) == ("failed", 11, 1, 2, 8)
    check_history(conn)


def test_cancel_mid_map_and_the_reaper_on_a_child(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    apply(conn, "fan", [SPLIT, {**WORK, "retry": {"maxAttempts": 3, "initialDelay": "1ms"}}, JOIN])
    run_id = start_run(conn, "fan", queue_anyway=True).run_id
    [split] = lease_now(conn, ["split@1"], worker="w", limit=5)
    _end(database_url, _won(split, {"items": ["a", "b", "c"]}))
    [child] = lease_now(conn, ["work@1"], worker="w", limit=1, lease_seconds=0.01)
    conn.execute("SELECT pg_sleep(0.05)")

    async def reap_once() -> list[Any]:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as aconn:
            return await reap(aconn, "r", limit=10, jitter=0.0)

    assert asyncio.run(reap_once()) == [(child.id, StepStatus.READY)]  # a retry, not a failure
    assert _steps(conn, run_id)["work"] == "blocked"

    conn.execute("SELECT pg_sleep(0.01)")  # the retry's backoff
    running = lease_now(conn, ["work@1"], worker="w", limit=1)
    assert len(running) == 1
    assert cancel_run(conn, run_id)
    statuses = _steps(conn, run_id)
    assert statuses["work"] == statuses["join"] == "cancelled"
    _end(
        database_url,
        Ending(Fence(running[0].id, "w", running[0].lease_token), run_id, AttemptOutcome.CANCELLED),
    )
    assert _run(conn, run_id)[0] == "cancelled"
    check_history(conn)


def test_children_past_the_window_are_inserted_as_slots_free_in_index_order(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    """Only the window is rows; the rest of the list waits in slices of 100 (0011) and each
    freed slot inserts the next child ready, with its element, across slice boundaries."""
    apply(
        conn,
        "narrow",
        [SPLIT, {**WORK, "map": {"over": "split.result.items", "maxParallel": 7}}, JOIN],
    )
    run_id = start_run(conn, "narrow", queue_anyway=True).run_id
    [split] = lease_now(conn, ["split@1"], worker="w", limit=5)
    items = [{"shard": i} for i in range(250)]
    _end(database_url, _won(split, {"items": items}))
    rows = conn.execute(
        "SELECT count(*) FROM rara_steps WHERE run_id = %s AND map_parent IS NOT NULL", (run_id,)
    ).fetchone()
    assert rows == (7,)
    assert conn.execute(
        "SELECT array_agg(first_index ORDER BY first_index), "
        "sum(jsonb_array_length(items)) FROM rara_map_lists"
    ).fetchone() == ([7, 107, 207], 243)
    seen = []
    while leased := lease_now(conn, ["work@1"], worker="w", limit=33):
        seen += [(c.key, c.payload["map"]["item"], c.payload["map"]["index"]) for c in leased]
        _end(database_url, *[_won(c) for c in leased])
    assert sorted(seen, key=lambda s: s[2]) == [(f"work[{i}]", {"shard": i}, i) for i in range(250)]
    assert _steps(conn, run_id)["join"] == "ready"
    assert conn.execute("SELECT count(*) FROM rara_map_lists").fetchone() == (0,)
    check_history(conn)


def test_cancel_counts_the_children_not_yet_inserted(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    apply(
        conn,
        "narrow",
        [SPLIT, {**WORK, "map": {"over": "split.result.items", "maxParallel": 2}}, JOIN],
    )
    run_id = start_run(conn, "narrow", queue_anyway=True).run_id
    [split] = lease_now(conn, ["split@1"], worker="w", limit=5)
    _end(database_url, _won(split, {"items": list(range(9))}))
    first, _ = lease_now(conn, ["work@1"], worker="w", limit=5)
    _end(database_url, _won(first))
    assert _run(conn, run_id) == ("running", 12, 2, 0, 0)
    assert cancel_run(conn, run_id)
    # The running child (work[1]) ends cancelled; the waiting one (work[2]), the 6 never
    # inserted, the map and its downstream were cancelled by the cancel itself.
    assert _run(conn, run_id) == ("running", 12, 2, 0, 9)
    assert conn.execute("SELECT count(*) FROM rara_map_lists").fetchone() == (0,)
    [[running]] = conn.execute(
        "SELECT id FROM rara_steps WHERE run_id = %s AND status = 'running'", (run_id,)
    ).fetchall()
    [token] = (
        conn.execute("SELECT lease_token FROM rara_steps WHERE id = %s", (running,)).fetchone()
        or ()
    )
    _end(database_url, Ending(Fence(running, "w", token), run_id, AttemptOutcome.CANCELLED))
    assert _run(conn, run_id) == ("cancelled", 12, 2, 0, 10)
    check_history(conn)


def test_migration_0011_moves_blocked_children_into_the_list(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    """A map expanded before 0011 has its children past the window as blocked rows; the
    migration's data statements turn them into slices, and the map then drains by the new
    rule (the old state made here by hand, as the owner, from a map expanded now)."""
    apply(
        conn,
        "narrow",
        [SPLIT, {**WORK, "map": {"over": "split.result.items", "maxParallel": 2}}, JOIN],
    )
    run_id = start_run(conn, "narrow", queue_anyway=True).run_id
    [split] = lease_now(conn, ["split@1"], worker="w", limit=5)
    _end(database_url, _won(split, {"items": [f"s{i}" for i in range(6)]}))
    [[map_id]] = conn.execute(
        "SELECT id FROM rara_steps WHERE run_id = %s AND key = 'work'", (run_id,)
    ).fetchall()
    with conn.transaction():  # the state 0010's rara_map_expand left
        conn.execute("DELETE FROM rara_map_lists")
        conn.execute(
            """
            INSERT INTO rara_steps (run_id, namespace, key, depends_on, dependants, pending_deps,
                                    capability, executor, priority, payload, max_attempts,
                                    retry_initial_ms, retry_max_ms, retry_coefficient,
                                    status, map_parent, map_index)
            SELECT m.run_id, m.namespace, 'work[' || i || ']', m.depends_on, '{}', 0, m.capability,
                   m.executor, m.priority, m.payload || jsonb_build_object(
                       'map', jsonb_build_object('item', 's' || i, 'index', i)),
                   m.max_attempts, m.retry_initial_ms, m.retry_max_ms,
                   m.retry_coefficient, 'blocked', m.id, i
            FROM rara_steps m, generate_series(2, 5) AS i WHERE m.id = %s""",
            (map_id,),
        )
    [sql] = [m.sql for m in retired() if m.version == 11]
    conn.execute(sql[sql.index("INSERT INTO rara_map_lists") :])
    assert conn.execute(
        "SELECT count(*) FROM rara_steps WHERE status = 'blocked' AND map_parent IS NOT NULL"
    ).fetchone() == (0,)
    seen = []
    while leased := lease_now(conn, ["work@1"], worker="w", limit=5):
        seen += [c.payload["map"]["item"] for c in leased]
        _end(database_url, *[_won(c) for c in leased])
    assert sorted(seen) == [f"s{i}" for i in range(6)]
    assert _steps(conn, run_id)["work"] == "succeeded"
    check_history(conn)


@pytest.mark.parametrize(
    ("step", "error"),
    [
        (
            {**WORK, "map": {"over": "splt.result.items"}},
            "map.over reads step 'splt', which is not in its dependsOn",
        ),
        ({**WORK, "input": {"item": 1}}, "input.item is what map gives each child"),
        ({**WORK, "map": {"over": "split.items"}}, "map.over"),
        ({**WORK, "map": {"over": "split.result", "maxParallel": 0}}, "map.maxParallel"),
        ({**WORK, "map": {"over": "input", "allowFailures": 2}}, "map.allowFailures"),
    ],
)
def test_a_bad_map_is_refused_naming_its_field(step: dict[str, Any], error: str) -> None:
    with pytest.raises((ValidationError, ValueError)) as refused:
        definition_from_object(definition("bad", [SPLIT, step]))
    assert error in str(refused.value)


def test_only_a_map_step_ends_from_blocked(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    """The trigger (0008) and rara.states agree: blocked -> succeeded | failed is a map
    step's move, and no other step's."""
    apply(conn, "fan", [SPLIT, WORK, JOIN])
    run_id = start_run(conn, "fan", queue_anyway=True).run_id
    assert (StepStatus.BLOCKED, StepStatus.SUCCEEDED) in UNLEASED_STEP_TRANSITIONS
    for key, allowed in (("work", True), ("join", False)):
        for status in ("succeeded", "failed"):
            update = (
                "UPDATE rara_steps SET status = %s, finished_at = now() "
                "WHERE run_id = %s AND key = %s"
            )
            with conn.transaction(force_rollback=True):
                if allowed:
                    conn.execute(update, (status, run_id, key))
                else:
                    with pytest.raises(psycopg.errors.CheckViolation):
                        conn.execute(update, (status, run_id, key))


def test_a_small_run_behind_a_big_map_waits_for_at_most_its_window(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    """Fair share, bounded: a map makes at most maxParallel (default 1,000) children ready at
    once, and makes the next ready as slots free, behind whatever became ready meanwhile — so
    a small run started behind a 5,000-child map is leased after at most 1,000 of them."""
    apply(conn, "big", [{"key": "each", "capability": "work@1", "map": {"over": "input.n"}}])
    apply(conn, "small", [{"key": "one", "capability": "work@1"}])
    start_run(conn, "big", input={"n": list(range(5000))}, queue_anyway=True)
    for _ in range(3):  # the map is under way: slots freed and refilled
        _end(database_url, *[_won(c) for c in lease_now(conn, ["work@1"], worker="w", limit=500)])
    small = start_run(conn, "small", queue_anyway=True).run_id
    ahead = 0
    while True:
        leased = lease_now(conn, ["work@1"], worker="w", limit=100)
        mine = [s for s in leased if s.run_id == small]
        if mine:
            ahead += leased.index(mine[0])
            break
        ahead += len(leased)
        _end(database_url, *[_won(c) for c in leased])
    assert ahead <= 1000, ahead
    check_history(conn)
