"""Pause and resume a run from its page, in a real browser: the buttons are actions like
Cancel (a server that is not read-only, a logged-in identity, the form's CSRF token), the
status badge reads `paused`, and the note says what the database did."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

from rara.runs import start_run
from tests.support.definitions import apply
from tests.support.ui import UiServer

TOKEN = "t0ken-for-the-pause-test-0123456789"


def test_pause_and_resume_from_the_run_page(
    page: Any, ui_server: Any, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    (tmp_path / "token").write_text(TOKEN + "\n")
    steps = [{"key": "a", "capability": "test.noop@1"},
             {"key": "b", "capability": "test.noop@1", "dependsOn": ["a"]}]  # fmt: skip
    apply(conn, "pausable", steps)
    run_id = start_run(conn, "pausable", queue_anyway=True).run_id  # no worker: a stays ready
    ui: UiServer = ui_server("--no-read-only", "--token-file", str(tmp_path / "token"))
    page.goto(f"{ui.url}/runs/{run_id}")
    expect(page.locator("#pause")).to_have_count(0)  # anonymous: no actions
    # Without the form's token, the action is refused (the session's token is not a cookie's).
    refused = page.request.post(f"{ui.url}/runs/{run_id}/pause", form={"csrf": "forged"})
    assert refused.status in (401, 403)
    page.goto(f"{ui.url}/login?next=/runs/{run_id}")
    page.fill("input[name=token]", TOKEN)
    page.click("form.login button")
    expect(page).to_have_url(f"{ui.url}/runs/{run_id}")
    expect(page.locator("#unpause")).to_have_count(0)
    page.click("#pause")
    expect(page.locator(".note")).to_have_text(f"run {run_id} paused: 1 step held")
    expect(page.locator("#run-status")).to_have_text("paused")
    expect(page.locator("#run-status")).to_have_class("st st-paused")
    expect(page.locator("#pause")).to_have_count(0)
    assert conn.execute(
        "SELECT paused_at IS NOT NULL FROM rara_runs WHERE id = %s", (run_id,)
    ).fetchone() == (True,)
    forged = page.request.post(f"{ui.url}/runs/{run_id}/unpause", form={"csrf": "forged"})
    assert forged.status == 403
    page.goto(f"{ui.url}/runs?status=paused")
    expect(page.locator(f'a[href="/runs/{run_id}"]').first).to_be_visible()
    page.goto(f"{ui.url}/runs/{run_id}")
    page.click("#unpause")
    expect(page.locator(".note")).to_have_text(f"run {run_id} resumed: 1 step released")
    expect(page.locator("#run-status")).to_have_text("pending")
    expect(page.locator("#pause")).to_have_count(1)
    page.click("#cancel")  # opens the confirmation, which asks why (rara.ui.decisions)
    page.locator("#cancel-confirm textarea[name=reason]").fill("paused by mistake")
    page.click("#cancel-confirmed")
    expect(page.locator("#run-status")).to_have_text("cancelled")
    expect(page.locator("#pause")).to_have_count(0)
    gone = page.request.post(f"{ui.url}/runs/424242/pause", form={"csrf": "forged"})
    assert gone.status == 403  # the token first: nothing is said of a run to a forged form
