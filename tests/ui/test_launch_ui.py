"""Start a run from a definition's page, in a real browser: the form has a control per
run-input field its steps' inputSchemas name (type, help text, required marked); a start
no live worker would serve is refused in the CLI's words and offers "queue anyway"; the
input is refused as `rara runs start` refuses it, the form kept as filled in; a double
submit of one form starts one run, under the key made of its nonce; a started run's page
says so in green. A read-only dashboard shows no form and refuses the post."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rara.errors import CapabilityUnavailable, InputInvalid
from rara.runs import check_input
from tests.support.definitions import apply
from tests.support.ui import UiServer, log_in

TOKEN = "t0ken-for-the-launch-test-012345678"
STEPS = [
    {
        "key": "fetch",
        "capability": "test.echo@1",
        "inputSchema": {
            "type": "object",
            "properties": {
                "text": {"type": "string", "description": "what to fetch"},
                "limit": {"type": "integer", "minimum": 1},
            },
            "required": ["text"],
        },
    },
    {
        "key": "index",
        "capability": "test.echo@1",
        "dependsOn": ["fetch"],
        "inputSchema": {
            "properties": {"tags": {"type": "array"}, "strict": {"type": "boolean"}},
        },
    },
]

# `times` posts of the page's form at once, as a double submit sends them.
POSTS = """async ([times]) => {
  const body = new URLSearchParams(new FormData(document.querySelector('form.launch-form')));
  const post = () => fetch(location.pathname, {method: 'POST', body})
    .then((r) => [r.status, r.url]);
  return Promise.all(Array.from({length: times}, post));
}"""


def _runs(conn: psycopg.Connection[Any]) -> list[tuple[int, str | None, Any]]:
    return conn.execute("SELECT id, idempotency_key, input FROM rara_runs ORDER BY id").fetchall()


def test_a_run_starts_from_the_definitions_form(
    page: Any, ui_server: Any, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    apply(conn, "launchable", STEPS)
    (tmp_path / "token").write_text(TOKEN + "\n")
    ui: UiServer = ui_server("--no-read-only", "--token-file", str(tmp_path / "token"))
    log_in(page, ui, TOKEN, "/definitions/launchable")
    expect(page).to_have_url(f"{ui.url}/definitions/launchable")

    fields = page.locator("#launch .launch-field")
    expect(fields).to_have_count(4)
    text = page.locator('.launch-field[data-field="text"]')
    expect(text.locator(".required")).to_have_count(1)
    expect(text.locator(".help")).to_have_text("what to fetch")
    expect(text.locator("input")).to_have_attribute("type", "text")
    limit = page.locator('.launch-field[data-field="limit"]')
    expect(limit.locator("input")).to_have_attribute("step", "1")
    expect(limit.locator(".required")).to_have_count(0)
    expect(page.locator('.launch-field[data-field="tags"] textarea')).to_have_count(1)
    expect(page.locator('.launch-field[data-field="strict"] select')).to_have_count(1)

    # A limit the schema refuses: the words of `rara runs start` (check_input), form kept.
    page.fill('[name="in.text"]', "corpus")
    page.fill('[name="in.limit"]', "0")
    page.fill('[name="in.tags"]', '["a", "b"]')
    page.select_option('[name="in.strict"]', "true")
    page.fill("#launch-raw", '{"extra": 1}')
    page.click("#launch-start")
    wanted = {"extra": 1, "text": "corpus", "limit": 0, "tags": ["a", "b"], "strict": True}
    with pytest.raises(InputInvalid) as cli:
        check_input(conn, "launchable", input=wanted)
    expect(page.locator("#launch-refused")).to_have_text(f"start refused: {cli.value}")
    expect(page.locator('[name="in.limit"]')).to_have_value("0")
    expect(page.locator("#launch-raw")).to_have_value('{"extra": 1}')
    expect(page.locator("#launch-queue-anyway")).to_have_count(0)
    # A field that is not its type, and a raw input that is not an object: named.
    page.fill('[name="in.tags"]', "[not json")
    page.click("#launch-start")
    expect(page.locator("#launch-refused")).to_have_text(
        "start refused: input.tags: not JSON: '[not json'"
    )
    page.fill('[name="in.tags"]', '["a", "b"]')
    page.fill("#launch-raw", "[1]")
    page.click("#launch-start")
    expect(page.locator("#launch-refused")).to_have_text(
        "start refused: the raw JSON input must be a JSON object, got list"
    )
    assert _runs(conn) == []

    # No live worker serves test.echo@1: the CLI's refusal, and "queue anyway" offered.
    page.fill("#launch-raw", '{"extra": 1}')
    page.fill('[name="in.limit"]', "5")
    page.click("#launch-start")
    expect(page.locator("#launch-refused")).to_have_text(
        f"start refused: {CapabilityUnavailable(['test.echo@1'])}"
    )
    assert _runs(conn) == []
    page.check('#launch-queue-anyway input[name="queue_anyway"]')

    # A double submit of the form: one run, under the key of its nonce.
    nonce = page.locator('form.launch-form input[name="nonce"]').get_attribute("value")
    answers = page.evaluate(POSTS, [2])
    assert [status for status, _ in answers] == [200, 200]
    ((run_id, key, run_input),) = _runs(conn)
    assert key == f"rara-ui:launch:{nonce}"
    assert run_input == {**wanted, "limit": 5}
    assert {url.split("?")[0] for _, url in answers} == {f"{ui.url}/runs/{run_id}"}
    page.goto(answers[0][1])
    expect(page.locator(".note")).to_contain_text(f"run {run_id} of launchable@1 started")

    # The page again: a new nonce, so a new form starts a new run.
    page.goto(f"{ui.url}/definitions/launchable")
    assert page.locator('input[name="nonce"]').get_attribute("value") != nonce
    page.fill('[name="in.text"]', "other")
    page.fill("#launch-raw", "")
    page.click("#launch-start")
    page.check('#launch-queue-anyway input[name="queue_anyway"]')
    page.click("#launch-start")
    expect(page.locator(".note")).to_have_attribute("data-tone", "done")
    expect(page).to_have_url(re.compile(r"/runs/\d+\?note="))
    assert _runs(conn)[-1][2] == {"text": "other"}


def test_a_read_only_dashboard_shows_no_launch_form(
    page: Any, ui_server: Any, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    apply(conn, "launchable", STEPS)
    (tmp_path / "token").write_text(TOKEN)
    ui: UiServer = ui_server("--read-only", "--token-file", str(tmp_path / "token"))
    page.goto(f"{ui.url}/definitions/launchable")
    expect(page.locator("#definition-yaml")).to_be_visible()
    expect(page.locator("#launch")).to_have_count(0)
    form = {"csrf": "", "nonce": "n" * 24, "version": "1", "in.text": "x", "queue_anyway": "on"}
    assert page.request.post(f"{ui.url}/definitions/launchable", form=form).status == 403
    assert _runs(conn) == []


def test_a_run_starts_in_the_namespace_of_the_definitions_page(
    page: Any, ui_server: Any, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    apply(conn, "launchable", STEPS)  # the default namespace's, not the one started
    apply(conn, "launchable", STEPS[:1], namespace="team-a")
    (tmp_path / "token").write_text(TOKEN)
    ui: UiServer = ui_server("--no-read-only", "--token-file", str(tmp_path / "token"))
    log_in(page, ui, TOKEN, "/definitions/launchable?namespace=team-a")
    expect(page.locator("#launch .launch-field")).to_have_count(2)  # team-a's one step's
    page.fill('[name="in.text"]', "theirs")
    page.click("#launch-start")
    page.check('#launch-queue-anyway input[name="queue_anyway"]')
    page.click("#launch-start")
    expect(page.locator(".note")).to_have_attribute("data-tone", "done")
    started = conn.execute("SELECT namespace, input FROM rara_runs").fetchall()
    assert started == [("team-a", {"text": "theirs"})]
