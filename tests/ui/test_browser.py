"""The dashboard in a real browser: live DAG, cancel from the page, verified download."""

from __future__ import annotations

import hashlib
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rara.runs import start_run
from tests.support.definitions import apply
from tests.support.runs import attempts_of, wait_run
from tests.support.ui import UiServer
from tests.support.waiting import wait_until
from tests.support.workers import WorkerProcess

PIPELINE = [
    {"key": "collect", "capability": "test.produce@1", "executor": "inprocess"},
    {
        "key": "train",
        "capability": "test.chatty@1",
        "executor": "inprocess",
        "dependsOn": ["collect"],
    },
    {
        "key": "index",
        "capability": "test.consume@1",
        "executor": "inprocess",
        "dependsOn": ["collect"],
    },
    {
        "key": "evaluate",
        "capability": "test.fail@1",
        "executor": "inprocess",
        "dependsOn": ["train", "index"],
        "retry": {"initialDelay": "300ms"},
    },
]


def _worker(
    database_url: str, tmp_path: Path, conn: psycopg.Connection[Any], name: str
) -> WorkerProcess:
    proc = WorkerProcess(
        database_url, name, tmp_path / f"{name}.log", artifact_root=tmp_path / "artifacts"
    )

    def registered() -> bool:
        assert proc.proc.poll() is None, f"worker exited:\n{proc.output()}"
        return (
            conn.execute("SELECT 1 FROM rara_workers WHERE id = %s", (name,)).fetchone() is not None
        )

    wait_until(registered, timeout=60, message="worker registered")
    return proc


def _stop(proc: WorkerProcess) -> None:
    if proc.proc.poll() is None:
        proc.signal(15)
        proc.wait(20)


def _run_through(
    database_url: str,
    tmp_path: Path,
    conn: psycopg.Connection[Any],
    runs: list[int],
    status: str,
    name: str = "ui-worker",
) -> None:
    """Runs ``runs`` to their end with a worker of their own, each ending ``status``."""
    worker = _worker(database_url, tmp_path, conn, name)
    try:
        for run_id in runs:
            wait_run(conn, run_id, status=status)
    finally:
        _stop(worker)


def test_run_appears_and_its_dag_goes_green_live(
    page: Any, ui_server: Any, database_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    apply(conn, "rag-refresh", PIPELINE)
    ui: UiServer = ui_server("--artifacts", str(tmp_path / "artifacts"))
    page.goto(ui.url + "/runs")
    expect(page.locator("body")).to_have_attribute("data-live", "open")
    page.evaluate("window.__sameDocument = true")

    run_id = start_run(
        conn,
        "rag-refresh",
        queue_anyway=True,
        idempotency_key="nightly-1",
        input={"text": "a corpus", "calls": 40, "seconds": 2.0, "fail": 1},
    ).run_id
    row = page.locator(f'tr[data-run="{run_id}"]')
    expect(row).to_be_visible()  # appeared without a reload
    expect(row).to_contain_text("nightly-1")
    assert page.evaluate("window.__sameDocument") is True

    row.get_by_role("link", name=str(run_id), exact=True).click()
    expect(page.locator("#run-status")).to_have_text("pending")
    expect(page.locator("body")).to_have_attribute("data-live", "open")
    page.evaluate("window.__sameDocument = true")
    expect(page.locator('g.node[data-step="collect"]')).to_have_class(re.compile("st-ready"))

    worker = _worker(database_url, tmp_path, conn, "ui-worker-1")
    try:
        for key in ("collect", "train", "index", "evaluate"):
            expect(page.locator(f'g.node[data-step="{key}"]')).to_have_class(
                re.compile("st-succeeded"), timeout=60_000
            )
        expect(page.locator("#run-status")).to_have_text("succeeded")
        wait_run(conn, run_id, status="succeeded")
    finally:
        _stop(worker)
    assert page.evaluate("window.__sameDocument") is True  # live, never reloaded
    # The sections re-rendered live: metrics chart of train's progress, the artifact.
    expect(page.locator("figure.chart canvas").first).to_be_visible()
    expect(page.locator("figure.chart figcaption").first).to_contain_text("train · items")
    # evaluate failed once (retryable, FLAKY) and then succeeded: two bars on its timeline row.
    expect(page.locator("rect.tl-bar.out-failed")).to_have_count(1)
    expect(page.locator("rect.tl-bar.out-succeeded")).to_have_count(4)
    link = page.locator("a.download").first
    expect(link).to_be_visible()
    # The download's bytes are the digest's.
    digest = conn.execute("SELECT digest FROM rara_step_artifacts LIMIT 1").fetchone()[0]
    with page.expect_download() as info:
        page.locator(f'a.download[href^="/artifacts/{digest}/download"]').first.click()
    data = Path(info.value.path()).read_bytes()
    assert "sha256:" + hashlib.sha256(data).hexdigest() == digest
    assert data == b"a corpus"

    # Lineage: produced by collect, read by index (train depends on collect, reads nothing).
    page.goto(f"{ui.url}/artifacts/{digest}")
    expect(page.locator("#digest")).to_have_text(digest)
    expect(page.get_by_role("cell", name="index", exact=True)).to_be_visible()


COALESCED = """async () => {
  const until = async (ok) => { while (!ok()) await new Promise((r) => setTimeout(r, 5)); };
  let runs = 0;
  let release = null;
  const refresh = window.rara.coalesced(
    () => { runs += 1; return new Promise((r) => { release = r; }); }, 10);
  refresh(); refresh();  // joined: one run
  await until(() => runs === 1);
  refresh(); refresh();  // while it runs: one more run, after it
  release();
  await until(() => runs === 2);
  const second = runs;
  release();
  await new Promise((r) => setTimeout(r, 100));
  return [second, runs];
}"""


def test_a_change_during_a_refresh_is_refreshed_after_it(page: Any, ui_server: Any) -> None:
    """The run page re-renders its sections when the live state says a step changed; a change
    that arrives while a re-render is in flight (the run's last step ending) gets a re-render
    of its own after it, never dropped (a run once showed 3 of its 4 succeeded attempts)."""
    ui: UiServer = ui_server()
    page.goto(ui.url + "/runs")
    assert page.evaluate(COALESCED) == [2, 2]


def test_cancel_from_the_page_reaches_the_running_step(
    page: Any, ui_server: Any, database_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    token = "t0ken-for-the-ui-test-0123456789"
    (tmp_path / "token").write_text(token + "\n")
    apply(conn, "slow", [{"key": "nap", "capability": "test.sleep@1", "executor": "inprocess"}])
    ui: UiServer = ui_server("--no-read-only", "--token-file", str(tmp_path / "token"))
    worker = _worker(database_url, tmp_path, conn, "ui-worker-2")
    try:
        run_id = start_run(conn, "slow", input={"seconds": 120}).run_id
        wait_until(
            lambda: conn.execute(
                "SELECT status = 'running' FROM rara_steps WHERE run_id = %s", (run_id,)
            ).fetchone()[0],
            message="step running",
        )
        page.goto(f"{ui.url}/runs/{run_id}")
        expect(page.locator("#cancel")).to_have_count(0)  # anonymous: no actions
        page.goto(f"{ui.url}/login?next=/runs/{run_id}")
        page.fill("input[name=token]", "wrong")
        page.click("form.login button")
        expect(page.locator(".error-text")).to_have_text("wrong token")
        page.fill("input[name=token]", token)
        page.click("form.login button")
        expect(page).to_have_url(f"{ui.url}/runs/{run_id}")
        expect(page.locator('g.node[data-step="nap"]')).to_have_class(re.compile("st-running"))
        page.click("#cancel")  # a confirmation with its reason, then the cancel
        page.fill("#cancel-confirm textarea[name=reason]", "the step hangs")
        page.click("#cancel-confirmed")
        expect(page.locator(".note")).to_have_text("cancel requested")
        expect(page.locator("#run-status")).to_have_text("cancelled", timeout=30_000)
        expect(page.locator('g.node[data-step="nap"]')).to_have_class(re.compile("st-cancelled"))
        wait_run(conn, run_id, status="cancelled")
        assert [a["outcome"] for a in attempts_of(conn, run_id)] == ["cancelled"]
        # Retry: a new run of the same version, with a key derived from the first.
        page.click("#retry")
        expect(page.locator(".note")).to_contain_text(f"retry of run {run_id}")
        key = conn.execute(
            "SELECT idempotency_key FROM rara_runs WHERE id <> %s", (run_id,)
        ).fetchone()[0]
        assert key == f"rara-ui:retry-of:{run_id}"
    finally:
        _stop(worker)


@pytest.mark.parametrize("read_only", [True, False])
def test_actions_need_auth_and_csrf(
    ui_server: Any, conn: psycopg.Connection[Any], tmp_path: Path, read_only: bool
) -> None:
    apply(conn, "slow", [{"key": "nap", "capability": "test.sleep@1", "executor": "inprocess"}])
    run_id = start_run(conn, "slow", input={"seconds": 120}, queue_anyway=True).run_id
    (tmp_path / "token").write_text("x" * 32)
    ui = ui_server(
        "--read-only" if read_only else "--no-read-only", "--token-file", str(tmp_path / "token")
    )

    def post(headers: dict[str, str], body: bytes) -> int:
        request = urllib.request.Request(
            f"{ui.url}/runs/{run_id}/cancel", data=body, headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as exc:
            return exc.code

    form = {"content-type": "application/x-www-form-urlencoded"}
    assert post(form, b"csrf=") in (401, 403)  # anonymous
    bearer = {**form, "authorization": "Bearer " + "x" * 32}
    assert post(bearer, b"csrf=forged") == 403  # authenticated, no valid CSRF token
    status = conn.execute(
        "SELECT cancel_requested FROM rara_runs WHERE id = %s", (run_id,)
    ).fetchone()[0]
    assert status is False


def test_without_server_sent_events_the_page_polls(
    page: Any, ui_server: Any, conn: psycopg.Connection[Any]
) -> None:
    """A browser (or a buffering proxy) without EventSource: the run page polls its state."""
    from playwright.sync_api import expect

    from rara.runs import cancel_run

    apply(conn, "slow", [{"key": "nap", "capability": "test.sleep@1", "executor": "inprocess"}])
    run_id = start_run(conn, "slow", input={"seconds": 60}, queue_anyway=True).run_id
    ui: UiServer = ui_server()
    page.add_init_script("delete window.EventSource")
    page.goto(f"{ui.url}/runs/{run_id}")
    expect(page.locator("#run-status")).to_have_text("pending")
    page.evaluate("window.__sameDocument = true")
    cancel_run(conn, run_id)
    expect(page.locator("#run-status")).to_have_text("cancelled", timeout=15_000)
    expect(page.locator('g.node[data-step="nap"]')).to_have_class(re.compile("st-cancelled"))
    assert page.evaluate("window.__sameDocument") is True


def test_an_upstream_header_identifies_and_csrf_binds_to_it(
    ui_server: Any, conn: psycopg.Connection[Any]
) -> None:
    """Behind an authenticating proxy (--auth-header): its header is the identity; the form's
    token is bound to that user and to our origin."""
    apply(conn, "slow", [{"key": "nap", "capability": "test.sleep@1", "executor": "inprocess"}])
    run_id = start_run(conn, "slow", input={"seconds": 60}, queue_anyway=True).run_id
    ui: UiServer = ui_server("--no-read-only", "--auth-header", "X-Forwarded-User")

    def call(path: str, headers: dict[str, str], body: bytes | None = None) -> tuple[int, str]:
        request = urllib.request.Request(
            ui.url + path, data=body, headers=headers, method="POST" if body is not None else "GET"
        )
        opener = urllib.request.build_opener(_NoRedirect)
        try:
            with opener.open(request) as answer:
                return int(answer.status), answer.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    status, html = call(f"/runs/{run_id}", {"X-Forwarded-User": "alice"})
    assert status == 200
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert match is not None, "no cancel form for an identified user"
    form = {"content-type": "application/x-www-form-urlencoded"}
    body = f"csrf={match.group(1)}&reason=stuck".encode()
    assert call(f"/runs/{run_id}/cancel", form, body)[0] == 401  # no header: nobody
    bob = {**form, "X-Forwarded-User": "bob"}
    assert call(f"/runs/{run_id}/cancel", bob, body)[0] == 403  # alice's token, bob's post
    alice = {**form, "X-Forwarded-User": "alice"}
    evil = {**alice, "Origin": "http://evil.example"}
    assert call(f"/runs/{run_id}/cancel", evil, body)[0] == 403  # another origin
    assert not conn.execute(
        "SELECT cancel_requested FROM rara_runs WHERE id = %s", (run_id,)
    ).fetchone()[0]
    assert call(f"/runs/{run_id}/cancel", alice, body)[0] == 303
    wait_run(conn, run_id, status="cancelled")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None
