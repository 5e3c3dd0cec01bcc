"""Browser tests of the dashboard: a real `rara ui` process, a real PostgreSQL (the fresh
database of tests/conftest.py), real workers, and Debian's chromium driven by Playwright
(``executable_path``: Playwright never downloads a browser here)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("RARA_TEST_CHROMIUM") or shutil.which("chromium") or shutil.which(
    "chromium-browser")
RARA = str(Path(sys.executable).parent / "rara")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class UiServer:
    """``rara ui`` as a child process on a loopback port."""

    def __init__(self, database_url: str, log: Path, *args: str,
                 env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [RARA, "ui", "--port", str(self.port), "--database-url", database_url, *args],
                cwd=ROOT, env={**os.environ, **(env or {})}, stdout=out, stderr=out)

        def ready() -> bool:
            assert self.proc.poll() is None, f"rara ui exited:\n{self.output()}"
            try:
                with urllib.request.urlopen(self.url + "/readyz", timeout=2) as answer:
                    return bool(answer.status == 200)
            except (urllib.error.URLError, ConnectionError):
                return False

        wait_for(ready, timeout=30, interval=0.1, what="rara ui ready")

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@pytest.fixture
def ui_server(database_url: str, tmp_path: Path) -> Iterator[Callable[..., UiServer]]:
    started: list[UiServer] = []

    def make(*args: str, env: dict[str, str] | None = None, url: str | None = None) -> UiServer:
        """``url``: another database URL (a login role's) than the test database's owner's."""
        server = UiServer(url or database_url, tmp_path / f"ui-{len(started)}.log", *args,
                          env=env)
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Per module, not per session: Playwright's sync API keeps an event loop running in this
    thread while it is open, and the async tests of later modules need the thread's loop."""
    if CHROMIUM is None:
        pytest.skip("no chromium: install Debian's package (apt-get install chromium; "
                    ".ci/install-system-deps.sh does) or set RARA_TEST_CHROMIUM")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                              args=["--no-sandbox", "--disable-gpu"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1360, "height": 900},
                                  accept_downloads=True)
    opened = context.new_page()
    opened.set_default_timeout(30_000)
    dialogs: list[str] = []
    opened.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    opened.dialogs = dialogs
    yield opened
    context.close()
