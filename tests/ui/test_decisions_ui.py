"""Decisions people can trust (docs/ui.md, "Waits and approvals"), in a real browser against a
real `rara ui`, PostgreSQL and a worker: a rejection and a cancel are confirmed and need a
reason (an empty one is refused by the server, in words); their notes are not green; a person's
token records that person as the decider; a run whose gate was rejected offers no resume; and
at 1280x800 the decision's buttons never cover the evidence."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg import sql

from rara.runs import start_run
from tests.support.definitions import apply
from tests.support.runs import wait_run, waiting_of
from tests.support.ui import UiServer
from tests.support.waiting import wait_until
from tests.support.workers import ThreadWorker

ANA, BO = "ana@example.com", "bo@example.com"
TOKENS = {ANA: "ana-token-0123456789abcdef", BO: "bo-token-0123456789abcdef"}
# Wide and tall evidence: 12 test sets x 16 metrics with long names, wider than 1280 px.
METRICS = {
    f"set_{row:02d}/ndcg_at_10_on_the_legal_set_{column:02d}": 0.7 + column / 1000
    for row in range(12)
    for column in range(16)
}
WIDE: list[dict[str, Any]] = [
    {"key": "evaluate", "capability": "test.echo@1", "input": {"quality": METRICS}},
    {
        "key": "gate",
        "dependsOn": ["evaluate"],
        "approval": {"show": ["evaluate.result.input.quality"], "approvers": [ANA]},
    },
    {"key": "publish", "capability": "test.noop@1", "dependsOn": ["gate"]},
]


@pytest.fixture
def dashboard(
    ui_server: Any, conn: psycopg.Connection[Any], role_url: Any, tmp_path: Path
) -> tuple[UiServer, str]:
    """A dashboard with actions, its token file one line per person, its login (a client)
    in rara_vouch so that it may name them: the server, and the login's name."""
    login_url = role_url("rara_client")
    login = urlsplit(login_url).username or ""
    conn.execute(sql.SQL("GRANT rara_vouch TO {}").format(sql.Identifier(login)))
    tokens = tmp_path / "tokens"
    tokens.write_text("# one person a line\n" + "".join(f"{n} {t}\n" for n, t in TOKENS.items()))
    return ui_server("--no-read-only", "--token-file", str(tokens), url=login_url), login


@pytest.fixture
def narrow(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    opened = context.new_page()
    opened.set_default_timeout(30_000)
    yield opened
    context.close()


def _login(page: Any, ui: UiServer, person: str, then: str) -> None:
    from playwright.sync_api import expect

    page.goto(f"{ui.url}/login?next={then}")
    page.fill("input[name=token]", TOKENS[person])
    page.click("form.login button")
    expect(page).to_have_url(f"{ui.url}{then}")


def _overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return (
        a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and a["y"] < b["y"] + b["height"]
        and b["y"] < a["y"] + a["height"]
    )


def test_a_rejection_is_confirmed_with_a_reason_and_recorded_as_its_person(
    narrow: Any,
    dashboard: tuple[UiServer, str],
    database_url: str,
    conn: psycopg.Connection[Any],
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    ui, login = dashboard
    page = narrow
    apply(conn, "wide", WIDE)
    run_id = start_run(conn, "wide", queue_anyway=True).run_id
    worker = ThreadWorker(database_url, tmp_path).start(conn)
    try:
        wait_until(lambda: waiting_of(conn, run_id) == ["gate"], message="the gate waits")
        _login(page, ui, ANA, f"/runs/{run_id}")
        gate = page.locator("#approval-gate")

        # At 1280x800 the evidence and the buttons do not overlap, the confirmation open too.
        table = gate.locator("table.metric-table").bounding_box()
        approve = gate.locator("button[value=approve]").bounding_box()
        gate.locator(".reject-confirm summary").click()
        reject = gate.locator("button[value=reject]")
        expect(reject).to_be_visible()
        summary = gate.locator(".reject-confirm summary").bounding_box()
        assert table["width"] > 1280  # wide indeed: it scrolls in its own box
        for button in (approve, summary, reject.bounding_box()):
            assert not _overlap(table, button), (table, button)

        # Without a reason: refused by the server, in words, in red; nothing decided.
        reject.click()
        note = page.locator(".note")
        expect(note).to_have_text(
            "reject refused: a rejection needs a reason: the reason field is empty"
        )
        expect(note).to_have_attribute("data-tone", "refused")
        assert conn.execute(
            "SELECT decision FROM rara_approvals WHERE run_id = %s", (run_id,)
        ).fetchone() == (None,)

        # With one: rejected as the person whose token logged in, not as the login.
        gate.locator("textarea[name=reason]").fill("recall fell on the legal set")
        gate.locator(".reject-confirm summary").click()
        gate.locator("button[value=reject]").click()
        expect(note).to_have_text(f"gate rejected by {ANA} via {login}")
        expect(note).to_have_attribute("data-tone", "stopped")
        expect(note).to_have_class(re.compile(r"\bnote-stopped\b"))
        assert note.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(254, 242, 242)"
        assert conn.execute(
            "SELECT decision, decided_by, decided_login, reason FROM rara_approvals"
            " WHERE run_id = %s",
            (run_id,),
        ).fetchone() == ("rejected", f"{ANA} via {login}", login, "recall fell on the legal set")
        wait_run(conn, run_id)
    finally:
        worker.stop()

    # Ended by the rejection: a retry (new evidence) is offered, a resume (the same question
    # with the same evidence) is not, and one posted anyway is refused.
    page.goto(f"{ui.url}/runs/{run_id}")
    expect(page.locator("#retry")).to_be_visible()
    expect(page.locator("#resume")).to_have_count(0)
    expect(page.locator("#no-resume")).to_have_text("no resume: its gate was rejected")
    csrf = page.locator("input[name=csrf]").first.get_attribute("value")
    answer = page.request.post(f"{ui.url}/runs/{run_id}/resume", form={"csrf": csrf})
    assert answer.ok
    page.goto(answer.url)
    expect(page.locator(".note")).to_have_text(
        "resume refused: its approval gate gate was rejected: a resume would ask the same "
        "question again with the same evidence; retry as a new run for new evidence"
    )
    assert conn.execute("SELECT count(*) FROM rara_runs").fetchone() == (1,)


def test_a_cancel_is_confirmed_with_a_reason_kept_with_its_person(
    narrow: Any, dashboard: tuple[UiServer, str], conn: psycopg.Connection[Any]
) -> None:
    from playwright.sync_api import expect

    ui, login = dashboard
    page = narrow
    apply(conn, "slow", [{"key": "nap", "capability": "test.sleep@1"}])
    run_id = start_run(conn, "slow", input={"seconds": 60}, queue_anyway=True).run_id
    _login(page, ui, BO, f"/runs/{run_id}")
    reason = page.locator("#cancel-confirm textarea[name=reason]")
    expect(reason).to_be_hidden()  # one click opens the confirmation, it cancels nothing
    page.click("#cancel")
    expect(reason).to_be_visible()
    expect(reason).to_have_attribute("required", "")
    # The browser asks for the reason; without the browser's check the server refuses too.
    reason.evaluate("e => e.removeAttribute('required')")
    page.click("#cancel-confirmed")
    note = page.locator(".note")
    expect(note).to_have_text("cancel refused: a cancel needs a reason: the reason field is empty")
    expect(note).to_have_attribute("data-tone", "refused")
    assert conn.execute(
        "SELECT cancel_requested FROM rara_runs WHERE id = %s", (run_id,)
    ).fetchone() == (False,)

    page.click("#cancel")
    reason.fill("started with the wrong corpus")
    page.click("#cancel-confirmed")
    expect(note).to_have_text("cancel requested")
    expect(note).to_have_attribute("data-tone", "stopped")
    wait_run(conn, run_id, status="cancelled")
    assert conn.execute("SELECT error FROM rara_runs WHERE id = %s", (run_id,)).fetchone() == (
        {
            "code": "CANCELLED",
            "message": f"cancelled by {BO} via {login}: started with the wrong corpus",
            "cancelled_by": f"{BO} via {login}",
            "reason": "started with the wrong corpus",
        },
    )
    page.goto(f"{ui.url}/runs/{run_id}")
    expect(page.locator(".error-box").first).to_contain_text(
        f"cancelled by {BO} via {login}: started with the wrong corpus"
    )
