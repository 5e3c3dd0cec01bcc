"""The run page in a real browser: what it counts, how it keeps time and stays live, what it
shows of every result, error and event, and a training curve growing while the page is open."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg

from rara.runs import start_run
from tests.support.definitions import apply
from tests.support.runs import wait_run
from tests.support.ui import UiServer
from tests.support.waiting import wait_until
from tests.ui.test_browser import _stop, _worker


def test_one_step_count_on_the_runs_list_and_the_run_page(
    page: Any, ui_server: Any, database_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """A map step's children are the run's steps: two steps and a map of three are five, on
    the runs list as on the run page."""
    from playwright.sync_api import expect

    apply(
        conn,
        "mapped",
        [
            {"key": "split", "capability": "test.echo@1", "executor": "inprocess"},
            {
                "key": "shard",
                "capability": "test.echo@1",
                "executor": "inprocess",
                "dependsOn": ["split"],
                "map": {"over": "input.items"},
            },
        ],
    )
    run_id = start_run(conn, "mapped", input={"items": [1, 2, 3]}, queue_anyway=True).run_id
    worker = _worker(database_url, tmp_path, conn, "ui-count-worker")
    try:
        wait_run(conn, run_id, status="succeeded")
    finally:
        _stop(worker)
    ui: UiServer = ui_server()
    page.goto(ui.url + "/runs")
    expect(page.locator(f'tr[data-run="{run_id}"] [data-field="steps"]')).to_have_text("5/5")
    page.goto(f"{ui.url}/runs/{run_id}")
    expect(page.locator('#counts [data-count="succeeded"]')).to_have_text("5")
    expect(page.locator('#counts [data-count="total"]')).to_have_text("5")
    expect(page.locator("#counts")).to_contain_text("map step's children count as steps")


def test_live_refresh_keeps_counts_ticks_and_names_its_clock(
    page: Any, ui_server: Any, database_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """A step ending re-renders the page's sections live: the Steps line is never left blank;
    "Took" counts on in the page; a live badge; every instant in UTC with a relative time; a
    time axis under the timeline."""
    from playwright.sync_api import expect

    apply(
        conn,
        "two-naps",
        [
            {"key": "quick", "capability": "test.sleep@1", "executor": "inprocess"},
            {
                "key": "long",
                "capability": "test.sleep@1",
                "executor": "inprocess",
                "dependsOn": ["quick"],
            },
        ],
    )
    run_id = start_run(conn, "two-naps", input={"seconds": 4}, queue_anyway=True).run_id
    ui: UiServer = ui_server()
    page.goto(f"{ui.url}/runs/{run_id}")
    expect(page.locator("#live")).to_have_text("live")
    page.evaluate("window.__sameDocument = true")
    expect(page.locator('#counts [data-count="open"]')).to_have_text("2")

    worker = _worker(database_url, tmp_path, conn, "ui-tick-worker")
    try:
        # quick ended: the sections were re-rendered live, the counts kept and updated.
        expect(page.locator('g.node[data-step="long"]')).to_have_class(
            re.compile("st-running"), timeout=30_000
        )
        expect(page.locator('#counts [data-count="succeeded"]')).to_have_text("1")
        expect(page.locator("#counts")).to_contain_text("1 of 2 succeeded")
        # The run's "Took" ticks while it runs, with no reload.
        took = page.locator(".facts .took")
        first = took.text_content()
        wait_until(lambda: took.text_content() != first, timeout=10, message="Took ticks")
        wait_run(conn, run_id, status="succeeded", timeout=60)
    finally:
        _stop(worker)
    expect(page.locator("#run-status")).to_have_text("succeeded")
    expect(page.locator("#counts")).to_contain_text("2 of 2 succeeded")
    expect(page.locator("#counts")).not_to_be_empty()
    expect(page.locator("#live")).to_contain_text("nothing more to follow")
    assert page.evaluate("window.__sameDocument") is True
    created = page.locator(".facts time")
    expect(created).to_contain_text(re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC · \d+ s ago"))
    ticks = page.locator("svg.timeline text.tl-axis")
    assert ticks.count() >= 2
    assert re.fullmatch(r"\d\d:\d\d:\d\d(\.\d)?", ticks.first.text_content() or "")


def test_every_result_error_and_event_of_a_finished_run(
    page: Any, ui_server: Any, database_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """After the run succeeded: a long result whole (expanded, highlighted), the error of the
    attempt that failed before the retry succeeded with its cause and traceback, and each
    step's events as the CLI lists them."""
    from playwright.sync_api import expect

    apply(
        conn,
        "whole-story",
        [
            {"key": "echo", "capability": "test.echo@1", "executor": "inprocess"},
            {"key": "train", "capability": "test.chatty@1", "executor": "inprocess"},
            {
                "key": "evaluate",
                "capability": "test.fail@1",
                "executor": "inprocess",
                "dependsOn": ["echo", "train"],
                "retry": {"initialDelay": "100ms"},
            },
        ],
    )
    blob = "x" * 300 + "-<b>THE-END</b>"
    run_id = start_run(
        conn,
        "whole-story",
        input={"blob": blob, "calls": 7, "seconds": 0.2, "fail": 1},
        queue_anyway=True,
    ).run_id
    worker = _worker(database_url, tmp_path, conn, "ui-story-worker")
    try:
        wait_run(conn, run_id, status="succeeded", timeout=60)
    finally:
        _stop(worker)
    ui: UiServer = ui_server()
    page.goto(f"{ui.url}/runs/{run_id}")

    result = page.locator('tr[data-step="echo"] details.result')
    expect(result.locator("pre.json")).to_be_hidden()
    result.locator("summary").click()
    expect(result.locator("pre.json")).to_contain_text(blob)  # whole, not cut
    expect(result.locator("pre.json .j-key", has_text='"blob"')).to_have_count(1)
    expect(result.locator("pre.json .j-str", has_text=blob)).to_have_count(1)

    failed = page.locator('details.error-detail[data-error="evaluate#1"]')
    expect(failed).to_contain_text("FLAKY")
    expect(failed).to_contain_text("flaky on attempt 1")
    expect(failed.locator(".cause")).to_have_text("caused by KeyError: 'root cause'")
    expect(failed.locator("pre.traceback")).to_contain_text("Traceback (most recent call last)")
    expect(failed.locator("pre.traceback")).to_contain_text('raise KeyError("root cause")')

    events = conn.execute(
        "SELECT count(*) FROM rara_events e JOIN rara_steps s ON s.id = e.step_id "
        "WHERE s.run_id = %s AND s.key = 'train'",
        (run_id,),
    ).fetchone()[0]
    assert events >= 1
    # The step's events, read when asked for: its link opens them on the run page.
    history = page.locator('details.step-events[data-events="train"]')
    expect(history).to_have_count(0)
    page.locator('tr[data-step="train"] a.events-link').click()
    expect(history).to_have_attribute("open", "")
    expect(history.locator("tbody tr")).to_have_count(events)
    expect(history.locator("tbody tr").last).to_contain_text("item 7")
    # …and on a page of their own, the step's opened by the link's anchor.
    page.goto(f"{ui.url}/runs/{run_id}/events#events-train")
    expect(page.locator('details.step-events[data-events="train"]')).to_have_attribute("open", "")


def test_a_training_curve_grows_live_and_a_resume_is_marked(
    page: Any, ui_server: Any, database_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """A real worker runs a training-like step (its own step counter, a loss, a constant lr, a
    checkpoint per step) whose first attempt fails at step 6: the loss chart appears and
    grows while the page is open, against the step counter, the second attempt continues the
    curve from its checkpoint with the resume marked, no attempt drawn in the failure colour;
    the constant and single-value metrics are rows of a table, the loss first."""
    from playwright.sync_api import expect

    apply(
        conn,
        "adapt",
        [
            {
                "key": "adapt",
                "capability": "test.train@1",
                "executor": "inprocess",
                "retry": {"initialDelay": "100ms"},
            }
        ],
    )
    run_id = start_run(
        conn, "adapt", input={"steps": 14, "crash_at": 6, "seconds": 0.4}, queue_anyway=True
    ).run_id
    ui: UiServer = ui_server()
    page.goto(f"{ui.url}/runs/{run_id}")
    expect(page.locator("#no-metrics")).to_be_visible()
    page.evaluate("window.__sameDocument = true")
    loss = page.locator('figure.chart[data-chart="adapt:loss"]')
    worker = _worker(database_url, tmp_path, conn, "ui-train-worker")
    try:
        expect(loss).to_be_visible(timeout=30_000)
        first = int(loss.get_attribute("data-points") or 0)
        # Grows while the attempt runs: more points, with no reload and no status change.
        wait_until(
            lambda: (
                int(loss.get_attribute("data-points") or 0) > first
                and conn.execute(
                    "SELECT status = 'running' FROM rara_steps WHERE run_id = %s", (run_id,)
                ).fetchone()[0]
            ),
            timeout=30,
            message="the loss curve grows while the step runs",
        )
        expect(loss).to_have_attribute("data-marks", "attempt 2 from step 6", timeout=30_000)
        wait_run(conn, run_id, status="succeeded", timeout=60)
    finally:
        _stop(worker)
    expect(page.locator("#run-status")).to_have_text("succeeded")
    assert page.evaluate("window.__sameDocument") is True
    expect(page.locator("#charts figure.chart").first).to_have_attribute("data-chart", "adapt:loss")
    # The badge turns on the live state at once; the page's sections, the final chart with
    # them, are fetched again just after (run.js refresh): wait for its last point.
    expect(loss).to_have_attribute("data-points", "14", timeout=30_000)
    plot = loss.evaluate(
        "f => ({x: f.uplot.data[0], series: f.uplot.series.slice(1).map("
        "s => [s.label, s.stroke()]), values: f.uplot.data.slice(1)})"
    )
    assert plot["x"] == list(range(1, 15))  # the step counter, not wall time: one curve
    assert [label for label, _ in plot["series"]] == ["attempt 1", "attempt 2"]
    assert all(colour.lower() != "#dc2626" for _, colour in plot["series"])
    first_attempt, second_attempt = plot["values"]
    assert [v is not None for v in first_attempt] == [True] * 5 + [False] * 9
    assert [v is not None for v in second_attempt] == [False] * 5 + [True] * 9
    expect(page.locator('figure.chart[data-chart="adapt:lr"]')).to_have_count(0)
    values = page.locator('section.single-values[data-values-step="adapt"]')
    expect(values.locator('[data-metric="before/recall"] dd')).to_have_text("0.5")
    expect(values.locator('[data-metric="lr"] dd')).to_have_text("0.001")
