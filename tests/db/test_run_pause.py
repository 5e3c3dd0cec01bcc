"""Pausing a run (rara_run_set_paused, db/functions/pauses.sql; docs/state-machines.md,
"Paused runs"), statement by statement as a worker and a client call them: what a pause holds
— the ready steps, and every step made ready while it lasts, whichever path made it so (an
end's unblocking, a retry, a reaped lease) — is never leased, and a resume puts each back in
its place in the queue, leasable at once."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from rara.client import Client
from rara.errors import NotFound, RunEnded
from rara.pauses import set_paused
from rara.pg.queries import value
from rara.runs import cancel_run, start_run
from rara.states import AttemptOutcome
from rara.worker.vocabulary import Ending, Fence, LeasedStep
from tests.db.test_map_steps import SPLIT, _end, _won
from tests.db.test_map_steps import WORK as MAP
from tests.support.definitions import apply
from tests.support.leasing import lease_now
from tests.support.runs import steps_of, wait_run
from tests.support.waiting import wait_until

Conn = psycopg.Connection[Any]
WORK = "p.work@1"
STEPS = [
    {"key": "a", "capability": WORK},
    {"key": "b", "capability": WORK},
    {"key": "c", "capability": WORK, "dependsOn": ["a"]},
]
# (status, held) per step: held is a paused run's step kept out of the lease
Held = dict[str, tuple[str, bool]]


def _start(conn: Conn, steps: list[dict[str, Any]] = STEPS) -> int:
    apply(conn, "pausable", steps)
    return start_run(conn, "pausable", queue_anyway=True).run_id


def _held(conn: Conn, run_id: int) -> Held:
    rows = conn.execute(
        "SELECT key, status::text, available_at = 'infinity' AND held_available_at IS NOT NULL"
        " FROM rara_steps WHERE run_id = %s",
        (run_id,),
    ).fetchall()
    return {key: (status, held) for key, status, held in rows}


def _available_at(conn: Conn, run_id: int, key: str) -> Any:
    row = conn.execute(
        "SELECT available_at::text FROM rara_steps WHERE run_id = %s AND key = %s", (run_id, key)
    ).fetchone()
    assert row is not None
    return row[0]


def _phase(conn: Conn, run_id: int) -> str:
    row = conn.execute(
        "SELECT ph.phase FROM rara_runs r CROSS JOIN LATERAL rara_run_phase(r.id, r.status) ph"
        " WHERE r.id = %s",
        (run_id,),
    ).fetchone()
    assert row is not None
    return str(row[0])


def _lease(conn: Conn, **kw: Any) -> list[LeasedStep]:
    return lease_now(conn, [WORK], worker="w", limit=5, **kw)


def _next_available(conn: Conn) -> float | None:
    """What an idle worker asks after an empty lease (step_next_available)."""
    return value(conn, "step_next_available", float, capabilities=[WORK], executors=["inprocess"])


def _lost(step: LeasedStep) -> Ending:
    """A retryable failure of the attempt (its backoff: the step's retry rule)."""
    fence = Fence(step.id, "w", step.lease_token)
    return Ending(fence, step.run_id, AttemptOutcome.FAILED, error={"code": "FLAKY"})


def test_a_pause_holds_the_ready_steps_and_what_its_running_steps_unblock(
    conn: Conn, database_url: str
) -> None:
    run_id = _start(conn)
    [a] = lease_now(conn, [WORK], worker="w", limit=1)
    b_at = _available_at(conn, run_id, "b")
    paused = set_paused(conn, run_id, True)
    assert (paused.changed, paused.steps, paused.text) == (
        True,
        1,
        f"run {run_id} paused: 1 step held",
    )
    assert _held(conn, run_id) == {
        "a": ("running", False), "b": ("ready", True), "c": ("blocked", False)
    }  # fmt: skip
    assert _phase(conn, run_id) == "paused"
    assert _lease(conn) == []
    # The running step ends as usual, its result kept; what it unblocks is held too.
    assert _end(database_url, _won(a, {"n": 1})) == ["succeeded"]
    assert _held(conn, run_id) == {
        "a": ("succeeded", False), "b": ("ready", True), "c": ("ready", True)
    }  # fmt: skip
    assert _lease(conn) == []
    assert _next_available(conn) is None  # nothing to wake up for
    again = set_paused(conn, run_id, True)
    assert (again.changed, again.text) == (False, f"run {run_id} is already paused")
    resumed = set_paused(conn, run_id, False)
    assert (resumed.changed, resumed.steps) == (True, 2)
    assert _phase(conn, run_id) == "running"
    assert _available_at(conn, run_id, "b") == b_at  # its place in the queue again
    taken = _lease(conn)
    assert [s.key for s in taken] == ["b", "c"]
    assert _end(database_url, *(_won(s) for s in taken)) == ["succeeded", "succeeded"]
    assert wait_run(conn, run_id) == "succeeded"
    assert steps_of(conn, run_id)[0]["result"] == {"n": 1}
    with pytest.raises(RunEnded, match=f"run {run_id} has already ended"):
        set_paused(conn, run_id, False)
    with pytest.raises(NotFound, match="no run 999999"):
        set_paused(conn, 999999, True)


def test_a_retry_and_a_reaped_lease_of_a_paused_run_are_held(conn: Conn, database_url: str) -> None:
    retry = {"maxAttempts": 5, "initialDelay": "1ms", "maxDelay": "1ms"}
    run_id = _start(conn, [{"key": "f", "capability": WORK, "retry": retry},
                           {"key": "r", "capability": WORK, "retry": retry}])  # fmt: skip
    [f] = lease_now(conn, [WORK], worker="w", limit=1)
    [_] = lease_now(conn, [WORK], worker="w", limit=1, lease_seconds=0.05)  # r: to be reaped
    set_paused(conn, run_id, True)
    assert _end(database_url, _lost(f)) == ["ready"]
    wait_until(
        lambda: conn.execute("SELECT * FROM rara_step_reap_expired('reaper', 10, 0)").fetchall(),
        message="the expired lease reaped",
    )
    assert _held(conn, run_id) == {"f": ("ready", True), "r": ("ready", True)}
    assert _lease(conn) == []
    # Resumed: both leasable (their backoff of 1 ms long run out), a second attempt each.
    assert set_paused(conn, run_id, False).steps == 2
    taken = wait_until(lambda: _lease(conn), message="the held steps leased after the resume")
    assert sorted((s.key, s.attempt) for s in taken) == [("f", 2), ("r", 2)]


def test_a_paused_run_can_be_cancelled(conn: Conn, database_url: str) -> None:
    run_id = _start(conn)
    [a] = lease_now(conn, [WORK], worker="w", limit=1)
    set_paused(conn, run_id, True)
    assert cancel_run(conn, run_id)
    assert _held(conn, run_id)["b"][0] == _held(conn, run_id)["c"][0] == "cancelled"
    assert _end(database_url, _won(a)) == ["succeeded"]  # a running step still ends as usual
    assert wait_run(conn, run_id) == "cancelled"
    assert _phase(conn, run_id) == "cancelled"  # an ended run is its status, paused or not
    with pytest.raises(RunEnded):
        Client(database_url).unpause_run(run_id)


def test_resuming_a_run_that_is_not_paused_changes_nothing(conn: Conn, database_url: str) -> None:
    run_id = _start(conn)
    same = Client(database_url).unpause_run(run_id)
    assert (same.changed, same.steps) == (False, 0)
    assert same.text == f"run {run_id} is already not paused"
    assert [s.key for s in _lease(conn)] == ["a", "b"]


def test_a_map_that_expands_while_its_run_is_paused_inserts_its_children_held(
    conn: Conn, database_url: str
) -> None:
    run_id = _start(conn, [SPLIT, MAP])
    [split] = lease_now(conn, ["split@1"], worker="w", limit=1)
    set_paused(conn, run_id, True)
    assert _end(database_url, _won(split, {"items": ["x", "y", "z"]})) == ["succeeded"]
    children = {k: v for k, v in _held(conn, run_id).items() if k.startswith("work[")}
    assert children == {f"work[{i}]": ("ready", True) for i in range(3)}
    assert lease_now(conn, [MAP["capability"]], worker="w", limit=5) == []
    assert set_paused(conn, run_id, False).steps == 3
    taken = lease_now(conn, [MAP["capability"]], worker="w", limit=5)
    assert sorted(s.key for s in taken) == ["work[0]", "work[1]", "work[2]"]
