"""Durable waits, signals and approval gates (migration 0021, docs/waits.md), on a real
PostgreSQL with real workers: a wait holds nothing, ends by its time, signal or decision in
the database, once; every refusal names the run, the step, the signal or the field."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from rara import waits
from rara.definitions.parse import canonical_spec, definition_from_object
from rara.errors import DefinitionInvalid, InputInvalid, NotFound, WaitRefused
from rara.runs import start_run
from tests.support.definitions import apply, definition
from tests.support.history import check_history
from tests.support.runs import steps_of, wait_run, waiting_of
from tests.support.waiting import wait_until
from tests.support.workers import ThreadWorker

FIRE = "SELECT fired FROM rara_waits_fire(100)"


def _step(conn: psycopg.Connection[Any], run_id: int, key: str) -> dict[str, Any]:
    return next(s for s in steps_of(conn, run_id) if s["key"] == key)


def test_a_timer_holds_nothing_and_ends_at_its_time(
    conn: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    apply(
        conn,
        "pause",
        [
            {"key": "a", "capability": "test.noop@1"},
            {"key": "pause", "dependsOn": ["a"], "wait": {"for": "1500ms"}},
            {"key": "b", "capability": "test.noop@1", "dependsOn": ["pause"]},
        ],
    )
    run_id = start_run(conn, "pause", queue_anyway=True).run_id
    worker = ThreadWorker(database_url, tmp_path).start(conn)
    try:
        wait_until(lambda: waiting_of(conn, run_id) == ["pause"], message="pause waits")
        pause = _step(conn, run_id, "pause")
        assert pause["status"] == "blocked"
        assert pause["attempt"] == 0
        assert pause["leased_by"] is None
        # The worker serves every capability the run has, and holds nothing for the wait.
        assert conn.execute(
            "SELECT count(*) FROM rara_steps WHERE run_id = %s AND status = 'running'", (run_id,)
        ).fetchone() == (0,)
        wait_run(conn, run_id, status="succeeded", timeout=30)
    finally:
        worker.stop()
    due, ended, b_started = conn.execute(
        "SELECT (p.result ->> 'waited_until')::timestamptz, p.finished_at, a.started_at"
        " FROM rara_steps p JOIN rara_steps b ON b.run_id = p.run_id AND b.key = 'b'"
        " JOIN rara_attempts a ON a.step_id = b.id"
        " WHERE p.run_id = %s AND p.key = 'pause'",
        (run_id,),
    ).fetchone()
    assert ended >= due
    assert b_started >= due
    assert (ended - due).total_seconds() < 5  # fired by the worker near its time
    assert conn.execute(
        "SELECT count(*) FROM rara_attempts a JOIN rara_steps s ON s.id = a.step_id"
        " WHERE s.run_id = %s AND s.key = 'pause'",
        (run_id,),
    ).fetchone() == (0,)  # never leased
    assert waiting_of(conn, run_id) == []


def test_until_is_a_time_of_the_run_input_or_the_start_is_refused(
    conn: psycopg.Connection[Any],
) -> None:
    apply(conn, "at", [{"key": "publish", "wait": {"until": "input.publish.at"}}])
    run_id = start_run(
        conn, "at", input={"publish": {"at": "2000-01-01T00:00:00Z"}}, queue_anyway=True
    ).run_id
    assert waiting_of(conn, run_id) == ["publish"]  # no dependency: it waits from the start
    assert conn.execute(FIRE).fetchone() == (1,)  # its time is long past
    wait_run(conn, run_id, status="succeeded", timeout=5)
    runs = conn.execute("SELECT count(*) FROM rara_runs").fetchone()
    for bad, said in (
        ({}, "missing from the run input"),
        ({"publish": {"at": "tomorrow"}}, '"tomorrow"'),
        ({"publish": {"at": "2026-12-01T02:00:00"}}, "not a time with its offset"),
        ({"publish": {"at": 1}}, "1"),
    ):
        with pytest.raises((psycopg.errors.InvalidParameterValue, InputInvalid)) as refused:
            start_run(conn, "at", input=bad, queue_anyway=True)
        assert "step publish: wait.until input.publish.at is" in str(refused.value)
        assert said in str(refused.value)
    assert conn.execute("SELECT count(*) FROM rara_runs").fetchone() == runs  # nothing written


SIGNALLED = [
    {"key": "a", "capability": "test.noop@1"},
    {"key": "ready", "dependsOn": ["a"], "wait": {"signal": "data-ready"}},
    {"key": "b", "capability": "test.echo@1", "dependsOn": ["ready"]},
]


def test_a_signal_ends_its_wait_once_and_is_refused_when_nothing_waits(
    conn: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    apply(conn, "sig", SIGNALLED)
    run_id = start_run(conn, "sig", queue_anyway=True).run_id
    # Not waiting yet: its dependency has not run.
    with pytest.raises(WaitRefused, match="step ready is blocked on its dependencies"):
        waits.signal(conn, run_id, "data-ready", {"rows": 1})
    with pytest.raises(WaitRefused, match="no step waits for signal nope"):
        waits.signal(conn, run_id, "nope")
    with pytest.raises(NotFound, match="no run 999999"):
        waits.signal(conn, 999999, "data-ready")
    worker = ThreadWorker(database_url, tmp_path).start(conn)
    try:
        wait_until(lambda: waiting_of(conn, run_id) == ["ready"], message="ready waits")
        # 8 senders of the same signal at once: one is accepted, the others answered with it.
        with ThreadPoolExecutor(8) as pool:
            sent = list(
                pool.map(
                    lambda i: _signal_own_conn(database_url, run_id, {"rows": 42, "by": i}),
                    range(8),
                )
            )
        assert sum(s.accepted for s in sent) == 1
        assert len({s.step_id for s in sent}) == 1
        assert len({s.sent_at for s in sent}) == 1
        wait_run(conn, run_id, status="succeeded", timeout=30)
    finally:
        worker.stop()
    ready = _step(conn, run_id, "ready")
    assert ready["result"]["signal"] == "data-ready"
    assert ready["result"]["payload"]["rows"] == 42
    assert conn.execute(
        "SELECT count(*) FROM rara_signals WHERE run_id = %s", (run_id,)
    ).fetchone() == (1,)
    again = waits.signal(conn, run_id, "data-ready", {"rows": 7})  # same key: the name
    assert not again.accepted
    assert again.step_key == "ready"
    with pytest.raises(WaitRefused, match="step ready is succeeded and not waiting"):
        waits.signal(conn, run_id, "data-ready", key="another")


def _signal_own_conn(url: str, run_id: int, payload: Any) -> waits.Signalled:
    with psycopg.connect(url, autocommit=True) as c:
        return waits.signal(c, run_id, "data-ready", payload)


@pytest.mark.parametrize(("on_timeout", "status"), [("fail", "failed"), ("succeed", "succeeded")])
def test_a_signal_wait_times_out_as_its_definition_says(
    conn: psycopg.Connection[Any], on_timeout: str, status: str
) -> None:
    apply(
        conn,
        "late",
        [{"key": "ready", "wait": {"signal": "go", "timeout": "1ms", "onTimeout": on_timeout}}],
    )
    run_id = start_run(conn, "late", queue_anyway=True).run_id
    wait_until(lambda: conn.execute(FIRE).fetchone() == (1,), message="the deadline fires")
    wait_run(conn, run_id, status=status, timeout=5)
    ready = _step(conn, run_id, "ready")
    if on_timeout == "fail":
        assert ready["error"]["code"] == "WAIT_TIMED_OUT"
        assert "no signal go by" in ready["error"]["message"]
    else:
        assert ready["result"] == {"signal": "go", "timed_out": True}


GATED = [
    {"key": "evaluate", "capability": "test.echo@1", "input": {"quality": {"ndcg": 0.71}}},
    {"key": "collect", "capability": "test.produce@1", "input": {"text": "corpus"}},
    {
        "key": "gate",
        "dependsOn": ["evaluate", "collect"],
        "approval": {"show": ["evaluate.result.input.quality", "collect"]},
    },
    {"key": "publish", "capability": "test.noop@1", "dependsOn": ["gate"]},
]


def test_an_approval_shows_its_evidence_and_counts_one_decision(
    conn: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    apply(conn, "gated", GATED)
    run_id = start_run(conn, "gated", queue_anyway=True).run_id
    with pytest.raises(WaitRefused, match="approval gate is blocked on its dependencies"):
        waits.decide(conn, run_id, "gate", approve=True)
    worker = ThreadWorker(database_url, tmp_path).start(conn)
    try:
        wait_until(lambda: waiting_of(conn, run_id) == ["gate"], message="the gate waits")
        shown = waits.approval(conn, run_id, "gate")
        assert shown.decision is None
        assert shown.approvers == []
        values = {e["show"]: e["value"] for e in shown.evidence["shown"]}
        assert values["evaluate.result.input.quality"] == {"ndcg": 0.71}
        assert values["collect"]["digest"].startswith("sha256:")
        [artifact] = shown.evidence["artifacts"]
        assert artifact["step"] == "collect"
        assert artifact["name"] == "corpus.txt"
        assert artifact["digest"] == values["collect"]["digest"]
        assert _step(conn, run_id, "publish")["status"] == "blocked"
        with pytest.raises(WaitRefused, match="evaluate is not an approval step"):
            waits.decide(conn, run_id, "evaluate", approve=True)
        # 8 people approving at once: one decision recorded, the rest answered with it.
        with ThreadPoolExecutor(8) as pool:
            decided = list(pool.map(lambda i: _approve_own_conn(database_url, run_id), range(8)))
        assert sum(d.recorded for d in decided) == 1
        wait_run(conn, run_id, status="succeeded", timeout=30)
    finally:
        worker.stop()
    with pytest.raises(WaitRefused, match=r"approval gate was approved by rara at"):
        waits.decide(conn, run_id, "gate", approve=False, reason="too late")
    final = waits.approval(conn, run_id, "gate")
    assert final.decision == "approved"
    assert final.decided_by == "rara"
    assert final.reason == "looks good"
    assert final.decided_login == "rara"
    assert _step(conn, run_id, "gate")["result"]["decision"] == "approved"


def _approve_own_conn(url: str, run_id: int) -> waits.Decided:
    with psycopg.connect(url, autocommit=True) as c:
        return waits.decide(c, run_id, "gate", approve=True, reason="looks good")


@pytest.mark.parametrize(("on_reject", "status"), [("fail", "failed"), ("cancel", "cancelled")])
def test_a_rejection_ends_the_run_as_the_gate_says(
    conn: psycopg.Connection[Any], on_reject: str, status: str
) -> None:
    apply(
        conn,
        "rejected",
        [
            {"key": "gate", "approval": {"onReject": on_reject}},
            {"key": "publish", "capability": "test.noop@1", "dependsOn": ["gate"]},
        ],
    )
    run_id = start_run(conn, "rejected", queue_anyway=True).run_id
    decided = waits.decide(
        conn, run_id, "gate", approve=False, reason="ndcg fell", identity="alice@example.com"
    )
    assert decided.recorded
    assert decided.decided_by == "alice@example.com via rara"  # vouched for by the owner
    wait_run(conn, run_id, status=status, timeout=5)
    gate, publish = _step(conn, run_id, "gate"), _step(conn, run_id, "publish")
    assert publish["status"] == "cancelled"
    assert gate["error"]["code"] == "REJECTED"
    assert gate["error"]["message"] == "rejected by alice@example.com via rara: ndcg fell"
    row = waits.approval(conn, run_id, "gate")
    assert (row.decided_by, row.decided_login) == ("alice@example.com via rara", "rara")
    assert waiting_of(conn, run_id) == []


def test_only_the_named_approvers_decide(conn: psycopg.Connection[Any], role_url: Any) -> None:
    conn.execute("CREATE ROLE release_managers NOLOGIN")
    apply(
        conn,
        "strict",
        [{"key": "gate", "approval": {"approvers": ["carol", "release_managers"]}}],
    )
    run_id = start_run(conn, "strict", queue_anyway=True).run_id
    client = role_url("rara_client")
    with psycopg.connect(client, autocommit=True) as c:
        login = c.info.user
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as refused:
            waits.decide(c, run_id, "gate", approve=True)
        assert f"{login} may not decide approval gate (its approvers: carol," in str(refused.value)
    conn.execute(f'GRANT release_managers TO "{login}"')
    with psycopg.connect(client, autocommit=True) as c:
        assert waits.decide(c, run_id, "gate", approve=True).decided_by == login
    wait_run(conn, run_id, status="succeeded", timeout=5)


def test_a_reader_may_not_signal_or_decide(conn: psycopg.Connection[Any], role_url: Any) -> None:
    apply(conn, "sig", [{"key": "ready", "wait": {"signal": "go"}}])
    run_id = start_run(conn, "sig", queue_anyway=True).run_id
    for role in ("rara_reader", "rara_worker"):
        with (
            psycopg.connect(role_url(role), autocommit=True) as c,
            pytest.raises(psycopg.errors.InsufficientPrivilege),
        ):
            waits.signal(c, run_id, "go")
    assert waiting_of(conn, run_id) == ["ready"]


def test_a_cancelled_run_leaves_no_wait(conn: psycopg.Connection[Any]) -> None:
    apply(
        conn,
        "many",
        [
            {"key": "t", "wait": {"for": "1h"}},
            {"key": "s", "wait": {"signal": "go"}},
            {"key": "g", "approval": {}},
        ],
    )
    run_id = start_run(conn, "many", queue_anyway=True).run_id
    assert waiting_of(conn, run_id) == ["g", "s", "t"]
    assert conn.execute("SELECT rara_run_cancel(%s)", (run_id,)).fetchone() == (True,)
    wait_run(conn, run_id, status="cancelled", timeout=5)
    assert waiting_of(conn, run_id) == []
    with pytest.raises(WaitRefused, match="step s is cancelled and not waiting"):
        waits.signal(conn, run_id, "go")


@pytest.mark.parametrize(
    ("step", "error"),
    [
        ({"key": "w", "wait": {"for": "1s", "signal": "x"}}, "exactly one of for:, until:"),
        ({"key": "w", "wait": {}}, "exactly one of for:, until:"),
        ({"key": "w", "capability": "x.y@1", "wait": {"for": "1s"}}, "runs no capability"),
        ({"key": "w", "wait": {"for": "1s"}, "timeout": "1m"}, "timeout do nothing"),
        ({"key": "w", "wait": {"for": "1s", "timeout": "1m"}}, "for signal waits"),
        ({"key": "w", "wait": {"until": "publish_at"}}, "until"),
        ({"key": "w", "wait": {"signal": "bad name"}}, "signal"),
        ({"key": "w", "wait": {"for": "1s"}, "approval": {}}, "one or the other"),
        ({"key": "w", "approval": {"show": ["a"]}}, "not in its dependsOn"),
        ({"key": "w", "approval": {"onReject": "ignore"}}, "onReject"),
        ({"key": "w", "approval": {"fourEyes": "maybe"}}, "fourEyes"),
        ({"key": "w", "capability": "rara.wait@1"}, "the database's own"),
    ],
)
def test_a_bad_wait_is_refused_naming_its_field(
    conn: psycopg.Connection[Any], step: dict[str, Any], error: str
) -> None:
    """By the model (a person's YAML), and by the database for a spec that did not pass it
    (the operator's JSON, a client of another release): the same rule, named."""
    doc = definition("bad", [step])
    with pytest.raises(DefinitionInvalid) as refused:
        definition_from_object(doc)
    assert error in str(refused.value)
    with pytest.raises(psycopg.errors.InvalidParameterValue) as refused_db:
        conn.execute("SELECT rara_definition_register('bad', %s)", (Jsonb(doc["spec"]),))
    assert "spec.steps[0] (step 'w')" in str(refused_db.value)
    assert conn.execute("SELECT count(*) FROM rara_definitions").fetchone() == (0,)


def test_four_eyes_enters_the_spec_and_the_rule_only_when_set(
    conn: psycopg.Connection[Any],
) -> None:
    """A gate written before fourEyes keeps its digest (and version); set, the step's rule
    carries it (rara_spec_wait), unset the gate's place decides (rara_approval_four_eyes)."""
    unset = canonical_spec(
        definition_from_object(definition("g", [{"key": "w", "approval": {}}])).spec
    )
    assert "fourEyes" not in unset["steps"][0]["approval"]
    apply(conn, "g", [{"key": "w", "approval": {}}, {"key": "v", "approval": {"fourEyes": False}}])
    rules = dict(
        conn.execute(
            "SELECT s ->> 'key', s -> 'wait' FROM rara_definition_versions v,"
            " jsonb_array_elements(v.steps) AS s"
        ).fetchall()
    )
    assert "four_eyes" not in rules["w"]
    assert rules["v"]["four_eyes"] is False


def test_two_steps_may_not_wait_for_one_signal() -> None:
    with pytest.raises(DefinitionInvalid, match="waits for signal 'go' already"):
        definition_from_object(
            definition(
                "twice",
                [{"key": "a", "wait": {"signal": "go"}}, {"key": "b", "wait": {"signal": "go"}}],
            )
        )


def _caught(conn: psycopg.Connection[Any], match: str, forgery: str, params: Any) -> None:
    """``forgery``, a state no statement of rara's makes, written with the triggers off: the
    history checker fails naming ``match``. Rolled back."""
    with conn.transaction(force_rollback=True):
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute(forgery, params)
        with pytest.raises(AssertionError, match=match):
            check_history(conn)


def test_the_history_checker_knows_a_wait_runs_nothing_and_ends_once(
    conn: psycopg.Connection[Any],
) -> None:
    """The chaos tests' checker (tests/support/history.py, invariant 8) fails each way a wait
    could go wrong: leased, waiting for nothing, ended twice or by two signals, a gate ended
    without its decision; and a step that runs, succeeded without an attempt."""
    apply(conn, "sig", [{"key": "w", "wait": {"signal": "go"}},
                        {"key": "b", "capability": "test.noop@1", "dependsOn": ["w"]}])  # fmt: skip
    apply(conn, "gate", [{"key": "w", "approval": {}}])
    signalled = start_run(conn, "sig", queue_anyway=True).run_id
    gated = start_run(conn, "gate", queue_anyway=True).run_id
    check_history(conn)  # both waiting
    w, b = (_step_id(conn, signalled, key) for key in ("w", "b"))
    gate = _step_id(conn, gated, "w")
    _caught(
        conn,
        f"signal step {w} .*: ran",
        "INSERT INTO rara_attempts (step_id, attempt, run_id, worker, lease_token)"
        " VALUES (%s, 1, %s, 'w0', gen_random_uuid())",
        (w, signalled),
    )
    _caught(
        conn,
        f"step {gate} .*: does not wait",
        "DELETE FROM rara_waits WHERE step_id = %s",
        (gate,),
    )
    waits.signal(conn, signalled, "go")
    waits.decide(conn, gated, "w", approve=True)
    check_history(conn)  # both ended, once
    _caught(
        conn,
        f"step {w} .*: ended by 2 signals",
        "INSERT INTO rara_signals (run_id, key, namespace, name, step_id, sent_by)"
        " VALUES (%s, 'again', 'default', 'go', %s, 'rara')",
        (signalled, w),
    )
    _caught(
        conn,
        f"step {gate} .*: ended without",
        "UPDATE rara_approvals SET decision = NULL, decided_at = NULL WHERE step_id = %s",
        (gate,),
    )
    _caught(  # what a second end of w would write: its run counts it twice
        conn,
        f"run {signalled}: counts",
        "UPDATE rara_runs SET steps_succeeded = steps_succeeded + 1 WHERE id = %s",
        (signalled,),
    )
    _caught(
        conn,
        f"step {b}: succeeded without",
        "UPDATE rara_steps SET status = 'succeeded', finished_at = now() WHERE id = %s",
        (b,),
    )


def _step_id(conn: psycopg.Connection[Any], run_id: int, key: str) -> int:
    row = conn.execute(
        "SELECT id FROM rara_steps WHERE run_id = %s AND key = %s", (run_id, key)
    ).fetchone()
    assert row is not None
    return int(row[0])


def _behind(
    conn: psycopg.Connection[Any], url: str, first: str, params: Any, second: Callable[[Any], Any]
) -> Any:
    """``first`` in a transaction left open (it holds the wait step's row), then ``second`` on a
    connection of its own, which waits for that row; once it waits, ``first`` commits. What
    ``second`` answered, or raised."""
    answer: dict[str, Any] = {}
    with psycopg.connect(url) as holder, psycopg.connect(url, autocommit=True) as other:
        holder.execute(first, params)

        def run() -> None:
            try:
                answer["value"] = second(other)
            except Exception as exc:  # the answer, examined by the test
                answer["value"] = exc

        thread = threading.Thread(target=run)
        thread.start()
        wait_until(
            lambda: (
                conn.execute(
                    "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s",
                    (other.info.backend_pid,),
                ).fetchone()
                == (True,)
            ),
            message="the second to wait for the step's row",
        )
        holder.commit()
        thread.join(10)
    assert not thread.is_alive()
    return answer["value"]


def test_a_signal_racing_another_end_of_its_wait_is_refused(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    """The wait ends by the first signal (another key) or by its deadline while the second
    waits for the step's row: the second is refused, not accepted for a step that no longer
    waits. (It was: the locking read joined the wait's row as it was before the wait ended, so
    the second wrote a signal row too and answered accepted.)"""
    apply(conn, "sig", [{"key": "w", "wait": {"signal": "go"}}])
    apply(conn, "late", [{"key": "w", "wait": {"signal": "go", "timeout": "1ms"}}])
    first, late = (start_run(conn, name, queue_anyway=True).run_id for name in ("sig", "late"))
    raced = _behind(
        conn,
        database_url,
        "SELECT * FROM rara_run_signal(%s, 'go', '{}', 'one')",
        (first,),
        lambda c: waits.signal(c, first, "go", key="another"),
    )
    assert isinstance(raced, WaitRefused), raced
    assert "step w is succeeded and not waiting" in str(raced)
    raced = _behind(
        conn,
        database_url,
        "SELECT * FROM rara_waits_fire(10) WHERE fired = 1",
        None,
        lambda c: waits.signal(c, late, "go"),
    )
    assert isinstance(raced, WaitRefused), raced
    assert "step w is failed and not waiting" in str(raced)
    assert conn.execute("SELECT run_id, key FROM rara_signals ORDER BY run_id").fetchall() == [
        (first, "one")
    ]
    check_history(conn)


def test_a_decision_racing_a_run_cancel_is_refused(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    apply(conn, "gate", [{"key": "w", "approval": {}}])
    run_id = start_run(conn, "gate", queue_anyway=True).run_id
    raced = _behind(
        conn,
        database_url,
        "SELECT rara_run_cancel(%s)",
        (run_id,),
        lambda c: waits.decide(c, run_id, "w", approve=True),
    )
    assert isinstance(raced, WaitRefused), raced
    assert "approval w is cancelled and not waiting" in str(raced)
    assert conn.execute(
        "SELECT decision FROM rara_approvals WHERE step_id = %s", (_step_id(conn, run_id, "w"),)
    ).fetchone() == (None,)
    check_history(conn)


def test_a_run_waits_for_a_person_only_when_nothing_else_can_move_it(
    conn: psycopg.Connection[Any], database_url: str, tmp_path: Path
) -> None:
    """wait_list_for_person: empty while a step is ready or running or a timer will fire; the
    gate's row once only a decision can move the run on, announced on rara_run (rara_wait_begin) so
    `runs watch` and Client.wait(until_person=True) stop then, not at their next poll."""
    from rara.client import Client
    from rara.pg.waits import for_person

    client = Client(database_url)
    apply(conn, "gated", GATED)
    run_id = start_run(conn, "gated", queue_anyway=True).run_id
    assert for_person(conn, run_id) == []  # evaluate and collect are ready
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute("LISTEN rara_run")
        worker = ThreadWorker(database_url, tmp_path).start(conn)
        try:
            view = client.wait(run_id, timeout=30, until_person=True)
            heard = [n.payload for n in listener.notifies(timeout=5, stop_after=1)]
        finally:
            worker.stop()
    assert not view.status.terminal
    assert heard == [""]  # a wake-up naming nothing: any login may LISTEN
    [gate] = for_person(conn, run_id)
    assert (gate.step_key, gate.kind, gate.signal, gate.due_at) == ("gate", "approval", None, None)
    assert waits.next_moves(run_id, [gate]) == [
        f"gate waits for an approval: rara approvals show {run_id} gate, then approve or reject"
    ]

    # A timer in the same run will move it on by itself: nobody is waited for yet.
    apply(
        conn,
        "napping",
        [{"key": "nap", "wait": {"for": "1h"}}, {"key": "go", "wait": {"signal": "go"}}],
    )
    napping = start_run(conn, "napping", queue_anyway=True).run_id
    assert waiting_of(conn, napping) == ["go", "nap"]
    assert for_person(conn, napping) == []
    conn.execute(
        "UPDATE rara_waits SET due_at = now() WHERE run_id = %s AND kind = 'timer'", (napping,)
    )
    conn.execute(FIRE)
    [go] = for_person(conn, napping)
    assert waits.next_moves(napping, [go]) == [
        f"go waits for signal go: rara runs signal {napping} go --payload JSON"
    ]
