"""The dashboard's smaller pages in the browser: the Fleet page live with worker ids on one
line and the remote executors each worker reaches, the definition page within a 1366 px
window with whole axis labels and a diff that names the step, substring search with a note
when nothing matches, the read-only hint, downloads named after the artifact, and a favicon."""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

import psycopg

from rara.runs import start_run
from tests.support.definitions import apply
from tests.support.executors import executor_process, free_address
from tests.support.runs import wait_run
from tests.support.ui import UiServer
from tests.support.workers import WorkerProcess
from tests.ui.test_browser import _run_through, _stop, _worker

LONG_ID = "ui-worker-with-a-long-id-0123456789abcdef0123456789"

ONE_LINE = """(el) => {
  const range = document.createRange();
  range.selectNodeContents(el);
  return new Set(Array.from(range.getClientRects()).map((r) => Math.round(r.top))).size;
}"""


def test_the_fleet_page_follows_workers_live(
    page: Any, ui_server: Any, database_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    ui: UiServer = ui_server()
    page.goto(ui.url + "/fleet")
    expect(page.locator("body")).to_have_attribute("data-live", "open")
    expect(page.locator("tbody[data-table=workers]")).to_have_text("no workers")
    page.evaluate("window.__sameDocument = true")
    worker = _worker(database_url, tmp_path, conn, LONG_ID)
    try:
        cell = page.locator("tbody[data-table=workers] td.worker")
        expect(cell).to_have_text(LONG_ID)  # appeared without a reload
        expect(page.locator("tbody[data-table=workers]")).to_contain_text("live")
        assert cell.evaluate(ONE_LINE) == 1, "the worker id wraps"
    finally:
        _stop(worker)
    expect(page.locator("tbody[data-table=workers]")).to_contain_text("stopped")
    assert page.evaluate("window.__sameDocument") is True


def test_the_fleet_page_lists_the_executors_workers_reach(
    page: Any, ui_server: Any, database_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """A real worker dialing a real Python executor on loopback: the Fleet page names the
    endpoint, what it serves (from its Capabilities answer), its version and the worker; when
    the executor stops, the row says so without a reload."""
    from playwright.sync_api import expect

    address = free_address()
    ui: UiServer = ui_server()
    page.goto(ui.url + "/fleet")
    expect(page.locator("body")).to_have_attribute("data-live", "open")
    executors = page.locator("tbody[data-table=executors]")
    expect(executors).to_have_text("no remote executors")
    page.evaluate("window.__sameDocument = true")
    with executor_process(address, tmp_path / "artifacts") as executor:
        worker = WorkerProcess(
            database_url, "ui-gpu-worker", tmp_path / "w.log", executor_endpoint=address
        )
        try:
            row = executors.locator("tr", has_text=address)
            expect(row).to_contain_text("test.hang@1", timeout=30_000)
            expect(row).to_contain_text("test.echo@1")
            expect(row).to_contain_text("rara-executor/")
            expect(row).to_contain_text("ui-gpu-worker")
            expect(row.locator(".st")).to_have_text("live")
            # What the row holds: the address dialled and the Capabilities answer, no more.
            (stored,) = conn.execute(
                "SELECT executors FROM rara_workers WHERE id = 'ui-gpu-worker'"
            ).fetchall()
            assert [set(e) for e in stored[0]] == [{"endpoint", "capabilities", "version", "live"}]
            executor.terminate()
            executor.wait(30)
            expect(row.locator(".st")).to_have_text("down", timeout=30_000)
        finally:
            _stop(worker)
    expect(executors).to_have_text("no remote executors")
    assert page.evaluate("window.__sameDocument") is True


STEPS = [
    {"key": "embed", "capability": "test.report@1", "executor": "inprocess"},
    {"key": "score", "capability": "test.noop@1", "executor": "inprocess", "dependsOn": ["embed"]},
]


def test_the_definition_page_fits_and_names_what_changed(
    page: Any, ui_server: Any, database_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    apply(conn, "token-count", STEPS)
    changed = [STEPS[0], {**STEPS[1], "retry": {"maxAttempts": 7}}]
    apply(conn, "token-count", changed)
    runs = [
        start_run(conn, "token-count", input={"report": {"tokens": n}}, queue_anyway=True).run_id
        for n in (1_400_000, 1_250_000)
    ]
    _run_through(database_url, tmp_path, conn, runs, "succeeded")
    ui: UiServer = ui_server()
    page.set_viewport_size({"width": 1366, "height": 800})
    page.goto(f"{ui.url}/definitions/token-count?a=1&b=2")
    expect(page.locator("#diff-steps")).to_have_text("Step score changed")
    expect(page.locator("figure.chart canvas").first).to_be_visible()
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 1366, f"the page is {width} px wide"
    labels = page.locator("figure.chart").first.evaluate("(f) => f.uplot.axes[1]._values")
    assert labels, "no y labels"
    assert all(label.endswith("M") for label in labels), labels


def test_search_read_only_hint_download_name_and_favicon(
    page: Any, ui_server: Any, database_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    for name in ("nightly-refresh", "weekly-refresh", "backfill"):
        apply(
            conn, name, [{"key": "make", "capability": "test.produce@1", "executor": "inprocess"}]
        )
    run_id = start_run(
        conn, "weekly-refresh", input={"text": "bytes"}, queue_anyway=True, idempotency_key="wk-48"
    ).run_id
    start_run(conn, "backfill", input={"text": "x"}, queue_anyway=True)
    worker = _worker(database_url, tmp_path, conn, "ui-worker-search")
    try:
        wait_run(conn, run_id, status="succeeded")
    finally:
        _stop(worker)
    ui: UiServer = ui_server("--artifacts", str(tmp_path / "artifacts"))
    missing: list[str] = []
    page.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)

    page.goto(ui.url + "/definitions")
    page.fill("input[name=q]", "REFRESH")
    page.click("form.filters button")
    expect(page.locator("table.list tbody tr")).to_have_count(2)
    page.fill("input[name=q]", "nothing-like-it")
    page.click("form.filters button")
    expect(page.locator("#no-match")).to_contain_text("no definition's name contains")

    page.goto(ui.url + "/runs")
    page.fill("input[name=q]", "weekly")
    page.click("form.filters button")
    expect(page.locator("tr[data-run]")).to_have_count(1)
    page.fill("input[name=q]", "wk-4")  # the idempotency key
    page.click("form.filters button")
    expect(page.locator(f'tr[data-run="{run_id}"]')).to_be_visible()
    page.fill("input[name=q]", "zzz")
    page.click("form.filters button")
    expect(page.locator("#no-match")).to_contain_text("no run matches “zzz”")

    hint = page.locator("#read-only").get_attribute("title")
    assert "--no-read-only" in hint
    assert "--token-file" in hint

    page.goto(f"{ui.url}/runs/{run_id}")
    with page.expect_download() as info:
        page.locator("a.download").first.click()
    assert info.value.suggested_filename == "corpus.txt"
    assert Path(info.value.path()).read_bytes() == b"bytes"

    with urllib.request.urlopen(ui.url + "/favicon.ico") as answer:
        assert answer.status == 200
        assert answer.headers["content-type"].startswith("image/svg+xml")
    assert missing == [], missing
