"""Runs linked both ways, and "Re-run from here", from the run page in a real browser: a
resumed run says which run it resumes, and the failed run says which runs resumed it; on a
finished run each step re-runs from itself (one new run however often it is submitted) with
every step upstream of it reused; a step the run lacks is refused by name (a read-only
dashboard's: tests/ui/test_resume_ui.py). The worker is a thread of this process."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg

from rara.client import Client
from rara.ui.actions import rerun_key
from tests.support.runs import reused_of, wait_run
from tests.support.ui import UiServer, log_in
from tests.ui.test_resume_ui import _called, _failed_runs, _runs

TOKEN = "t0ken-for-the-rerun-test-0123456789"

# `times` posts of a re-run at once from the page, as a double submit sends them.
POSTS = """async ([path, csrf, step, times]) => {
  const post = () => fetch(path, {method: 'POST', body: new URLSearchParams({csrf, step})})
    .then((r) => [r.status, r.url]);
  return Promise.all(Array.from({length: times}, post));
}"""


def test_resumed_runs_link_both_ways_and_a_step_reruns_from_the_page(
    page: Any,
    ui_server: Any,
    conn: psycopg.Connection[Any],
    thread_worker: Any,
    tmp_path: Path,
    database_url: str,
) -> None:
    from playwright.sync_api import expect

    thread_worker()
    (failed,) = _failed_runs(conn, 1)
    (tmp_path / "token").write_text(TOKEN + "\n")
    ui: UiServer = ui_server("--no-read-only", "--token-file", str(tmp_path / "token"))
    log_in(page, ui, TOKEN, f"/runs/{failed}")
    expect(page.locator("#resumed-by")).to_have_count(0)  # not resumed yet

    resumed = Client(database_url).resume_run(failed).run_id
    wait_run(conn, resumed, status="succeeded")
    page.goto(f"{ui.url}/runs/{failed}")
    link = page.locator(f'#resumed-by a[data-resumed-by="{resumed}"]')
    expect(link).to_have_attribute("href", f"/runs/{resumed}")
    link.click()
    expect(page).to_have_url(f"{ui.url}/runs/{resumed}")
    expect(page.locator("#resumes")).to_have_text(f"run {failed}, from its failure")
    expect(page.locator("#resumes a")).to_have_attribute("href", f"/runs/{failed}")

    # Succeeded, the resumed run re-runs from a step: one new run for a double submit.
    expect(page.locator('tr[data-step="collect"] button.rerun')).to_be_visible()
    csrf = page.locator("form.rerun input[name=csrf]").first.get_attribute("value")
    answers = page.evaluate(POSTS, [f"/runs/{resumed}/rerun", csrf, "index", 2])
    assert [status for status, _ in answers] == [200, 200]
    runs = _runs(conn)
    assert runs[-1][1] == rerun_key(resumed, "index")
    assert len(runs) == 3, runs
    again = runs[-1][0]
    assert {url.split("?")[0] for _, url in answers} == {f"{ui.url}/runs/{again}"}
    wait_run(conn, again, status="succeeded")
    assert _called(again) == ["index"]  # collect was reused, index ran again
    assert reused_of(conn, again)["collect"]["run"] == resumed

    # The button itself, from the first step: both run again.
    page.goto(f"{ui.url}/runs/{resumed}")
    page.locator('tr[data-step="collect"] button.rerun').click()
    expect(page.locator(".note")).to_have_text(
        f"re-run of run {resumed} from step collect, 0 reused"
    )
    first = _runs(conn)[-1][0]
    expect(page).to_have_url(re.compile(rf"/runs/{first}\?note="))
    expect(page.locator("#resumes")).to_have_text(f"run {resumed}, re-run from step collect")
    wait_run(conn, first, status="succeeded")
    assert _called(first) == ["collect", "index"]
    page.goto(f"{ui.url}/runs/{resumed}")
    expect(page.locator("#resumed-by a")).to_have_text([f"run {again}", f"run {first}"])
    expect(page.locator("#resumed-by")).to_contain_text("(from step index)")

    # A step the run lacks: refused, naming it; no run.
    ((status, url),) = page.evaluate(POSTS, [f"/runs/{resumed}/rerun", csrf, "nope", 1])
    assert status == 200
    page.goto(url)
    expect(page.locator(".note")).to_have_text(
        f're-run refused: run {resumed} has no step "nope" to re-run from'
    )
    assert len(_runs(conn)) == 4
