"""Steps that did not run, on the run page in a real browser: a step reused from the step cache
and one reused by a resume carry a badge in the steps table, on the DAG node and on the
timeline, naming the run they came from and linking to it while it exists; the run's facts
count them. A real worker process makes the cache hit; the resume is `rara.runs.resume_run`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import class_row

from rara.pg.queries import one
from rara.pg.retention import PruneCounts
from rara.runs import resume_run, start_run
from tests.support.definitions import apply
from tests.support.runs import wait_run
from tests.support.ui import UiServer
from tests.ui.test_browser import _stop, _worker

# `a` opts in to the cache; `b` fails its only attempt, so every run of this input fails and
# can be resumed.
STEPS = [
    {"key": "a", "capability": "test.echo@1", "executor": "inprocess", "cache": {}},
    {
        "key": "b",
        "capability": "test.fail@1",
        "executor": "inprocess",
        "dependsOn": ["a"],
        "retry": {"maxAttempts": 1},
    },
]
INPUT = {"fail": 1, "text": "same bytes"}


def test_cached_and_resumed_steps_say_where_they_came_from(
    page: Any, ui_server: Any, database_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    apply(conn, "reusing", STEPS)
    worker = _worker(database_url, tmp_path, conn, "ui-reuse-worker")
    try:
        first = start_run(conn, "reusing", input=INPUT, queue_anyway=True).run_id
        wait_run(conn, first, status="failed")
        cached = start_run(conn, "reusing", input=INPUT, queue_anyway=True).run_id
        wait_run(conn, cached, status="failed")
        resumed = resume_run(conn, first).run_id
        wait_run(conn, resumed, status="failed")
    finally:
        _stop(worker)
    ui: UiServer = ui_server()

    # The cache hit: a badge in the table linking to the run that computed it.
    page.goto(f"{ui.url}/runs/{cached}")
    badge = page.locator('table.steps tr[data-step="a"] .reused')
    expect(badge).to_have_text(f"cached from run {first}")
    expect(badge).to_have_attribute("href", f"/runs/{first}")
    expect(badge).to_have_attribute("title", f"cached: reused from run {first} step a attempt 1")
    expect(page.locator('table.steps tr[data-step="b"] .reused')).to_have_count(0)
    # On the DAG node, a pill of its own (the node itself links to its table row).
    pill = page.locator(f'#dag-reused a[href="/runs/{first}"] .dag-reused')
    expect(pill).to_have_attribute("data-reused-step", "a")
    expect(pill.locator("text")).to_have_text("cached")
    expect(page.locator('g.node[data-step="a"] title')).to_contain_text(f"reused from run {first}")
    # On the timeline, a mark after its one short attempt (a hit takes a lease).
    mark = page.locator('svg.timeline .tl-reused[data-reused-step="a"]')
    expect(mark.locator("text")).to_have_text(f"cached from run {first}")
    expect(page.locator("#reused-count")).to_have_text("1 step did not run: 1 from the step cache")

    # The resume: the same, as "resumed", and the facts name the run it resumed.
    page.goto(f"{ui.url}/runs/{resumed}")
    badge = page.locator('table.steps tr[data-step="a"] .reused')
    expect(badge).to_have_text(f"resumed from run {first}")
    expect(badge).to_have_attribute("data-reused", "resume")
    expect(page.locator('#dag-reused .dag-reused[data-reused-step="a"] text')).to_have_text(
        "resumed"
    )
    # No attempt in this run: its row on the timeline is the mark alone.
    expect(page.locator('svg.timeline .tl-reused[data-reused-step="a"] text')).to_have_text(
        f"resumed from run {first}"
    )
    assert page.locator("svg.timeline .tl-label").all_text_contents()[:2] == ["a", "b"]
    expect(page.locator("#reused-count")).to_have_text(
        f"1 step did not run: 1 resumed from run {first}"
    )
    page.locator(f'#reused-count a[href="/runs/{first}"]').click()
    expect(page).to_have_url(f"{ui.url}/runs/{first}")
    expect(page.locator("table.steps .reused")).to_have_count(0)  # it ran both its steps
    expect(page.locator("#reused-count")).to_have_count(0)

    # The run they came from pruned: the badge stays, as text that says so.
    pruned = one(conn, "run_prune_delete_many", class_row(PruneCounts), run_ids=[first])
    assert pruned is not None
    assert pruned.runs == 1
    page.goto(f"{ui.url}/runs/{cached}")
    badge = page.locator('table.steps tr[data-step="a"] .reused')
    expect(badge).to_have_text(f"cached from run {first}")
    expect(badge).not_to_have_attribute("href", f"/runs/{first}")
    expect(badge).to_have_attribute(
        "title", f"cached: reused from run {first} step a attempt 1 (that run was pruned)"
    )
    expect(page.locator("#dag-reused a")).to_have_count(0)
    page.goto(f"{ui.url}/runs/{resumed}")
    expect(page.locator("#reused-count")).to_contain_text(f"resumed from run {first} (pruned)")
