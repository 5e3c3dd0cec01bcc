"""Namespaces in the dashboard, in a real browser over a real `rara ui` (migration 0017,
docs/ui.md): two namespaces each with a definition named `refresh` and runs of it. The runs
list names each run's namespace and its filter narrows to one, its keyset pages staying in
it; each definition page shows its own history; a schedule of the same name in two
namespaces is paused only where the action was taken, and a retry starts its run's
definition in its run's namespace; a bad ``?namespace=`` is a 400 naming
the parameter."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg

from rara.definitions.parse import definition_from_object
from rara.definitions.registry import apply_definition
from rara.pg import schedules as schedule_sql
from rara.runs import cancel_run, start_run
from rara.schedules.manage import apply_schedule
from rara.schedules.model import load_schedule
from rara.ui.data import PAGE
from tests.support.definitions import definition
from tests.support.ui import UiServer
from tests.ui.test_browser import _stop, _worker

TEAMS = ("team-a", "team-b")


def _refresh(conn: psycopg.Connection[Any], namespace: str, step: str) -> None:
    """`refresh` in ``namespace``, one step whose key says whose it is."""
    spec = definition("refresh", [{"key": step, "capability": "test.noop@1"}])
    apply_definition(conn, definition_from_object(spec), namespace=namespace)


def _start(conn: psycopg.Connection[Any], namespace: str, key: str) -> int:
    # No worker: the runs stay pending, which is all the lists need.
    started = start_run(
        conn, "refresh", idempotency_key=key, queue_anyway=True, namespace=namespace
    )
    return started.run_id


def _status(ui: UiServer, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(ui.url + path, timeout=10) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_runs_and_definitions_show_and_filter_namespaces(
    page: Any, ui_server: Callable[..., UiServer], conn: psycopg.Connection[Any]
) -> None:
    from playwright.sync_api import expect

    _refresh(conn, "team-a", "a-step")
    _refresh(conn, "team-b", "b-step")
    _refresh(conn, "team-b", "b-step-changed")  # team-b's version 2; team-a stays at 1
    # More team-a runs than a page, team-b's among them: the filter's pages must skip them.
    b_runs = []
    a_runs = []
    for i in range(PAGE + 5):
        a_runs.append(_start(conn, "team-a", f"a-{i}"))
        if i % 20 == 0:
            b_runs.append(_start(conn, "team-b", f"b-{i}"))
    ui = ui_server()

    page.goto(ui.url + "/runs")
    newest_b = page.locator(f'tr[data-run="{b_runs[-1]}"]')
    expect(newest_b.locator('[data-field="namespace"]')).to_have_text("team-b")
    expect(page.locator(f'tr[data-run="{a_runs[-1]}"] [data-field="namespace"]')).to_have_text(
        "team-a"
    )
    expect(page.locator("#namespace option")).to_have_text(["all", *TEAMS])

    # The filter narrows to one namespace, and its keyset pages stay there.
    page.select_option("#namespace", "team-a")
    page.locator("form.filters button", has_text="Filter").click()
    expect(page).to_have_url(ui.url + "/runs?namespace=team-a&q=&status=&definition=&since=&until=")
    rows = page.locator("tbody tr[data-run]")
    expect(rows).to_have_count(PAGE)
    expect(page.locator('tbody tr[data-namespace="team-b"]')).to_have_count(0)
    page.locator("a.next").click()
    expect(rows).to_have_count(len(a_runs) - PAGE)
    expect(page.locator('tbody tr[data-namespace="team-b"]')).to_have_count(0)
    assert "namespace=team-a" in page.url
    expect(page.locator(f'tr[data-run="{a_runs[0]}"]')).to_have_count(1)

    # Unfiltered, the pages go across namespaces: every run once.
    page.goto(ui.url + "/runs")
    first = set(page.locator("tbody tr[data-run]").evaluate_all(_RUN_IDS))
    page.locator("a.next").click()
    expect(page.locator("tbody tr[data-run]")).to_have_count(len(a_runs) + len(b_runs) - PAGE)
    second = set(page.locator("tbody tr[data-run]").evaluate_all(_RUN_IDS))
    assert first | second == set(a_runs + b_runs)
    assert not first & second

    # A definition filter means that definition in the namespace chosen.
    page.goto(ui.url + "/runs?namespace=team-b&definition=refresh")
    expect(rows).to_have_count(len(b_runs))
    expect(page.locator("#no-match")).to_have_count(0)
    page.goto(ui.url + "/runs?namespace=default&definition=refresh")
    expect(page.locator("#no-match")).to_contain_text("namespace default")

    # The run page names its namespace and links its own definition.
    page.goto(f"{ui.url}/runs/{b_runs[0]}")
    expect(page.locator("#run-namespace")).to_have_text("team-b")
    page.locator(".facts a", has_text="refresh@2").click()
    expect(page).to_have_url(f"{ui.url}/definitions/refresh?namespace=team-b&version=2")

    # Each definition page is its own history: team-b has 2 versions, team-a 1, default none.
    expect(page.locator("#definition-namespace")).to_have_text("team-b")
    expect(page.locator("table.list tbody tr td:first-child a")).to_have_text(["2", "1"])
    page.locator("table.list a", has_text="1").first.click()
    expect(page).to_have_url(f"{ui.url}/definitions/refresh?namespace=team-b&version=1")
    expect(page.locator("#definition-yaml")).to_contain_text("key: b-step")
    page.locator("form.filters button", has_text="Compare").click()
    expect(page.locator("#diff-steps")).to_contain_text("b-step-changed added")
    assert "namespace=team-b" in page.url
    page.locator("#definition-runs").click()
    expect(rows).to_have_count(len(b_runs))

    page.goto(ui.url + "/definitions/refresh?namespace=team-a")
    expect(page.locator("table.list tbody tr td:first-child a")).to_have_text(["1"])
    expect(page.locator("#definition-yaml")).to_contain_text("key: a-step")
    answer = page.goto(ui.url + "/definitions/refresh")  # no parameter: default's
    assert answer is not None
    assert answer.status == 404
    expect(page.locator("main")).to_contain_text("no workflow definition refresh")

    # The definitions list: both, each with its namespace, and the filter.
    page.goto(ui.url + "/definitions")
    listed = page.locator("tbody tr[data-definition=refresh]")
    expect(listed.locator('[data-field="namespace"]')).to_have_text(list(TEAMS))
    listed.nth(1).locator("a", has_text="refresh").click()
    expect(page).to_have_url(ui.url + "/definitions/refresh?namespace=team-b")
    page.goto(ui.url + "/definitions?namespace=team-a")
    expect(page.locator("tbody tr[data-definition]")).to_have_count(1)
    expect(page.locator('tbody tr[data-namespace="team-a"]')).to_have_count(1)

    # A bad namespace is the caller's mistake, named: never a 500.
    for path in (
        "/runs?namespace=Team_A",
        "/definitions?namespace=-x",
        "/definitions/refresh?namespace=a%2Fb",
        "/definitions?after=refresh&after_namespace=NO",
        "/schedules?namespace=" + "x" * 64,
        "/schedules/nightly?namespace=UPPER",
    ):
        status, body = _status(ui, path)
        assert status == 400, (path, status)
        assert "query parameter namespace" in body or "after_namespace" in body, path
        assert "is not a namespace name" in body, path


_RUN_IDS = "(rows) => rows.map((r) => Number(r.dataset.run))"

NIGHTLY = """
apiVersion: rara.dev/v1alpha1
kind: WorkflowSchedule
metadata: {name: nightly}
spec: {definition: refresh, schedule: "0 2 * * *"}
"""


def test_actions_act_in_the_namespace_shown(
    page: Any,
    ui_server: Callable[..., UiServer],
    database_url: str,
    conn: psycopg.Connection[Any],
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    for team in TEAMS:
        _refresh(conn, team, f"{team}-step")
        apply_schedule(conn, load_schedule(NIGHTLY), namespace=team)
    token = "t0ken-for-the-namespace-test-012"
    (tmp_path / "token").write_text(token + "\n")
    ui = ui_server("--no-read-only", "--token-file", str(tmp_path / "token"))

    def suspended(namespace: str) -> bool:
        row = schedule_sql.get(conn, "nightly", namespace=namespace)
        assert row is not None
        return row.suspended

    page.goto(ui.url + "/schedules")
    rows = page.locator("tr[data-schedule=nightly]")
    expect(rows.locator('[data-field="namespace"]')).to_have_text(list(TEAMS))
    page.select_option("#namespace", "team-b")
    page.locator("form.filters button", has_text="Filter").click()
    expect(rows).to_have_count(1)
    rows.locator("a", has_text="nightly").click()
    expect(page).to_have_url(ui.url + "/schedules/nightly?namespace=team-b")
    expect(page.locator("#schedule-namespace")).to_contain_text("team-b")
    expect(page.locator("#schedule-facts a", has_text="refresh@latest")).to_have_attribute(
        "href", "/definitions/refresh?namespace=team-b"
    )

    page.goto(ui.url + "/login?next=" + quote("/schedules/nightly?namespace=team-b", safe=""))
    page.fill("input[name=token]", token)
    page.click("form.login button")
    expect(page).to_have_url(ui.url + "/schedules/nightly?namespace=team-b")
    page.click("#pause")
    expect(page.locator(".note")).to_have_text("paused")
    assert "namespace=team-b" in page.url
    expect(page.locator("#schedule-state")).to_have_text("suspended")
    assert suspended("team-b")
    assert not suspended("team-a")

    page.goto(ui.url + "/schedules")
    states = rows.locator('[data-field="state"]')
    expect(states).to_have_text(["active", "suspended"])

    page.goto(ui.url + "/schedules/nightly?namespace=team-b")
    page.click("#resume")
    expect(page.locator(".note")).to_have_text("resumed")
    assert not suspended("team-b")
    assert not suspended("team-a")

    # No schedule of that name in default: the page without a namespace says so.
    page.goto(ui.url + "/schedules/nightly")
    expect(page.locator("main")).to_contain_text("no schedule nightly")

    # A retry starts its run's definition in its run's namespace (default has no `refresh`;
    # a live worker, since a retry, as a start, wants one that serves the steps).
    cancelled = _start(conn, "team-b", "to-retry")
    cancel_run(conn, cancelled)
    worker = _worker(database_url, tmp_path, conn, "ui-namespace-worker")
    try:
        page.goto(f"{ui.url}/runs/{cancelled}")
        page.click("#retry")
        expect(page.locator(".note")).to_have_text(f"retry of run {cancelled}")
    finally:
        _stop(worker)
    expect(page.locator("#run-namespace")).to_have_text("team-b")
    retried = int(page.locator("#run").get_attribute("data-run") or 0)
    (namespace,) = conn.execute(
        "SELECT namespace FROM rara_runs WHERE id = %s", (retried,)
    ).fetchone() or (None,)
    assert namespace == "team-b"
