"""Debounced webhook triggers (rara.triggers.debounce): a burst of deliveries for one key is one
run, given every event's input in arrival order; a steady stream still runs by its maximum
delay; a redelivery joins nothing twice; events racing for one burst all join it."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from rara.errors import TriggerInvalid
from rara.triggers.model import trigger_from_object
from rara.triggers.watching import watch_due
from rara.triggers.webhook_events import Delivery, Outcome, accept
from tests.triggers.conftest import MakeTrigger, delivery, resolve_test_secret, trigger_document

Conn = psycopg.Connection[Any]
DEBOUNCED = {
    "inputFrom": {"doc": "/doc"},
    "debounce": {"windowSeconds": 60, "maxDelaySeconds": 120, "key": "/repo"},
}


def judge(conn: Conn, d: Delivery) -> Outcome:
    return accept(conn, d, now=time.time(), secret_of=resolve_test_secret)


def runs(conn: Conn) -> list[tuple[str, Any]]:
    return [
        (r[0], r[1])
        for r in conn.execute("SELECT idempotency_key, input FROM rara_runs ORDER BY id")
    ]


def test_a_burst_per_key_becomes_one_run_given_every_event(
    conn: Conn, make_trigger: MakeTrigger
) -> None:
    make_trigger(input={"limit": 3}, webhook=DEBOUNCED)
    answers = [
        judge(conn, delivery({"repo": repo, "doc": doc}, f"e-{i}"))
        for i, (repo, doc) in enumerate(
            [("a", "1.md"), ("b", "x.md"), ("a", "2.md"), ("a", "3.md")]
        )
    ]
    assert {a.status for a in answers} == {202}
    a_batch = answers[0].as_json()["batch"]
    assert [a.as_json()["batch"] == a_batch for a in answers] == [True, False, True, True]
    assert answers[3].as_json()["events"] == 3
    again = judge(conn, delivery({"repo": "a", "doc": "2.md"}, "e-2"))  # a retry joins nothing
    assert (again.status, again.as_json()["events"], again.seen) == (202, 3, 2)
    assert watch_due(conn, None).started == 0  # not due yet: nothing starts
    assert runs(conn) == []

    conn.execute("UPDATE rara_trigger_batches SET due_at = now()")  # as the window passing
    assert watch_due(conn, None).started == 2
    assert watch_due(conn, None).started == 0
    by_batch = {key: value for key, value in runs(conn)}
    assert by_batch[f"trigger:docs-landed:batch-{a_batch}"] == {
        "limit": 3,
        "events": [{"doc": "1.md"}, {"doc": "2.md"}, {"doc": "3.md"}],
    }
    assert sorted(len(v["events"]) for v in by_batch.values()) == [1, 3]
    # Delivered again after its burst ran: its run, nothing new.
    late = judge(conn, delivery({"repo": "a", "doc": "1.md"}, "e-0"))
    assert (late.status, late.created) == (200, False)
    a_run = conn.execute(
        "SELECT id FROM rara_runs WHERE idempotency_key = %s",
        (f"trigger:docs-landed:batch-{a_batch}",),
    ).fetchone()
    assert a_run == (late.run_id,)
    # A new event of the key opens a new burst.
    assert judge(conn, delivery({"repo": "a", "doc": "4.md"}, "e-9")).as_json()["batch"] != a_batch


def test_a_steady_stream_runs_by_its_maximum_delay(conn: Conn, make_trigger: MakeTrigger) -> None:
    make_trigger(webhook=DEBOUNCED)
    judge(conn, delivery({"repo": "a", "doc": "1.md"}, "s-1"))
    # The burst opened 110 s ago and events kept coming: the next one moves it to its cap.
    conn.execute("UPDATE rara_trigger_batches SET opened_at = now() - interval '110 seconds'")
    judge(conn, delivery({"repo": "a", "doc": "2.md"}, "s-2"))
    [(left,)] = conn.execute(
        "SELECT extract(epoch FROM due_at - now()) FROM rara_trigger_batches"
    ).fetchall()
    assert 0 < left <= 10  # opened_at + 120 s, not now + the 60 s window


def test_events_racing_for_one_burst_all_join_it(
    database_url: str, conn: Conn, make_trigger: MakeTrigger
) -> None:
    make_trigger(webhook=DEBOUNCED)
    barrier = threading.Barrier(8)
    answers: list[Outcome] = []

    def send(i: int) -> None:
        with psycopg.connect(database_url, autocommit=True) as own:
            barrier.wait(10)
            answers.append(judge(own, delivery({"repo": "a", "doc": f"{i}.md"}, f"r-{i}")))

    threads = [threading.Thread(target=send, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len({a.as_json()["batch"] for a in answers}) == 1
    [(events,)] = conn.execute("SELECT jsonb_array_length(inputs) FROM rara_trigger_batches")
    assert events == 8


def test_an_event_without_its_key_is_refused_and_recorded(
    conn: Conn, make_trigger: MakeTrigger
) -> None:
    make_trigger(webhook=DEBOUNCED)
    refused = judge(conn, delivery({"doc": "1.md"}, "k-1"))
    assert refused.status == 422
    assert refused.reason == (
        "the body has nothing at '/repo' (spec.webhook.debounce.key): /repo: not in the body"
    )
    assert conn.execute("SELECT outcome FROM rara_trigger_events").fetchall() == [("refused",)]
    assert conn.execute("SELECT count(*) FROM rara_trigger_batches").fetchone() == (0,)


@pytest.mark.parametrize(
    ("debounce", "problem"),
    [
        ({"windowSeconds": 60, "maxDelaySeconds": 30}, "maxDelaySeconds (30) is shorter"),
        ({"windowSeconds": 0}, "spec.webhook.debounce.windowSeconds"),
        ({"windowSeconds": 5, "key": "repo"}, "is not a JSON pointer"),
    ],
)
def test_a_bad_debounce_is_refused_naming_its_field(debounce: dict[str, Any], problem: str) -> None:
    with pytest.raises(TriggerInvalid) as refused:
        trigger_from_object(trigger_document(webhook={"debounce": debounce}))
    assert problem in str(refused.value)


def test_the_events_field_is_the_runs_and_comes_from_one_place() -> None:
    doc = trigger_document(input={"events": []}, webhook={"debounce": {"windowSeconds": 5}})
    with pytest.raises(TriggerInvalid) as refused:
        trigger_from_object(doc)
    assert "spec.webhook.debounce.inputField and spec.input both set events" in str(refused.value)
