"""A run only a gate, a signal or a timer can move on says so where people look first
(docs/ui.md, "Waiting runs"), in a real browser against a real `rara ui` and PostgreSQL: its
page's header says `waiting` and for what, linking the gate's decision; the runs list says the
same and filters by it; the navigation counts the gates waiting for a decision; and the header
follows the decision live."""

from __future__ import annotations

import re
from typing import Any

import psycopg

from rara import waits
from rara.runs import start_run
from tests.support.definitions import apply
from tests.support.ui import UiServer


def _runs(conn: psycopg.Connection[Any]) -> dict[str, int]:
    apply(
        conn,
        "gated",
        [
            {"key": "release", "approval": {}},
            {"key": "publish", "capability": "test.noop@1", "dependsOn": ["release"]},
        ],
    )
    apply(conn, "signalled", [{"key": "ready", "wait": {"signal": "data-ready"}}])
    apply(
        conn,
        "busy",
        [{"key": "work", "capability": "test.noop@1"}, {"key": "check", "approval": {}}],
    )
    return {
        name: start_run(conn, name, queue_anyway=True).run_id
        for name in ("gated", "signalled", "busy")
    }


def test_a_waiting_run_says_what_it_waits_for_in_the_header_list_and_navigation(
    page: Any, ui_server: Any, conn: psycopg.Connection[Any]
) -> None:
    from playwright.sync_api import expect

    runs = _runs(conn)
    ui: UiServer = ui_server()
    page.goto(f"{ui.url}/runs")
    # Two gates wait for a decision (busy's too: it waits beside a ready step).
    expect(page.locator("#approvals-count")).to_have_text("2")
    gated = page.locator(f'tr[data-run="{runs["gated"]}"]')
    expect(gated.locator(".st")).to_have_text("waiting")
    expect(gated.locator('[data-field="waits-for"]')).to_have_text("for approval of gate release")
    signalled = page.locator(f'tr[data-run="{runs["signalled"]}"]')
    expect(signalled.locator('[data-field="waits-for"]')).to_have_text(
        "for signal data-ready (step ready)"
    )
    busy = page.locator(f'tr[data-run="{runs["busy"]}"]')
    expect(busy.locator(".st")).to_have_text("pending")  # a step is ready: not waiting

    # The filter offers `waiting`, and keeps to the runs that wait.
    page.select_option('select[name="status"]', "waiting")
    page.locator("form.filters button").click()
    expect(page).to_have_url(re.compile(r"status=waiting"))
    expect(page.locator("tr[data-run]")).to_have_count(2)
    expect(page.locator(f'tr[data-run="{runs["busy"]}"]')).to_have_count(0)
    page.goto(f"{ui.url}/runs?status=stuck")
    expect(page.locator(".error-text")).to_have_text(
        "unknown run status 'stuck': use one of pending, running, waiting, paused, succeeded,"
        " failed, cancelled"
    )

    # The run's page: the header says it, the gate a link to its decision.
    page.goto(f"{ui.url}/runs/{runs['gated']}")
    expect(page.locator("#run-status")).to_have_text("waiting")
    expect(page.locator("#run-waits")).to_have_text("for approval of gate release")
    expect(page.locator('#run-waits a[href="#approval-release"]')).to_have_count(1)
    expect(page.locator("#live")).to_have_attribute("data-state", "live")
    # Decided elsewhere (the CLI): the header follows live, and the count drops.
    waits.decide(conn, runs["gated"], "release", approve=True)
    expect(page.locator("#run-status")).to_have_text("running", timeout=15_000)
    expect(page.locator("#run-waits")).to_have_text("")
    page.reload()
    expect(page.locator("#approvals-count")).to_have_text("1")
    # A timer: the header says until when, as every instant (UTC, named).
    apply(conn, "nap", [{"key": "nap", "wait": {"for": "1h"}}])
    napping = start_run(conn, "nap", queue_anyway=True).run_id
    page.goto(f"{ui.url}/runs/{napping}")
    expect(page.locator("#run-waits")).to_contain_text("for timer of step nap until 20")
    expect(page.locator("#run-waits time")).to_have_count(1)
