"""The run page's Logs in a real browser: what a running step writes appears while it runs,
escaped, and the rest without a reload once it goes on (docs/ui.md, "Step logs")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

from rara.runs import start_run
from tests.support.definitions import apply
from tests.support.ui import UiServer
from tests.worker.log_handlers import LOG_HANDLERS

HOSTILE = "<b>bold?</b> & <script>window.__injected = 1</script>"


def test_the_run_page_shows_each_attempts_log_live(
    page: Any,
    ui_server: Any,
    conn: psycopg.Connection[Any],
    thread_worker: Any,
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    release = tmp_path / "release"
    apply(conn, "live", [{"key": "w", "capability": "test.log.until@1"}])
    thread_worker(handlers=[LOG_HANDLERS])
    run_id = start_run(
        conn, "live", input={"release": str(release), "say": HOSTILE}, queue_anyway=True
    ).run_id
    ui: UiServer = ui_server()
    page.goto(f"{ui.url}/runs/{run_id}")
    expect(page.locator("body")).to_have_attribute("data-live", "open")
    page.evaluate("window.__sameDocument = true")
    page.locator("#logs > summary").click()
    log = page.locator('#step-logs details[data-log="w#1"] pre.log')
    expect(log).to_contain_text("w started")
    expect(log).to_contain_text(HOSTILE)  # as text: escaped, never markup
    expect(page.locator("#step-logs pre.log b")).to_have_count(0)
    assert page.evaluate("window.__injected") is None
    release.touch()
    expect(log).to_contain_text("w done", timeout=20_000)  # live: no reload
    expect(page.locator("#run-status")).to_have_text("succeeded")
    assert page.evaluate("window.__sameDocument") is True
