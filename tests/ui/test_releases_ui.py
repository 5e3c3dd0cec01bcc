"""Releases on the dashboard (docs/ui.md, "Releases"), in a real browser against a real `rara
ui`, PostgreSQL and a worker: the list of names with their current version, per namespace; a
release's page with its run, its gate's decision, its artifacts (linked to their pages) and
its history of promotes and rollbacks; and "promoted as NAME@N" on the run that became it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg

from rara import waits
from rara.client import Client
from rara.runs import start_run
from tests.support.definitions import apply
from tests.support.runs import wait_run, waiting_of
from tests.support.ui import UiServer
from tests.support.waiting import wait_until
from tests.support.workers import ThreadWorker

MODEL = [
    {"key": "evaluate", "capability": "test.echo@1", "input": {"quality": {"ndcg": 0.71}}},
    {"key": "collect", "capability": "test.produce@1", "input": {"text": "corpus"}},
    {
        "key": "gate",
        "dependsOn": ["evaluate", "collect"],
        "approval": {"show": ["evaluate.result.input.quality", "collect"]},
    },
]


def _approved_run(conn: psycopg.Connection[Any], reason: str) -> int:
    run_id = start_run(conn, "model", queue_anyway=True).run_id
    wait_until(lambda: waiting_of(conn, run_id) == ["gate"], message="the gate waits")
    waits.decide(conn, run_id, "gate", approve=True, reason=reason)
    wait_run(conn, run_id, status="succeeded")
    return run_id


def test_releases_are_listed_and_each_tells_its_story(
    page: Any, ui_server: Any, database_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    apply(conn, "model", MODEL)
    apply(conn, "other", [{"key": "collect", "capability": "test.produce@1"}], namespace="team-a")
    worker = ThreadWorker(database_url, tmp_path).start(conn)
    try:
        first = _approved_run(conn, "ndcg 0.71, clear of the baseline")
        second = _approved_run(conn, "second look")
        other = start_run(conn, "other", input={"text": "x"}, namespace="team-a").run_id
        wait_run(conn, other, status="succeeded")
    finally:
        worker.stop()
    client = Client(database_url)
    assert client.promote_release("model", first, note="the first").number == 1
    assert client.promote_release("model", second).number == 2
    client.rollback_release("model", reason="recall fell on the legal set")
    Client(database_url, namespace="team-a").promote_release("other", other)
    found = conn.execute(
        "SELECT current_user, a.digest FROM rara_step_artifacts a"
        " JOIN rara_steps s ON s.id = a.step_id WHERE s.run_id = %s AND s.key = 'collect'",
        (first,),
    ).fetchone()
    assert found is not None
    login, digest = found
    ui: UiServer = ui_server()

    # The list, from the navigation: every namespace's names, each with its current release.
    page.goto(f"{ui.url}/runs")
    page.locator("header nav").get_by_role("link", name="Releases").click()
    expect(page).to_have_url(f"{ui.url}/releases")
    model = page.locator('tr[data-release="model"][data-namespace="default"]')
    expect(model.locator("[data-field=current]")).to_have_text("model@1 (newest 2)")
    expect(model.locator("[data-field=promoted]")).to_contain_text("UTC · ")
    expect(model.locator("[data-field=promoted]")).to_contain_text(f"by {login}")
    expect(model.locator("[data-field=last-move]")).to_contain_text(f"rolled back by {login}")
    expect(model.get_by_role("link", name="model@1")).to_have_count(1)
    expect(page.locator('tr[data-release="other"][data-namespace="team-a"]')).to_be_visible()
    # Namespace-aware, as the other lists.
    page.goto(f"{ui.url}/releases?namespace=team-a")
    expect(page.locator("tr[data-release]")).to_have_count(1)
    expect(page.locator('tr[data-release="other"]')).to_be_visible()
    assert page.goto(f"{ui.url}/releases?namespace=Not_A_Namespace").status == 400

    # A release's page: the current one, its run, its gate's decision, its artifacts.
    page.goto(f"{ui.url}/releases")
    model.get_by_role("link", name="model", exact=True).click()
    expect(page.locator("#release-name")).to_have_text("model@1")
    expect(page.locator("#release-state")).to_have_text("current")
    expect(page.locator("#release-note")).to_have_text("the first")
    expect(page.locator("#source-run a")).to_have_attribute("href", f"/runs/{first}")
    gate = page.locator('table.gates tr[data-gate="gate"]')
    expect(gate.locator("[data-field=decision]")).to_have_text("approved")
    expect(gate.locator("[data-field=decided-by]")).to_have_text(login)
    expect(gate.locator("[data-field=reason]")).to_have_text("ndcg 0.71, clear of the baseline")
    artifact = page.locator(f'table.release-artifacts tr[data-digest="{digest}"]')
    expect(artifact).to_contain_text("corpus.txt")
    # The history, newest first: who moved the name, when and why.
    moves = page.locator("table.release-moves tbody tr")
    expect(moves).to_have_count(3)
    expect(moves.nth(0)).to_contain_text("rolled back model@2 → model@1")
    expect(moves.nth(0).locator("[data-field=reason]")).to_have_text("recall fell on the legal set")
    expect(moves.nth(0)).to_contain_text(login)
    expect(moves.nth(1)).to_contain_text("promoted model@2")
    expect(page.locator("table.release-numbers tbody tr")).to_have_count(2)
    # Its digest is linked to the artifact's page.
    artifact.locator("td.digest a").click()
    expect(page).to_have_url(f"{ui.url}/artifacts/{digest}")
    expect(page.locator("#digest")).to_have_text(digest)

    # Another release of the name, and one that does not exist.
    page.goto(f"{ui.url}/releases/model?number=2")
    expect(page.locator("#release-name")).to_have_text("model@2")
    expect(page.locator("#release-state")).to_have_text("not current")
    assert page.goto(f"{ui.url}/releases/model?number=9").status == 404
    assert page.goto(f"{ui.url}/releases/model?number=x").status == 400
    assert page.goto(f"{ui.url}/releases/other").status == 404  # it is team-a's
    page.goto(f"{ui.url}/releases/other?namespace=team-a")
    expect(page.locator("#no-gate")).to_have_text(f"run {other} had no approval gate")

    # The run that became a release says so, linked.
    page.goto(f"{ui.url}/runs/{second}")
    expect(page.locator("#promoted-as")).to_have_text("promoted as model@2")
    page.goto(f"{ui.url}/runs/{first}")
    expect(page.locator("#promoted-as")).to_have_text("promoted as model@1 (current)")
    page.locator("#promoted-as a").click()
    expect(page).to_have_url(re.compile(r"/releases/model\?number=1$"))
    expect(page.locator("#release-name")).to_have_text("model@1")
    page.goto(f"{ui.url}/runs/{other}")
    expect(page.locator("#promoted-as a")).to_have_attribute(
        "href", "/releases/other?namespace=team-a&number=1"
    )
