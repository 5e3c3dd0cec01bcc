"""``rara ui`` as a child process on a loopback port, for the browser, CLI and security
tests (and bench/ui_pages.py)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = (
    os.environ.get("RARA_TEST_CHROMIUM")
    or shutil.which("chromium")
    or shutil.which("chromium-browser")
)
RARA = str(Path(sys.executable).parent / "rara")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class UiServer:
    """``rara ui`` as a child process on a loopback port."""

    def __init__(
        self, database_url: str, log: Path, *args: str, env: dict[str, str] | None = None
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [RARA, "ui", "--port", str(self.port), "--database-url", database_url, *args],
                cwd=ROOT,
                env={**os.environ, **(env or {})},
                stdout=out,
                stderr=out,
            )

        def ready() -> bool:
            assert self.proc.poll() is None, f"rara ui exited:\n{self.output()}"
            try:
                with urllib.request.urlopen(self.url + "/readyz", timeout=2) as answer:
                    return bool(answer.status == 200)
            except (urllib.error.URLError, ConnectionError):
                return False

        wait_until(ready, timeout=30, interval=0.1, message="rara ui ready")

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


def log_in(page: Any, ui: UiServer, token: str, then: str) -> None:
    """Log the browser ``page`` in to ``ui`` with ``token``, landing on the path ``then``."""
    page.goto(f"{ui.url}/login?next={then}")
    page.fill("input[name=token]", token)
    page.click("form.login button")
