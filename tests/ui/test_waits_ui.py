"""Waits and approvals on the dashboard (docs/ui.md, "Waits and approvals"), in a real browser
against a real `rara ui`, PostgreSQL and a worker: a waiting step is shown as waiting, with
what it waits for, and follows its end live; an approval shows its frozen evidence beside the
decision, which is recorded as the person the UI authenticated, once; the database's refusals
come back as the page's note; a read-only dashboard offers no decision."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg
from psycopg import sql

from rara import waits
from rara.runs import start_run
from tests.support.definitions import apply
from tests.support.runs import steps_of, wait_run, waiting_of
from tests.support.ui import UiServer
from tests.support.waiting import wait_until
from tests.support.workers import ThreadWorker

HEADER = "X-Forwarded-User"
# Approvers and users that are no database role (roles are cluster-wide, and a superuser login
# is a member of every one): only the identity the UI vouches for can match them.
ANA, BO = "ana@example.com", "bo@example.com"


@contextmanager
def _worker(database_url: str, tmp_path: Path, conn: psycopg.Connection[Any]) -> Iterator[None]:
    worker = ThreadWorker(database_url, tmp_path).start(conn)
    try:
        yield
    finally:
        worker.stop()


def _as(browser: Any, user: str | None) -> Any:
    """A page of a browser context of its own, as ``user`` (the proxy's header)."""
    context = browser.new_context(
        viewport={"width": 1360, "height": 900},
        extra_http_headers={HEADER: user} if user else {},
    )
    opened = context.new_page()
    opened.set_default_timeout(30_000)
    return opened


def test_a_waiting_step_is_shown_waiting_and_follows_its_signal_live(
    page: Any, ui_server: Any, database_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    apply(
        conn,
        "signalled",
        [
            {"key": "a", "capability": "test.noop@1"},
            {"key": "ready", "dependsOn": ["a"], "wait": {"signal": "go"}},
            {"key": "b", "capability": "test.echo@1", "dependsOn": ["ready"]},
            {"key": "settle", "wait": {"for": "1h"}},
        ],
    )
    run_id = start_run(conn, "signalled", queue_anyway=True).run_id
    ui: UiServer = ui_server()
    with _worker(database_url, tmp_path, conn):
        page.goto(f"{ui.url}/runs/{run_id}")
        ready = page.locator('g.node[data-step="ready"]')
        # a runs first: "ready" begins to wait live, when a has succeeded.
        expect(ready).to_have_class(re.compile(r"\bst-waiting\b"), timeout=30_000)
        assert waiting_of(conn, run_id) == ["ready", "settle"]
        page.evaluate("window.__sameDocument = true")
        row = page.locator('tr[data-step="ready"]')
        expect(row.locator("[data-field=status]")).to_have_text("waiting")
        expect(row.locator(".st-waiting")).to_have_count(1)
        expect(row.locator("[data-field=waits-for]")).to_have_text("signal go")
        timer = page.locator('tr[data-step="settle"] [data-field=waits-for]')
        expect(timer).to_contain_text(re.compile(r"^until \d{4}-\d\d-\d\d .* UTC · in 59 min"))
        expect(page.locator('g.node[data-step="settle"] title')).to_contain_text(
            re.compile(r"settle: waiting\nwaits until \d{4}-")
        )
        expect(ready.locator("title")).to_have_text(
            "ready: waiting\nwaits for signal go\ndependsOn: a"
        )
        # The polling fallback's state says the same (its steps: ui_live_step_list).
        with urllib.request.urlopen(f"{ui.url}/runs/{run_id}/state") as answer:
            state = json.load(answer)
        statuses = {s["key"]: s["status"] for s in state["steps"]}
        assert statuses == {"a": "succeeded", "ready": "waiting", "b": "blocked",
                            "settle": "waiting"}  # fmt: skip
        # Its stored status stays blocked: "waiting" is the row in rara_waits.
        stored = {s["key"]: s["status"] for s in steps_of(conn, run_id)}
        assert stored["ready"] == "blocked"

        assert waits.signal(conn, run_id, "go").accepted
        expect(ready).to_have_class(re.compile(r"\bst-succeeded\b"), timeout=30_000)
        expect(page.locator('g.node[data-step="b"]')).to_have_class(
            re.compile(r"\bst-succeeded\b"), timeout=30_000
        )
        expect(row.locator("[data-field=status]")).to_have_text("succeeded")
        expect(row.locator("[data-field=waits-for]")).to_have_count(0)
        expect(ready.locator("title")).to_have_text("ready: succeeded\ndependsOn: a")
        # The timer still waits, and nothing else runs: the run waits with it (its phase).
        expect(page.locator('g.node[data-step="settle"]')).to_have_class(
            re.compile(r"\bst-waiting\b")
        )
        expect(page.locator("#run-status")).to_have_text("waiting")
        expect(page.locator("#run-waits")).to_contain_text("for timer of step settle until")
    assert page.evaluate("window.__sameDocument") is True  # live, never reloaded


GATED = [
    {"key": "evaluate", "capability": "test.echo@1", "input": {"quality": {"ndcg": 0.71}}},
    {"key": "collect", "capability": "test.produce@1", "input": {"text": "corpus"}},
    {
        "key": "gate",
        "dependsOn": ["evaluate", "collect"],
        "approval": {
            "show": ["evaluate.result.input.quality", "collect"],
            "approvers": [ANA],
            "timeout": "72h",
        },
    },
    {"key": "publish", "capability": "test.noop@1", "dependsOn": ["gate"]},
]


def _approval(conn: psycopg.Connection[Any], run_id: int) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT decision, decided_by, decided_login, reason FROM rara_approvals"
        " WHERE run_id = %s AND step_key = 'gate'",
        (run_id,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def test_an_approval_is_decided_beside_its_evidence_once(
    browser: Any,
    ui_server: Any,
    database_url: str,
    conn: psycopg.Connection[Any],
    tmp_path: Path,
    role_url: Any,
) -> None:
    from playwright.sync_api import expect

    apply(conn, "gated", GATED)
    run_id = start_run(conn, "gated", queue_anyway=True).run_id
    read_only: UiServer = ui_server()
    # The dashboard's own login, as docs/ui.md makes it: a client that may vouch.
    login_url = role_url("rara_client")
    login = urlsplit(login_url).username or ""
    conn.execute(sql.SQL("GRANT rara_vouch TO {}").format(sql.Identifier(login)))
    ui: UiServer = ui_server("--no-read-only", "--auth-header", HEADER, url=login_url)
    with _worker(database_url, tmp_path, conn):
        wait_until(lambda: waiting_of(conn, run_id) == ["gate"], message="the gate waits")
        digest = conn.execute(
            "SELECT a.digest FROM rara_step_artifacts a JOIN rara_steps s ON s.id = a.step_id"
            " WHERE s.run_id = %s AND s.key = 'collect'",
            (run_id,),
        ).fetchone()[0]

        # Read-only: the evidence, and no decision to make.
        viewer = _as(browser, None)
        viewer.goto(f"{read_only.url}/runs/{run_id}")
        expect(viewer.locator("#approval-gate")).to_be_visible()
        expect(viewer.locator("#approval-gate [data-field=decision]")).to_have_text(
            "waiting for a decision"
        )
        expect(viewer.locator("form.decide")).to_have_count(0)
        expect(viewer.get_by_role("button", name="Approve")).to_have_count(0)
        expect(viewer.locator("#read-only")).to_be_visible()
        viewer.context.close()

        # The list of approvals waiting, linking to the gate on its run's page.
        ana = _as(browser, ANA)
        ana.goto(f"{ui.url}/approvals")
        listed = ana.locator(f'tr[data-approval="{run_id}/gate"]')
        expect(listed.locator("[data-field=state]")).to_have_text("waiting")
        expect(listed).to_contain_text(ANA)
        listed.get_by_role("link", name="gate").click()
        expect(ana).to_have_url(f"{ui.url}/runs/{run_id}#approval-gate")

        gate = ana.locator("#approval-gate")
        # The step waits for it, linking to it.
        status = ana.locator('tr[data-step="gate"]')
        expect(status.locator("[data-field=status]")).to_have_text("waiting")
        expect(status.locator("[data-field=waits-for]")).to_contain_text(
            re.compile(r"^approval, by .* UTC · in 2 d")
        )
        expect(status.locator("[data-field=waits-for] a")).to_have_attribute(
            "href", "#approval-gate"
        )
        # The evidence as it was frozen: an object of metrics as a table (rara.evidence), any
        # other value as highlighted JSON; the artifact's digest.
        quality = gate.locator(
            'details.shown[data-show="evaluate.result.input.quality"] table.metric-table'
        )
        expect(quality.locator("thead th.mono")).to_have_text(["ndcg"])
        expect(quality.locator('tr[data-row="quality"] td.num')).to_have_text(["0.710"])
        collected = gate.locator('details.shown[data-show="collect"] pre')
        expect(collected).to_contain_text(digest)
        expect(collected.locator("span.j-key", has_text='"digest"')).to_have_count(1)
        artifact = gate.locator(f'table.evidence-artifacts tr[data-digest="{digest}"]')
        expect(artifact).to_contain_text("corpus.txt")
        expect(artifact.locator("td.digest a")).to_have_text(digest)
        expect(artifact.locator("td.digest a")).to_have_attribute("href", f"/artifacts/{digest}")
        expect(gate.locator("[data-field=approvers]")).to_have_text(ANA)
        expect(gate.locator("[data-field=deadline]")).to_contain_text("UTC")

        # Someone who is not an approver: refused, in the database's words.
        bo = _as(browser, BO)
        bo.goto(f"{ui.url}/runs/{run_id}")
        bo.fill("#approval-gate textarea[name=reason]", "fine by me")
        bo.click("#approval-gate button[value=approve]")
        expect(bo.locator(".note")).to_have_text(
            f"approve refused: run {run_id}: {BO} via {login} may not decide approval gate"
            f" (its approvers: {ANA})"
        )
        assert _approval(conn, run_id)[0] is None
        bo.context.close()

        # Ana in a second tab, writing a rejection while the first tab approves.
        second = ana.context.new_page()
        second.goto(f"{ui.url}/runs/{run_id}")
        second.fill("#approval-gate textarea[name=reason]", "recall fell on the legal set")

        ana.fill("#approval-gate textarea[name=reason]", "ndcg +0.03, interval clear of 0")
        ana.click("#approval-gate button[value=approve]")
        expect(ana.locator(".note")).to_have_text(f"gate approved by {ANA} via {login}")
        expect(ana.locator(".note")).to_have_attribute("data-tone", "done")  # good news: green
        assert _approval(conn, run_id) == (
            "approved", f"{ANA} via {login}", login, "ndcg +0.03, interval clear of 0"
        )  # fmt: skip
        # The decision beside its evidence; the run goes on, live.
        gate = ana.locator("#approval-gate")
        expect(gate.locator("[data-field=decision]")).to_have_text("approved")
        expect(gate.locator("[data-field=decided-by]")).to_have_text(f"{ANA} via {login}")
        expect(gate.locator("[data-field=decided-at]")).to_contain_text("UTC")
        expect(gate.locator("[data-field=reason]")).to_have_text("ndcg +0.03, interval clear of 0")
        expect(gate.locator("form.decide")).to_have_count(0)
        expect(ana.locator("#run-status")).to_have_text("succeeded", timeout=30_000)
        expect(ana.locator('g.node[data-step="publish"]')).to_have_class(
            re.compile(r"\bst-succeeded\b")
        )
        wait_run(conn, run_id, status="succeeded")

        # The second tab kept its form while the reason was being written; its rejection now is
        # refused, naming who decided first.
        expect(second.locator('g.node[data-step="gate"]')).to_have_class(
            re.compile(r"\bst-succeeded\b"), timeout=30_000
        )
        second.click("#approval-gate .reject-confirm summary")
        second.click("#approval-gate button[value=reject]")
        expect(second.locator(".note")).to_have_text(
            re.compile(
                rf"^reject refused: run {run_id}: approval gate was approved by {ANA} via {login}"
                " at "
            )
        )
        assert _approval(conn, run_id)[0] == "approved"

        # Decided: no longer in the waiting list; in the list of every approval.
        ana.goto(f"{ui.url}/approvals")
        expect(ana.locator(f'tr[data-approval="{run_id}/gate"]')).to_have_count(0)
        expect(ana.locator("#no-match")).to_have_text("nothing waits for a decision")
        ana.goto(f"{ui.url}/approvals?all=1")
        decided = ana.locator(f'tr[data-approval="{run_id}/gate"]')
        expect(decided.locator("[data-field=state]")).to_have_text("approved")
        expect(decided).to_contain_text(f"{ANA}")
        ana.context.close()


def test_under_user_roles_approvals_are_the_users_and_approvers_may_be_roles(
    ui_server: Any, database_url: str, conn: psycopg.Connection[Any], role_url: Any
) -> None:
    """`--user-roles`: /approvals lists the user's namespaces' gates only, and a decision runs
    as the user's role, so a gate whose approvers name a role is decided by its members."""
    suffix = uuid.uuid4().hex[:8]
    managers, ua, ub = (f"{n}_{suffix}" for n in ("managers", "ua", "ub"))
    login_url = role_url("rara_reader")
    login = urlsplit(login_url).username or ""
    runs: dict[str, int] = {}
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute("SELECT rara_namespace_isolation(true)")
        admin.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(managers)))
        for user, namespace, groups in ((ua, "team-a", [managers]), (ub, "team-b", [])):
            admin.execute(
                sql.SQL("CREATE ROLE {} NOLOGIN IN ROLE {}").format(
                    sql.Identifier(user),
                    sql.SQL(", ").join(map(sql.Identifier, ["rara_client", *groups])),
                )
            )
            admin.execute(
                "INSERT INTO rara_namespace_access (role, namespace) VALUES (%s, %s)",
                (user, namespace),
            )
            admin.execute(sql.SQL("GRANT {} TO {}").format(*map(sql.Identifier, (user, login))))
            gate = {"key": "gate", "approval": {"approvers": [managers]}}
            apply(conn, "gated", [gate], namespace=namespace)
            runs[namespace] = start_run(
                conn, "gated", queue_anyway=True, namespace=namespace
            ).run_id
    try:
        ui: UiServer = ui_server(
            "--no-read-only", "--auth-header", HEADER, "--user-roles", url=login_url
        )
        a, b = runs["team-a"], runs["team-b"]
        status, listed = _call(ui, "/approvals", ua)
        assert status == 200
        assert f'data-approval="{a}/gate"' in listed
        assert f'data-approval="{b}/gate"' not in listed
        status, listed = _call(ui, "/approvals", ub)
        assert f'data-approval="{b}/gate"' in listed
        assert f'data-approval="{a}/gate"' not in listed

        # ub, not one of managers, in its own namespace: the database refuses, naming them.
        status, answer = _decide(ui, b, ub)
        assert status == 303
        assert f"{ub} may not decide approval gate (its approvers: {managers})" in answer
        # Another namespace's gate: as if it did not exist.
        assert _decide(ui, a, ub, csrf_from=b)[0] == 404
        # ua, a member of managers: decided as ua, through ua's role.
        status, answer = _decide(ui, a, ua)
        assert (status, answer) == (303, f"gate approved by {ua}")
        row = conn.execute(
            "SELECT decided_by, decided_login FROM rara_approvals WHERE run_id = %s", (a,)
        ).fetchone()
        assert tuple(row or ()) == (ua, ua)
        wait_run(conn, a, status="succeeded")
    finally:
        with psycopg.connect(database_url, autocommit=True) as admin:
            for role in (ua, ub, managers):
                admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_a_run_the_dashboard_retries_is_its_users_and_four_eyes_holds(
    ui_server: Any, conn: psycopg.Connection[Any], role_url: Any
) -> None:
    """The dashboard's login vouches for its header's user as a retried run's starter too
    (rara.identity), so that user may not also approve the run's last gate; another may."""
    apply(conn, "release", [{"key": "gate", "approval": {}}])
    first = start_run(conn, "release", queue_anyway=True).run_id
    assert conn.execute("SELECT rara_run_cancel(%s)", (first,)).fetchone() == (True,)
    login_url = role_url("rara_client")
    login = urlsplit(login_url).username or ""
    conn.execute(sql.SQL("GRANT rara_vouch TO {}").format(sql.Identifier(login)))
    ui: UiServer = ui_server("--no-read-only", "--auth-header", HEADER, url=login_url)
    status, html = _call(ui, f"/runs/{first}", ANA)
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert status == 200
    assert match is not None
    status, location = _call(ui, f"/runs/{first}/retry", ANA, f"csrf={match.group(1)}".encode())
    assert status == 303
    retried = int(urlsplit(location).path.rsplit("/", 1)[-1])
    assert conn.execute(
        "SELECT started_by FROM rara_runs WHERE id = %s", (retried,)
    ).fetchone() == (f"{ANA} via {login}",)
    status, answer = _decide(ui, retried, ANA)
    assert (status, answer) == (
        303,
        f"approve refused: run {retried}: {ANA} via {login} started this run and may not also"
        " decide approval gate (fourEyes: another person decides)",
    )
    assert _decide(ui, retried, BO) == (303, f"gate approved by {BO} via {login}")
    wait_run(conn, retried, status="succeeded")


def _decide(ui: UiServer, run_id: int, user: str, csrf_from: int | None = None) -> tuple[int, str]:
    """Approve as ``user`` with the form of ``csrf_from``'s page (default: the run's): the
    answer's status and, for a redirect, its note."""
    status, html = _call(ui, f"/runs/{csrf_from or run_id}", user)
    assert status == 200
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert match is not None, "no decision form"
    body = f"csrf={match.group(1)}&decision=approve&reason=ok".encode()
    status, location = _call(ui, f"/runs/{run_id}/approvals/gate/decide", user, body)
    note = parse_qs(urlsplit(location).query).get("note", [""])[0] if status == 303 else ""
    return status, note


def _call(ui: UiServer, path: str, user: str, body: bytes | None = None) -> tuple[int, str]:
    """GET (POST with ``body``) as ``user``, not following a redirect: the status, and the
    page, or where a redirect goes."""
    headers = {HEADER: user}
    if body is not None:
        headers["content-type"] = "application/x-www-form-urlencoded"
    request = urllib.request.Request(ui.url + path, data=body, headers=headers)
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=10) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("location") or exc.read().decode()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def test_the_approvals_page_follows_gates_and_a_deadline_live(
    page: Any, ui_server: Any, database_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """/approvals (every decision) is live: a gate that begins to wait appears, and its
    deadline passing (fired by a worker) shows as timed out, without a reload; the run page
    then says the deadline decided, and the run ended as the gate says."""
    from playwright.sync_api import expect

    apply(
        conn,
        "deadline",
        [
            {"key": "gate", "approval": {"show": [], "timeout": "2s", "onTimeout": "cancel"}},
            {"key": "publish", "capability": "test.noop@1", "dependsOn": ["gate"]},
        ],
    )
    ui: UiServer = ui_server()
    page.goto(f"{ui.url}/approvals?all=1")
    expect(page.locator("#approvals-table")).to_have_attribute("data-live", "/live/approvals")
    expect(page.locator("body")).to_have_attribute("data-live", "open")
    page.evaluate("window.__sameDocument = true")
    run_id = start_run(conn, "deadline", queue_anyway=True).run_id
    row = page.locator(f'tr[data-approval="{run_id}/gate"]')
    expect(row.locator("[data-field=state]")).to_have_text("waiting")  # appeared, live
    with _worker(database_url, tmp_path, conn):  # its firing loop ends the wait at its time
        expect(row.locator("[data-field=state]")).to_have_text("timed_out", timeout=30_000)
        wait_run(conn, run_id, status="cancelled")
    expect(row.locator("[data-field=state] .decision-timed_out")).to_be_visible()
    assert page.evaluate("window.__sameDocument") is True  # never reloaded

    page.goto(f"{ui.url}/runs/{run_id}#approval-gate")
    gate = page.locator("#approval-gate")
    expect(gate.locator("[data-field=decision]")).to_have_text("timed_out")
    expect(gate.locator("[data-field=decided-by]")).to_have_text("its deadline")
    expect(gate.locator("form.decide")).to_have_count(0)
    expect(page.locator("#run-status")).to_have_text("cancelled")
