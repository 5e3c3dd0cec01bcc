"""A webhook delivery judged and turned into at most one run (rara.triggers.webhook_events):
one run per delivery id however often and however concurrently it comes, and every bad
delivery refused with a status and a reason that names what is wrong, nothing started."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import psycopg
import pytest

from rara.errors import TriggerInvalid
from rara.secrets import SecretNotFound
from rara.triggers.model import trigger_from_object
from rara.triggers.webhook_events import Delivery, Outcome, accept
from tests.support.definitions import apply
from tests.triggers.conftest import (
    MakeTrigger,
    delivery,
    resolve_test_secret,
    signed_headers,
    trigger_document,
)


def judge(conn: psycopg.Connection[Any], d: Delivery, **kwargs: Any) -> Outcome:
    return accept(conn, d, now=kwargs.pop("now", time.time()), secret_of=resolve_test_secret)


def runs(conn: psycopg.Connection[Any]) -> list[tuple[int, str | None, dict[str, Any]]]:
    return [
        (r[0], r[1], r[2])
        for r in conn.execute("SELECT id, idempotency_key, input FROM rara_runs ORDER BY id")
    ]


def events(conn: psycopg.Connection[Any]) -> list[tuple[str, str, int | None, int, str | None]]:
    return [
        (r[0], r[1], r[2], r[3], r[4])
        for r in conn.execute(
            "SELECT event_key, outcome, run_id, seen, reason FROM rara_trigger_events"
            " ORDER BY first_at, event_key"
        )
    ]


def test_a_delivery_starts_one_run_and_its_redelivery_finds_it(
    conn: psycopg.Connection[Any], make_trigger: MakeTrigger
) -> None:
    make_trigger(input={"limit": 3}, webhook={"inputFrom": {"documents": "/docs", "event": ""}})
    payload = {"docs": ["a.md", "b.md"], "source": "wiki"}

    first = judge(conn, delivery(payload, "d-1"))
    assert (first.status, first.created, first.seen) == (201, True, 1)
    [(run_id, key, run_input)] = runs(conn)
    assert run_id == first.run_id
    assert key == "trigger:docs-landed:d-1"
    assert run_input == {"limit": 3, "documents": ["a.md", "b.md"], "event": payload}

    again = judge(conn, delivery(payload, "d-1"))  # the sender's retry, signed anew
    assert (again.status, again.run_id, again.created, again.seen) == (200, run_id, False, 2)
    assert len(runs(conn)) == 1
    assert events(conn) == [("d-1", "started", run_id, 2, None)]

    other = judge(conn, delivery(payload, "d-2"))  # the same bytes under a new id: an event
    assert other.status == 201
    assert other.run_id != run_id
    assert len(runs(conn)) == 2


def test_concurrent_deliveries_of_one_event_start_one_run(
    database_url: str, conn: psycopg.Connection[Any], make_trigger: MakeTrigger
) -> None:
    make_trigger()
    outcomes: list[Outcome] = []
    barrier = threading.Barrier(8)

    def deliver() -> None:
        with psycopg.connect(database_url, autocommit=True) as own:
            barrier.wait(10)
            outcomes.append(judge(own, delivery({"n": 1}, "same-event")))

    threads = [threading.Thread(target=deliver) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(outcomes) == 8
    assert len({o.run_id for o in outcomes}) == 1
    assert sum(o.created for o in outcomes) == 1
    assert len(runs(conn)) == 1
    assert events(conn)[0][3] == 8  # every delivery counted on the one event


def test_deliveries_that_are_not_the_senders_start_nothing_and_are_not_recorded(
    conn: psycopg.Connection[Any], make_trigger: MakeTrigger
) -> None:
    make_trigger()
    body = json.dumps({"n": 1}).encode()
    now = float(int(time.time()))  # whole seconds, as senders sign

    def status(headers: dict[str, str], payload: bytes = body) -> tuple[int, str]:
        outcome = judge(conn, Delivery("default", "docs-landed", headers, payload), now=now)
        return outcome.status, outcome.reason or ""

    code, reason = status(signed_headers(body, "e-1", secret="not-the-secret"))
    assert (code, reason) == (
        401,
        "signature does not match the body, the delivery id and the time",
    )
    code, reason = status(signed_headers(body, "e-1"), b'{"n": 2}')  # body changed on the way
    assert code == 401
    swapped = signed_headers(body, "e-1") | {"rara-delivery": "e-2"}  # replayed under a new id
    assert status(swapped)[0] == 401
    code, reason = status(signed_headers(body, "e-1", at=now - 301))  # a replay, later
    assert code == 401
    assert "signed 301 s ago" in reason
    assert "toleranceSeconds" in reason
    code, reason = status(signed_headers(body, "e-1", at=now + 400))
    assert code == 401
    assert "ahead" in reason
    code, reason = status({k: v for k, v in signed_headers(body, "e-1").items() if "sig" not in k})
    assert (code, reason) == (401, "header Rara-Signature: missing or not sha256=<64 hex digits>")
    code, reason = status({"rara-timestamp": "1", "rara-signature": "sha256=" + "0" * 64})
    assert code == 400
    assert reason.startswith("header Rara-Delivery: missing")
    code, reason = status(signed_headers(body, "has spaces"))
    assert code == 400
    assert "not a delivery id" in reason
    assert runs(conn) == []
    assert events(conn) == []


def test_what_cannot_be_judged_or_taken_is_refused_with_its_reason(
    conn: psycopg.Connection[Any], make_trigger: MakeTrigger
) -> None:
    make_trigger(webhook={"maxBodyBytes": 64})
    big = judge(conn, delivery({"text": "x" * 100}, "big"))
    assert big.status == 413
    assert "spec.webhook.maxBodyBytes" in (big.reason or "")

    missing = judge(conn, delivery({}, "x", trigger="nope"))
    assert (missing.status, missing.reason) == (404, "no webhook trigger nope")
    elsewhere = judge(conn, delivery({}, "x", namespace="team-b"))
    assert elsewhere.status == 404

    conn.execute("SELECT rara_trigger_suspend('docs-landed', true)")
    paused = judge(conn, delivery({}, "p-1"))
    assert (paused.status, paused.reason) == (
        409,
        "trigger docs-landed is paused: nothing started",
    )
    conn.execute("SELECT rara_trigger_suspend('docs-landed', false)")

    def no_secret(name: str, key: str | None) -> str:
        raise SecretNotFound(name)

    unverifiable = accept(conn, delivery({}, "s-1"), now=time.time(), secret_of=no_secret)
    assert unverifiable.status == 503
    assert "'docs-hook' is not available here" in (unverifiable.reason or "")
    assert runs(conn) == []
    assert events(conn) == []


def test_an_authentic_delivery_that_cannot_start_a_run_is_recorded_as_refused(
    conn: psycopg.Connection[Any], make_trigger: MakeTrigger
) -> None:
    schema = {
        "type": "object",
        "properties": {"documents": {"type": "array", "items": {"type": "string"}}},
        "required": ["documents"],
    }
    apply(conn, "ingest", [{"key": "collect", "capability": "c@1", "inputSchema": schema}])
    make_trigger(definition="ingest", webhook={"inputFrom": {"documents": "/docs"}})

    lacking = judge(conn, delivery({"files": []}, "r-1"))
    assert lacking.status == 422
    assert lacking.reason == (
        "input.documents: the body has nothing at '/docs' (spec.webhook.inputFrom.documents):"
        " /docs: not in the body"
    )
    wrong = judge(conn, delivery({"docs": [1, 2]}, "r-2"))
    assert wrong.status == 422
    assert "input.documents[0]: 1 is not of type 'string' (input of step 'collect')" in (
        wrong.reason or ""
    )
    not_json = judge(conn, delivery(b"{not json", "r-3"))
    assert not_json.status == 422
    assert (not_json.reason or "").startswith("body is not JSON")
    assert runs(conn) == []
    assert [(e[0], e[1], e[2]) for e in events(conn)] == [
        ("r-1", "refused", None),
        ("r-2", "refused", None),
        ("r-3", "refused", None),
    ]

    fixed = judge(conn, delivery({"docs": ["a.md"]}, "r-2"))  # the sender's retry, fixed
    assert fixed.status == 201
    assert ("r-2", "started", fixed.run_id) in [(e[0], e[1], e[2]) for e in events(conn)]


def test_a_trigger_of_a_definition_not_applied_yet_refuses_its_events(
    conn: psycopg.Connection[Any], make_trigger: MakeTrigger
) -> None:
    make_trigger(definition="later")
    outcome = judge(conn, delivery({}, "l-1"))
    assert (outcome.status, outcome.reason) == (422, "no workflow definition later")
    assert events(conn) == [("l-1", "refused", None, 1, "no workflow definition later")]


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({"webhook": {"toleranceSeconds": 0}}, "spec.webhook.toleranceSeconds"),
        ({"webhook": {"maxBodyBytes": 2_000_000}}, "spec.webhook.maxBodyBytes"),
        ({"webhook": {"inputFrom": {"docs": "docs"}}}, "is not a JSON pointer"),
        ({"webhook": {"inputFrom": {"docs": "/a~2"}}}, "'~' is written '~0'"),
        ({"webhook": {"inputFrom": {"bad name": ""}}}, "is not a run input field name"),
        ({"webhook": {"secret": "inline"}}, "spec.webhook.secret"),
        ({"input": {"docs": 1}, "webhook": {"inputFrom": {"docs": ""}}}, "comes from one place"),
    ],
)
def test_a_bad_trigger_document_is_refused_naming_its_field(
    spec: dict[str, Any], problem: str
) -> None:
    with pytest.raises(TriggerInvalid) as refused:
        trigger_from_object(trigger_document(**spec))
    assert str(refused.value).startswith("invalid workflow trigger:")
    assert problem in str(refused.value)


def test_apply_checks_the_constant_input_and_leaves_the_events_fields_to_each_event(
    conn: psycopg.Connection[Any], make_trigger: MakeTrigger
) -> None:
    schema = {
        "type": "object",
        "properties": {"documents": {"type": "array"}, "limit": {"type": "integer"}},
        "required": ["documents", "limit"],
    }
    apply(conn, "ingest", [{"key": "collect", "capability": "c@1", "inputSchema": schema}])
    make_trigger(definition="ingest", input={"limit": 5}, webhook={"inputFrom": {"documents": ""}})
    with pytest.raises(TriggerInvalid) as refused:
        make_trigger(
            definition="ingest", input={"limit": "5"}, webhook={"inputFrom": {"documents": ""}}
        )
    assert "spec.input: run input refused: input.limit: '5' is not of type 'integer'" in str(
        refused.value
    )
    with pytest.raises(TriggerInvalid) as lacking:
        make_trigger(definition="ingest", input={"limit": 5})
    assert "'documents' is a required property" in str(lacking.value)
    stored = conn.execute("SELECT input FROM rara_triggers WHERE name = 'docs-landed'").fetchone()
    assert stored == ({"limit": 5},)  # the refused documents wrote nothing
