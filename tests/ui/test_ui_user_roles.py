"""One dashboard, many teams (`rara ui --user-roles`, docs/ui.md): every request reads and
acts as the database role the proxy's header names, so PostgreSQL's row-level security
(migration 0018) decides what each user sees. Two namespaces, each with a definition
`refresh`, a run of it, a schedule `nightly`; team-b's run has an artifact. Each team's user
(NOLOGIN, a member of rara_client) has its namespace only, the open rows of rara_client and
rara_reader deleted; the UI's login is a member of rara_reader and of both users' roles.
Each user sees theirs on every page and never the other's; the other's run is a 404, its
cancel and resume too; no header is a 401, a role the login may not use a 403."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg import sql

from rara.pg import schedules as schedule_sql
from rara.runs import start_run
from rara.schedules.manage import apply_schedule
from rara.schedules.model import load_schedule
from tests.support.definitions import apply
from tests.support.ui import UiServer

HEADER = "X-Forwarded-User"
TEAMS = ("team-a", "team-b")
DIGEST = "sha256:" + "b" * 64  # an artifact of team-b's run
NIGHTLY = """
apiVersion: rara.dev/v1alpha1
kind: WorkflowSchedule
metadata: {name: nightly}
spec: {definition: refresh, schedule: "0 2 * * *"}
"""


@dataclass(frozen=True)
class Team:
    namespace: str
    user: str  # its database role
    run_id: int

    @property
    def step(self) -> str:
        return f"{self.namespace}-step"


@dataclass(frozen=True)
class Tenancy:
    a: Team
    b: Team
    login_url: str

    @property
    def login(self) -> str:
        return urlsplit(self.login_url).username or ""


@pytest.fixture
def tenancy(
    conn: psycopg.Connection[Any], database_url: str, role_url: Callable[[str], str]
) -> Iterator[Tenancy]:
    """The two teams isolated as docs/ui.md sets them up; their roles (cluster-wide: named
    per test) dropped after."""
    suffix = uuid.uuid4().hex[:8]
    teams = []
    made: list[str] = []
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute("SELECT rara_namespace_isolation(true)")  # rara access isolate
        for namespace in TEAMS:
            user = f"{namespace.replace('-', '_')}_user_{suffix}"
            admin.execute(
                sql.SQL("CREATE ROLE {} NOLOGIN IN ROLE rara_client").format(sql.Identifier(user))
            )
            made.append(user)
            admin.execute(
                "INSERT INTO rara_namespace_access (role, namespace) VALUES (%s, %s)",
                (user, namespace),
            )
            apply(conn, "refresh", [{"key": f"{namespace}-step", "capability": "x@1"}],
                  namespace=namespace)  # fmt: skip
            apply_schedule(conn, load_schedule(NIGHTLY), namespace=namespace)
            run_id = start_run(conn, "refresh", queue_anyway=True, namespace=namespace).run_id
            teams.append(Team(namespace, user, run_id))
            admin.execute(  # its step's log (as a worker's rara_step_log_many writes it)
                "INSERT INTO rara_step_logs (step_id, attempt, seq, body)"
                " SELECT id, 1, 1, key || ' wrote this' FROM rara_steps WHERE run_id = %s",
                (run_id,),
            )
        login_url = role_url("rara_reader")
        login = urlsplit(login_url).username or ""
        admin.execute(
            sql.SQL("GRANT {} TO {}").format(
                sql.SQL(", ").join(map(sql.Identifier, made)), sql.Identifier(login)
            )
        )
        # An artifact of team-b's run (as a worker's manifest records it).
        admin.execute("INSERT INTO rara_artifacts (digest, size) VALUES (%s, 3)", (DIGEST,))
        admin.execute(
            "INSERT INTO rara_step_artifacts (step_id, attempt, name, digest, size, media_type)"
            " SELECT id, 1, 'out.txt', %s, 3, 'text/plain' FROM rara_steps WHERE run_id = %s",
            (DIGEST, teams[1].run_id),
        )
    try:
        yield Tenancy(teams[0], teams[1], login_url)
    finally:
        with psycopg.connect(database_url, autocommit=True) as admin:
            for user in made:
                admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(user)))


def _call(ui: UiServer, path: str, user: str | None, body: bytes | None = None) -> tuple[int, str]:
    headers = {HEADER: user} if user is not None else {}
    if body is not None:
        headers["content-type"] = "application/x-www-form-urlencoded"
    request = urllib.request.Request(
        ui.url + path, data=body, headers=headers, method="GET" if body is None else "POST"
    )
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=10) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _first_state(ui: UiServer, path: str, user: str) -> dict[str, Any]:
    """The first state a live stream sends this user."""
    request = urllib.request.Request(ui.url + path, headers={HEADER: user})
    with urllib.request.urlopen(request, timeout=10) as stream:
        for line in stream:
            if line.startswith(b"data: "):
                state: dict[str, Any] = json.loads(line[6:])
                return state
    raise AssertionError(f"{path}: the stream ended with no state")


def _server(ui_server: Callable[..., UiServer], tenancy: Tenancy, *args: str) -> UiServer:
    return ui_server("--auth-header", HEADER, "--user-roles", *args, url=tenancy.login_url)


def test_each_user_sees_their_namespaces_only(
    ui_server: Callable[..., UiServer], tenancy: Tenancy
) -> None:
    ui = _server(ui_server, tenancy)
    for own, other in ((tenancy.a, tenancy.b), (tenancy.b, tenancy.a)):
        mine = f"?namespace={own.namespace}"
        theirs = f"?namespace={other.namespace}"
        for path in (
            "/runs",
            f"/runs{mine}",
            f"/runs/{own.run_id}",
            f"/runs/{own.run_id}/state",
            f"/runs/{own.run_id}/events",
            f"/runs/{own.run_id}/logs",
            "/definitions",
            f"/definitions/refresh{mine}",
            "/schedules",
            f"/schedules/nightly{mine}",
            "/fleet",
        ):
            status, body = _call(ui, path, own.user)
            assert status == 200, (own.user, path, body[-500:])
            # Not a name, not a step, not a run of the other team's, anywhere.
            assert other.namespace not in body, (own.user, path)
            assert other.step not in body, (own.user, path)
            assert f"/runs/{other.run_id}" not in body, (own.user, path)
        assert own.step in _call(ui, f"/definitions/refresh{mine}", own.user)[1]
        assert f"{own.step} wrote this" in _call(ui, f"/runs/{own.run_id}/logs", own.user)[1]
        assert f"/runs/{own.run_id}" in _call(ui, "/runs", own.user)[1]
        for path in (
            f"/runs/{other.run_id}",
            f"/runs/{other.run_id}/state",
            f"/runs/{other.run_id}/events",
            f"/runs/{other.run_id}/logs",
            f"/live/runs/{other.run_id}",
            f"/definitions/refresh{theirs}",
            f"/schedules/nightly{theirs}",
        ):
            status, body = _call(ui, path, own.user)
            assert status == 404, (own.user, path, status)
            assert other.step not in body
        # Live: the run's own stream, and the runs list with the user's runs only.
        assert _first_state(ui, f"/live/runs/{own.run_id}", own.user)["run"]["id"] == own.run_id
        listed = {run_id for run_id, _ in _first_state(ui, "/live/runs", own.user)["runs"]}
        assert listed == {own.run_id}
    # The artifact of team-b's run: team-b's, and nothing to team-a.
    status, body = _call(ui, f"/artifacts/{DIGEST}", tenancy.b.user)
    assert status == 200
    assert f"/runs/{tenancy.b.run_id}" in body
    status, body = _call(ui, f"/artifacts/{DIGEST}", tenancy.a.user)
    assert status == 404, status
    assert f"/runs/{tenancy.b.run_id}" not in body


def test_no_header_is_401_and_a_role_the_login_may_not_use_is_403(
    ui_server: Callable[..., UiServer], tenancy: Tenancy
) -> None:
    ui = _server(ui_server, tenancy)
    for path in ("/runs", f"/runs/{tenancy.a.run_id}", "/live/runs", "/fleet"):
        status, body = _call(ui, path, None)
        assert status == 401, (path, status)
        assert f"no {HEADER} header" in body
    nobody = f"nobody_{uuid.uuid4().hex[:8]}"
    for user in (
        nobody,  # no such role
        "rara_worker",  # a role the login is not a member of
        tenancy.login,  # the login itself: every user's namespaces at once
        tenancy.a.user + "x" * 64,  # PostgreSQL would cut it to another role's name
        'a"; RESET ROLE; --',  # a quoted identifier, never SQL
    ):
        for path in ("/runs", f"/runs/{tenancy.a.run_id}", "/live/runs", "/fleet"):
            status, body = _call(ui, path, user)
            assert status == 403, (user, path, status, body[-300:])
            assert "is not a dashboard user" in body
    assert ui.proc.poll() is None
    assert "Traceback" not in ui.output()


def _csrf(ui: UiServer, path: str, user: str) -> str:
    status, html = _call(ui, path, user)
    assert status == 200, (path, status)
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert match is not None, f"no action form on {path} for {user}"
    return match.group(1)


def test_actions_on_another_namespace_are_refused_by_the_database(
    ui_server: Callable[..., UiServer], tenancy: Tenancy, conn: psycopg.Connection[Any]
) -> None:
    ui = _server(ui_server, tenancy, "--no-read-only")
    a, b = tenancy.a, tenancy.b
    form = f"csrf={_csrf(ui, f'/runs/{a.run_id}', a.user)}&reason=test".encode()

    def flagged(run_id: int) -> bool:
        row = conn.execute(
            "SELECT cancel_requested OR status = 'cancelled' FROM rara_runs WHERE id = %s",
            (run_id,),
        ).fetchone()
        assert row is not None
        return bool(row[0])

    for path in (f"/runs/{b.run_id}/cancel", f"/runs/{b.run_id}/resume", f"/runs/{b.run_id}/retry"):
        status, body = _call(ui, path, a.user, form)
        assert status == 404, (path, status, body[-300:])
    status, _ = _call(ui, f"/schedules/nightly/pause?namespace={b.namespace}", a.user, form)
    assert status == 404
    assert not flagged(b.run_id)
    row = schedule_sql.get(conn, "nightly", namespace=b.namespace)
    assert row is not None
    assert not row.suspended

    # Their own: done.
    assert _call(ui, f"/schedules/nightly/pause?namespace={a.namespace}", a.user, form)[0] == 303
    row = schedule_sql.get(conn, "nightly", namespace=a.namespace)
    assert row is not None
    assert row.suspended
    assert _call(ui, f"/runs/{a.run_id}/cancel", a.user, form)[0] == 303
    assert flagged(a.run_id)


def test_a_user_who_may_only_read_is_refused_an_action_not_a_500(
    ui_server: Callable[..., UiServer],
    tenancy: Tenancy,
    database_url: str,
    conn: psycopg.Connection[Any],
) -> None:
    """A role with team-a's namespace that is a member of rara_reader alone: it sees team-a's
    run; the database refuses its cancel, which the UI answers with a 403."""
    reader = f"team_a_reader_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(
            sql.SQL("CREATE ROLE {} NOLOGIN IN ROLE rara_reader").format(sql.Identifier(reader))
        )
        try:
            admin.execute(
                "INSERT INTO rara_namespace_access (role, namespace) VALUES (%s, %s)",
                (reader, tenancy.a.namespace),
            )
            admin.execute(
                sql.SQL("GRANT {} TO {}").format(
                    sql.Identifier(reader), sql.Identifier(tenancy.login)
                )
            )
            ui = _server(ui_server, tenancy, "--no-read-only")
            run_id = tenancy.a.run_id
            form = f"csrf={_csrf(ui, f'/runs/{run_id}', reader)}&reason=test".encode()
            status, body = _call(ui, f"/runs/{run_id}/cancel", reader, form)
            assert status == 403, (status, body[-300:])
            assert "permission denied" in body
            assert conn.execute(
                "SELECT cancel_requested FROM rara_runs WHERE id = %s", (run_id,)
            ).fetchone() == (False,)
        finally:
            admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(reader)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(reader)))


def test_the_browser_offers_the_users_namespaces_only(
    browser: Any, ui_server: Callable[..., UiServer], tenancy: Tenancy
) -> None:
    from playwright.sync_api import expect

    ui = _server(ui_server, tenancy)
    context = browser.new_context(extra_http_headers={HEADER: tenancy.b.user})
    try:
        page = context.new_page()
        page.set_default_timeout(30_000)
        page.goto(ui.url + "/runs")
        expect(page.locator("#namespace option")).to_have_text(["all", tenancy.b.namespace])
        expect(page.locator("tbody tr[data-run]")).to_have_count(1)
        expect(page.locator(f'tr[data-run="{tenancy.b.run_id}"]')).to_have_count(1)
        page.goto(ui.url + "/definitions")
        expect(page.locator("tbody tr[data-definition]")).to_have_count(1)
        expect(page.locator('tbody tr[data-namespace="team-b"]')).to_have_count(1)
    finally:
        context.close()


TOKEN = "user-roles-attack-token"


def _csrf_of(user: str) -> str:
    """The form token the UI expects of ``user`` (rara.ui.auth: keyed by the UI's token), so an
    action can be tried as a user whose pages are refused."""
    key = hashlib.sha256(b"rara-ui-key\0" + TOKEN.encode()).digest()
    return hmac.new(key, f"csrf:user:{user}".encode(), hashlib.sha256).hexdigest()


def test_the_user_none_is_not_the_dashboard_s_own_login(
    ui_server: Callable[..., UiServer], tenancy: Tenancy, conn: psycopg.Connection[Any]
) -> None:
    """Attack: the proxy names the user `none`. `SET ROLE "none"`, quoted or not, is
    PostgreSQL's reset: the request ran as the UI's login, a member of every user's role, so
    it read team-b's runs and cancelled one. Now a 403, and nothing read or written."""
    ui = ui_server(
        "--auth-header", HEADER, "--user-roles", "--no-read-only",
        url=tenancy.login_url, env={"RARA_UI_TOKEN": TOKEN},
    )  # fmt: skip
    b = tenancy.b
    for user in ("none", "NONE", "None", " none "):
        for path in ("/runs", f"/runs?namespace={b.namespace}", f"/runs/{b.run_id}", "/live/runs"):
            status, body = _call(ui, path, user)
            assert status == 403, (user, path, status, body[-300:])
            assert "is not a dashboard user" in body
            assert f"/runs/{b.run_id}" not in body
        form = f"csrf={_csrf_of(user.strip())}&reason=test".encode()
        status, body = _call(ui, f"/runs/{b.run_id}/cancel", user, form)
        assert status == 403, (user, status, body[-300:])
    assert conn.execute(
        "SELECT cancel_requested OR status = 'cancelled' FROM rara_runs WHERE id = %s",
        (b.run_id,),
    ).fetchone() == (False,)
    assert "Traceback" not in ui.output()


def test_group_and_privileged_roles_are_not_dashboard_users(
    ui_server: Callable[..., UiServer],
    tenancy: Tenancy,
    database_url: str,
    conn: psycopg.Connection[Any],
) -> None:
    """Attack: the proxy names a role the login reaches only through a user — a team's group
    role (team-b's users are its members), rara_client, rara_reader — or one granted to the
    login that is more than a user (a role with BYPASSRLS, a member of the owner). Each was a
    role the login could `SET ROLE` to, and so a user the dashboard acted as: the team's role
    read team-b's runs. Now each is a 403; a user granted to the login directly still works."""
    suffix = uuid.uuid4().hex[:8]
    team, member = f"team_b_{suffix}", f"bob_{suffix}"
    bypass, owners = f"bypass_{suffix}", f"owner_member_{suffix}"
    owner = conn.execute(
        "SELECT relowner::regrole::text FROM pg_class WHERE oid = 'rara_runs'::regclass"
    ).fetchone()
    assert owner is not None
    made = [member, team, bypass, owners]
    with psycopg.connect(database_url, autocommit=True) as admin:
        ident = sql.Identifier
        admin.execute(sql.SQL("CREATE ROLE {} NOLOGIN IN ROLE rara_client").format(ident(team)))
        admin.execute(
            sql.SQL("CREATE ROLE {} NOLOGIN IN ROLE {}").format(ident(member), ident(team))
        )
        admin.execute(
            sql.SQL("CREATE ROLE {} NOLOGIN BYPASSRLS IN ROLE rara_reader").format(ident(bypass))
        )
        admin.execute(
            sql.SQL("CREATE ROLE {} NOLOGIN IN ROLE rara_reader, {}").format(
                ident(owners), sql.SQL(owner[0])
            )
        )
        admin.execute(
            "INSERT INTO rara_namespace_access (role, namespace) VALUES (%s, %s)",
            (team, tenancy.b.namespace),
        )
        for role in (member, bypass, owners):
            admin.execute(sql.SQL("GRANT {} TO {}").format(ident(role), ident(tenancy.login)))
        try:
            ui = _server(ui_server, tenancy)
            b = f"/runs/{tenancy.b.run_id}"
            for user in (team, "rara_client", "rara_reader", "rara_worker", bypass, owners,
                         "pg_read_all_data", "public", "current_user"):  # fmt: skip
                for path in ("/runs", b):
                    status, body = _call(ui, path, user)
                    assert status == 403, (user, path, status, body[-300:])
                    assert "is not a dashboard user" in body
            status, body = _call(ui, b, member)  # the team's member, granted to the login
            assert status == 200, (status, body[-300:])
        finally:
            for role in made:
                admin.execute(sql.SQL("DROP OWNED BY {}").format(ident(role)))
                admin.execute(sql.SQL("DROP ROLE {}").format(ident(role)))
