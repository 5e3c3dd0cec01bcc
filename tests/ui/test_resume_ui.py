"""Resume from failure from the run page, in a real browser: a logged-in user's "Resume from
failure" makes one new run (however often it is submitted) in which the step that succeeded is
reused, with its badge, and the failed step runs; a run with nothing to resume shows no button,
and a resume posted anyway comes back to its page with the resume's own refusal. A read-only
dashboard has no button (nor a re-run's) and refuses the post. The worker is a thread of
this process, so that tests.worker.handlers.FAILING can make a step fail in the first run
and not in the resume."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg

from rara.runs import start_run
from rara.ui.actions import resume_key
from tests.support.definitions import apply
from tests.support.runs import attempts_of, wait_run
from tests.support.ui import UiServer
from tests.worker.handlers import FAILING, TALLY

TOKEN = "t0ken-for-the-resume-test-01234567"
# `index` fails for good while FAILING names it; `collect` writes the artifact it reads.
STEPS = [
    {"key": "collect", "capability": "test.tally@1", "executor": "inprocess"},
    {
        "key": "index",
        "capability": "test.flaky@1",
        "executor": "inprocess",
        "dependsOn": ["collect"],
        "retry": {"maxAttempts": 1},
    },
]
INPUT = {"text": "corpus"}

# `times` form posts at once from the page, as a double submit sends them: where each ended.
POSTS = """async ([path, csrf, times]) => {
  const post = () => fetch(path, {method: 'POST', body: new URLSearchParams({csrf})})
    .then((r) => [r.status, r.url]);
  return Promise.all(Array.from({length: times}, post));
}"""


def _failed_runs(conn: psycopg.Connection[Any], count: int) -> list[int]:
    apply(conn, "refresh", STEPS)
    FAILING.add("index")
    try:
        made = [
            start_run(conn, "refresh", input=INPUT, queue_anyway=True).run_id for _ in range(count)
        ]
        for run_id in made:
            wait_run(conn, run_id, status="failed")
    finally:
        FAILING.discard("index")
    return made


def _called(run_id: int) -> list[str]:
    """The steps of ``run_id`` whose handler ran (test.tally records each call's key)."""
    return sorted(k.split(":", 1)[1] for k in TALLY if k.split(":", 1)[0] == str(run_id))


def _runs(conn: psycopg.Connection[Any]) -> list[tuple[int, str | None]]:
    return conn.execute("SELECT id, idempotency_key FROM rara_runs ORDER BY id").fetchall()


def test_resume_from_the_page_reuses_what_succeeded_once(
    page: Any, ui_server: Any, conn: psycopg.Connection[Any], thread_worker: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    thread_worker()
    failed, other = _failed_runs(conn, 2)
    (tmp_path / "token").write_text(TOKEN + "\n")
    ui: UiServer = ui_server("--no-read-only", "--token-file", str(tmp_path / "token"))
    page.goto(f"{ui.url}/login?next=/runs/{failed}")
    page.fill("input[name=token]", TOKEN)
    page.click("form.login button")
    expect(page).to_have_url(f"{ui.url}/runs/{failed}")
    expect(page.locator("#retry")).to_be_visible()  # the plain retry stays, beside it

    csrf = page.locator('form[action$="/resume"] input[name=csrf]').get_attribute("value")
    forged = page.evaluate(POSTS, [f"/runs/{failed}/resume", "forged", 2])
    assert [status for status, _ in forged] == [403, 403]
    assert len(_runs(conn)) == 2

    # A double click: one run, under the key derived from run N. (Chromium folds the second
    # submit into the first; the two posts at once below are the double submit it did not.)
    posts: list[str] = []
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
    page.locator("#resume").dblclick()
    expect(page.locator(".note")).to_contain_text(f"resume of run {failed}, 1 step reused")
    runs = _runs(conn)
    assert runs[:2] == [(failed, None), (other, None)]
    assert runs[2:] == [(runs[-1][0], resume_key(failed))], runs
    resumed = runs[-1][0]
    expect(page).to_have_url(re.compile(rf"/runs/{resumed}\?note="))
    assert set(posts) == {f"{ui.url}/runs/{failed}/resume"}, posts

    # Two posts at once, racing to make the resume of the other run: one makes it, the
    # other's answer is that same run.
    answers = page.evaluate(POSTS, [f"/runs/{other}/resume", csrf, 2])
    assert [status for status, _ in answers] == [200, 200]
    urls = sorted(url for _, url in answers)
    assert len(_runs(conn)) == 4
    other_resumed = _runs(conn)[-1][0]
    assert urls == [
        f"{ui.url}/runs/{other_resumed}?note="
        + quote(f"resume of run {other}, 1 step reused (already started)")
        + "&tone=info",
        f"{ui.url}/runs/{other_resumed}?note="
        + quote(f"resume of run {other}, 1 step reused")
        + "&tone=done",
    ]

    # The new run: collect reused from run N (its badge), index run again, and it succeeded.
    wait_run(conn, resumed, status="succeeded")
    assert _called(resumed) == ["index"]
    assert {a["key"] for a in attempts_of(conn, resumed)} == {"index"}
    page.goto(f"{ui.url}/runs/{resumed}")
    expect(page.locator("#run-status")).to_have_text("succeeded")
    badge = page.locator('table.steps tr[data-step="collect"] .reused')
    expect(badge).to_have_text(f"resumed from run {failed}")
    expect(badge).to_have_attribute("href", f"/runs/{failed}")
    index = page.locator('table.steps tr[data-step="index"]')
    expect(index.locator('[data-field="status"]')).to_have_text("succeeded")
    expect(index.locator(".reused")).to_have_count(0)
    expect(page.locator("#reused-count")).to_have_text(
        f"1 step did not run: 1 resumed from run {failed}"
    )

    # Succeeded: nothing to resume, no button; a post anyway is the resume's refusal, shown.
    expect(page.locator("#cancel")).to_have_count(0)
    expect(page.locator("#resume")).to_have_count(0)
    expect(page.locator("#retry")).to_have_count(0)
    ((status, url),) = page.evaluate(POSTS, [f"/runs/{resumed}/resume", csrf, 1])
    assert status == 200
    page.goto(url)
    expect(page.locator(".note")).to_have_text(
        f"resume refused: run {resumed} is succeeded: only a failed or cancelled run resumes"
    )
    expect(page).to_have_url(re.compile(rf"/runs/{resumed}\?note="))
    assert len(_runs(conn)) == 4


def test_a_read_only_dashboard_neither_shows_nor_takes_a_resume(
    page: Any, ui_server: Any, conn: psycopg.Connection[Any], thread_worker: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    thread_worker()
    (failed,) = _failed_runs(conn, 1)
    (tmp_path / "token").write_text(TOKEN)
    ui: UiServer = ui_server("--read-only", "--token-file", str(tmp_path / "token"))
    page.goto(f"{ui.url}/runs/{failed}")
    expect(page.locator("#run-status")).to_have_text("failed")
    expect(page.locator("#resume")).to_have_count(0)
    expect(page.locator("#retry")).to_have_count(0)
    expect(page.locator("button.rerun")).to_have_count(0)
    hint = page.locator("#read-only").get_attribute("title")
    assert "resume from failure" in hint
    assert "--no-read-only" in hint

    # Refused before anything else, even for the token's holder: no run.
    url = f"{ui.url}/runs/{failed}/resume"
    assert page.request.post(url, form={"csrf": ""}, max_redirects=0).status == 403
    bearer = {"authorization": f"Bearer {TOKEN}"}
    assert page.request.post(url, form={"csrf": ""}, headers=bearer, max_redirects=0).status == 403
    rerun = {"csrf": "", "step": "collect"}
    assert page.request.post(f"{ui.url}/runs/{failed}/rerun", form=rerun).status == 403
    assert len(_runs(conn)) == 1
