"""The dashboard's login sessions (issue 29): a cookie copied once must not act forever.

Each login (the token entered on /login) gets its own random session id, kept by the server
with an expiry; logout ends it there, so the same cookie is refused afterwards; the CSRF token
of a form is bound to the session it was rendered for. Bearer access is unchanged.

Against a real ``rara ui`` process (tests/ui/conftest.py) on a ``rara_client`` login, as the
chart runs it with actions on: the sessions need no table of their own."""

from __future__ import annotations

import hashlib
import hmac
import re
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import psycopg
import pytest

from rara.runs import start_run
from rara.ui.auth import SESSION_COOKIE, SESSION_SECONDS, AuthConfig, Sessions
from tests.support.definitions import apply
from tests.support.ui import UiServer
from tests.support.waiting import wait_until

TOKEN = "t0ken-for-the-session-tests-0123456789"
FORM = {"content-type": "application/x-www-form-urlencoded"}


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class Answer:
    def __init__(self, status: int, headers: Any, body: str) -> None:
        self.status, self.headers, self.body = status, headers, body


class Dashboard:
    """A `rara ui` with actions on, and the calls a browser would make to it."""

    def __init__(self, server: UiServer, run_id: int) -> None:
        self.server, self.run_id = server, run_id

    def call(
        self, path: str, headers: dict[str, str] | None = None, body: bytes | None = None
    ) -> Answer:
        request = urllib.request.Request(
            self.server.url + path,
            data=body,
            headers=headers or {},
            method="POST" if body is not None else "GET",
        )
        try:
            with urllib.request.build_opener(_NoRedirect).open(request, timeout=10) as answer:
                return Answer(int(answer.status), answer.headers, answer.read().decode())
        except urllib.error.HTTPError as exc:
            return Answer(exc.code, exc.headers, exc.read().decode())

    def login(self) -> tuple[str, str]:
        """The session cookie's value and its Set-Cookie header."""
        answer = self.call("/login", FORM, urlencode({"token": TOKEN, "next": "/runs"}).encode())
        assert answer.status == 303, answer.body[:500]
        (set_cookie,) = [
            h
            for h in answer.headers.get_all("set-cookie") or []
            if h.startswith(SESSION_COOKIE + "=")
        ]
        return set_cookie.split(";", 1)[0].split("=", 1)[1], set_cookie

    def run_page(self, cookie: str) -> Answer:
        return self.call(f"/runs/{self.run_id}", {"cookie": f"{SESSION_COOKIE}={cookie}"})

    def csrf(self, cookie: str) -> str:
        match = re.search(r'name="csrf" value="([^"]+)"', self.run_page(cookie).body)
        assert match is not None, "no cancel form: the session is not logged in"
        return match.group(1)

    def logged_in(self, cookie: str) -> bool:
        return 'action="/logout"' in self.run_page(cookie).body

    def cancel(self, cookie: str, csrf: str) -> int:
        headers = {**FORM, "cookie": f"{SESSION_COOKIE}={cookie}"}
        return self.call(
            f"/runs/{self.run_id}/cancel",
            headers,
            urlencode({"csrf": csrf, "reason": "a test"}).encode(),
        ).status

    def logout(self, cookie: str) -> int:
        return self.call("/logout", {**FORM, "cookie": f"{SESSION_COOKIE}={cookie}"}, b"").status


def _cancel_requested(conn: psycopg.Connection[Any], run_id: int) -> bool:
    row = conn.execute("SELECT cancel_requested FROM rara_runs WHERE id = %s", (run_id,)).fetchone()
    assert row is not None
    return bool(row[0])


@pytest.fixture
def dashboard(
    conn: psycopg.Connection[Any],
    ui_server: Callable[..., UiServer],
    role_url: Callable[[str], str],
    tmp_path: Path,
) -> Callable[..., Dashboard]:
    apply(conn, "slow", [{"key": "nap", "capability": "test.sleep@1", "executor": "inprocess"}])
    run_id = start_run(conn, "slow", input={"seconds": 60}, queue_anyway=True).run_id
    (tmp_path / "token").write_text(TOKEN + "\n")

    def make(*args: str) -> Dashboard:
        server = ui_server(
            "--no-read-only",
            "--token-file",
            str(tmp_path / "token"),
            *args,
            url=role_url("rara_client"),
        )
        return Dashboard(server, run_id)

    return make


def test_each_login_gets_its_own_expiring_http_only_cookie(
    dashboard: Callable[..., Dashboard],
) -> None:
    ui = dashboard()
    first, header = ui.login()
    second, _ = ui.login()
    assert first != second
    assert len(first) >= 43  # secrets.token_urlsafe(32)
    flags = {
        part.strip().split("=", 1)[0].lower(): part.strip().partition("=")[2]
        for part in header.split(";")[1:]
    }
    assert "httponly" in flags
    assert flags["samesite"].lower() == "strict"
    assert flags["max-age"] == str(SESSION_SECONDS)  # the lifetime the server keeps it
    assert SESSION_SECONDS == 12 * 3600  # the documented default (docs/ui.md, chart)
    assert flags["path"] == "/"
    assert ui.logged_in(first)
    assert ui.logged_in(second)


def test_logout_revokes_the_cookie_on_the_server(
    dashboard: Callable[..., Dashboard], conn: psycopg.Connection[Any]
) -> None:
    ui = dashboard()
    cookie, _ = ui.login()
    other, _ = ui.login()
    csrf = ui.csrf(cookie)
    assert ui.logout(cookie) == 303
    # The copied cookie, with the CSRF token of its own page, after logout: nobody.
    assert ui.cancel(cookie, csrf) == 401
    assert not ui.logged_in(cookie)
    assert 'href="/login' in ui.run_page(cookie).body
    assert not _cancel_requested(conn, ui.run_id)
    assert ui.logged_in(other)  # one logout ends one session


def test_an_expired_session_is_refused(
    dashboard: Callable[..., Dashboard], conn: psycopg.Connection[Any]
) -> None:
    ui = dashboard("--session-seconds", "3")
    cookie, header = ui.login()
    assert "Max-Age=3" in header
    csrf = ui.csrf(cookie)
    wait_until(
        lambda: not ui.logged_in(cookie), timeout=30, interval=0.2, message="the session expired"
    )
    assert ui.cancel(cookie, csrf) == 401
    assert not _cancel_requested(conn, ui.run_id)


def test_the_old_constant_cookie_is_refused(
    dashboard: Callable[..., Dashboard], conn: psycopg.Connection[Any]
) -> None:
    """Before sessions, every login's cookie was HMAC(key, "session") with the key derived
    from the token: one value, forever. It must identify nobody now."""
    ui = dashboard()
    key = hashlib.sha256(b"rara-ui-key\0" + TOKEN.encode()).digest()
    constant = hmac.new(key, b"session", hashlib.sha256).hexdigest()
    old_csrf = hmac.new(key, b"csrf:token", hashlib.sha256).hexdigest()
    assert not ui.logged_in(constant)
    assert ui.cancel(constant, old_csrf) == 401
    assert not _cancel_requested(conn, ui.run_id)


def test_one_sessions_csrf_token_is_refused_in_another(
    dashboard: Callable[..., Dashboard], conn: psycopg.Connection[Any]
) -> None:
    ui = dashboard()
    alice, _ = ui.login()
    bob, _ = ui.login()
    assert ui.cancel(bob, ui.csrf(alice)) == 403
    assert not _cancel_requested(conn, ui.run_id)
    assert ui.cancel(bob, ui.csrf(bob)) == 303  # its own token: accepted
    assert _cancel_requested(conn, ui.run_id)


def test_bearer_access_is_unchanged(
    dashboard: Callable[..., Dashboard], conn: psycopg.Connection[Any]
) -> None:
    ui = dashboard()
    bearer = {"authorization": f"Bearer {TOKEN}"}
    page = ui.call(f"/runs/{ui.run_id}", bearer)
    match = re.search(r'name="csrf" value="([^"]+)"', page.body)
    assert match is not None, "no cancel form for the bearer"
    body = urlencode({"csrf": match.group(1), "reason": "a test"}).encode()
    assert ui.call(f"/runs/{ui.run_id}/cancel", {**FORM, **bearer}, body).status == 303
    assert _cancel_requested(conn, ui.run_id)


# The server's record of sessions, on a clock the test moves: expiry at the exact second, and
# a bound on how many it keeps.


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_session_ends_at_its_lifetime_on_the_servers_clock() -> None:
    clock = Clock()
    sessions = Sessions(seconds=60, clock=clock)
    sid = sessions.create()
    clock.now += 59.9
    assert sessions.valid(sid)
    clock.now += 0.1
    assert not sessions.valid(sid)
    assert len(sessions) == 0  # pruned, not only refused


def test_ended_and_unknown_sessions_are_refused() -> None:
    sessions = Sessions(seconds=60, clock=Clock())
    sid = sessions.create()
    assert not sessions.valid("")
    assert not sessions.valid(sid + "x")
    sessions.end(sid)
    sessions.end(sid)  # twice: no error
    assert not sessions.valid(sid)


def test_the_record_is_bounded_and_drops_the_oldest() -> None:
    clock = Clock()
    sessions = Sessions(seconds=60, clock=clock, limit=3)
    made = []
    for _ in range(5):
        made.append(sessions.create())
        clock.now += 1
    assert len(sessions) == 3
    assert [sessions.valid(s) for s in made] == [False, False, True, True, True]


def test_a_lifetime_must_be_positive() -> None:
    with pytest.raises(ValueError, match="session lifetime"):
        Sessions(seconds=0)


def test_a_persons_token_is_that_person_and_the_shared_one_nobody() -> None:
    """Each token of the file is its person's: a bearer or a login with it acts as them;
    the shared token's holder stays ``token``; a token of nobody's is refused."""
    auth = AuthConfig(
        read_only=False,
        token="s" * 20,
        people=(("ana@example.com", "a" * 20), ("bo@example.com", "b" * 20)),
    )
    assert auth.check_token("a" * 20) == "ana@example.com"
    assert auth.check_token("s" * 20) == ""
    assert auth.check_token("c" * 20) is None
    session = auth.sessions.create("bo@example.com")
    assert auth.sessions.person(session) == "bo@example.com"
    assert auth.sessions.person(session + "x") is None
