"""Release and run triggers (rara.triggers.upstream): pipelines of pipelines. A promotion of a
release starts one run of the downstream definition, given the release's artifacts; a run's
end starts one, given the run; neither twice, however many passes or watchers look."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from rara.errors import TriggerInvalid
from rara.releases import promote, rollback
from rara.runs import start_run
from rara.triggers.model import trigger_from_object
from rara.triggers.watching import watch_due
from tests.support.definitions import apply
from tests.support.runs import wait_run
from tests.triggers.conftest import MakeTrigger, trigger_document

Conn = psycopg.Connection[Any]
PIPELINE: list[dict[str, Any]] = [
    {"key": "collect", "capability": "test.produce@1", "input": {"text": "alpha"}},
    {"key": "fail", "capability": "test.produce@1", "input": {"text": "beta"}},
]


@pytest.fixture
def refresh(conn: Conn, thread_worker: Callable[..., Any]) -> Callable[[], int]:
    """`refresh`, run to its end by a worker in a thread: returns the succeeded run's id."""
    thread_worker()
    apply(conn, "refresh", PIPELINE[:1])

    def run() -> int:
        run_id = start_run(conn, "refresh", queue_anyway=True).run_id
        wait_run(conn, run_id, status="succeeded")
        return run_id

    return run


def watch(conn: Conn) -> int:
    conn.execute("UPDATE rara_triggers SET next_poll = now() WHERE kind <> 'webhook'")
    return watch_due(conn, None).started


def downstream(conn: Conn, field: str) -> list[dict[str, Any]]:
    return [
        row[0]
        for row in conn.execute(
            "SELECT input -> %s FROM rara_runs WHERE idempotency_key LIKE 'trigger:%%' ORDER BY id",
            (field,),
        )
    ]


def test_each_promotion_starts_one_run_given_the_releases_artifacts(
    conn: Conn, make_trigger: MakeTrigger, refresh: Callable[[], int]
) -> None:
    first_run, second_run = refresh(), refresh()
    make_trigger("evaluate-index", release={"name": "index"})
    assert watch(conn) == 0  # nothing promoted yet

    promote(conn, "index", first_run, namespace="default")
    assert watch(conn) == 1
    assert watch(conn) == 0  # the same promotion, seen again: nothing
    [given] = downstream(conn, "release")
    assert given["release"] == "index"
    assert (given["number"], given["action"], given["run"]) == (1, "promote", first_run)
    assert [(a["step"], a["name"], a["size"]) for a in given["artifacts"]] == [
        ("collect", "corpus.txt", 5)
    ]
    assert given["artifacts"][0]["digest"].startswith("sha256:")

    promote(conn, "index", second_run, namespace="default")
    rollback(conn, "index", namespace="default")  # no run: onRollback is false
    assert watch(conn) == 1
    assert [g["number"] for g in downstream(conn, "release")] == [1, 2]

    # Changed to take rollbacks: every one since the trigger was created that no pass took,
    # the earlier one too, once each.
    make_trigger("evaluate-index", release={"name": "index", "onRollback": True})
    promote(conn, "index", second_run, namespace="default")
    rollback(conn, "index", namespace="default")
    assert watch(conn) == 3
    assert watch(conn) == 0
    assert [(g["number"], g["action"]) for g in downstream(conn, "release")][-3:] == [
        (1, "rollback"),
        (3, "promote"),
        (1, "rollback"),  # back to what was current when 3 was promoted
    ]
    keys = [k for (k,) in conn.execute("SELECT event_key FROM rara_trigger_events ORDER BY 1")]
    assert all(k.startswith("move-") for k in keys)
    assert len(keys) == 5


def test_each_run_end_in_the_states_named_starts_one_run(
    conn: Conn, make_trigger: MakeTrigger, refresh: Callable[[], int]
) -> None:
    before = refresh()  # ended before the trigger: not its event
    make_trigger("after-refresh", runEnded={"definition": "refresh", "states": ["succeeded"]})
    ended = [refresh(), refresh()]
    assert watch(conn) == 2
    assert watch(conn) == 0
    given = downstream(conn, "upstream")
    assert [g["run"] for g in given] == ended
    assert before not in [g["run"] for g in given]
    assert {(g["definition"], g["status"]) for g in given} == {("refresh", "succeeded")}
    # The downstream run says which run started it: its event, by key.
    linked = conn.execute(
        "SELECT e.event_key, r.input -> 'upstream' ->> 'run' FROM rara_trigger_events e"
        " JOIN rara_runs r ON r.id = e.run_id ORDER BY e.event_key"
    ).fetchall()
    assert linked == [(f"run-{run_id}", str(run_id)) for run_id in sorted(ended)]


def test_a_run_trigger_of_its_own_definition_is_refused() -> None:
    doc = trigger_document(definition="refresh", runEnded={"definition": "refresh"})
    with pytest.raises(TriggerInvalid) as refused:
        trigger_from_object(doc)
    assert "spec.runEnded.definition: the runs of refresh would each start another" in str(
        refused.value
    )


def test_a_trigger_sees_only_its_own_namespaces_releases(
    conn: Conn, make_trigger: MakeTrigger, refresh: Callable[[], int]
) -> None:
    run_id = refresh()
    apply(conn, "refresh", PIPELINE[:1], namespace="team-b")
    make_trigger("evaluate-index", release={"name": "index"})
    theirs = start_run(conn, "refresh", namespace="team-b", queue_anyway=True).run_id
    wait_run(conn, theirs, status="succeeded")
    promote(conn, "index", theirs, namespace="team-b")  # team-b's `index`
    assert watch(conn) == 0
    promote(conn, "index", run_id, namespace="default")
    assert watch(conn) == 1
