"""`rara triggers serve` as a sender meets it: a real process on a loopback port, deliveries
over HTTP, the answer's status and JSON body; a redelivery answered with the same run. And as
a watcher of a folder: killed with SIGKILL and started again, it misses no change and starts
no run twice."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.ui import RARA, ROOT, free_port
from tests.support.waiting import wait_until
from tests.triggers.conftest import SECRET_ENV, MakeTrigger, signed_headers


class WebhookServer:
    """`rara triggers serve` as a child process on a loopback port."""

    def __init__(self, database_url: str, log: Path, *args: str) -> None:
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                [RARA, "triggers", "serve", "--port", self.url.rsplit(":", 1)[1], *args],
                cwd=ROOT,
                env={**os.environ, "DATABASE_URL": database_url, **SECRET_ENV},
                stdout=out,
                stderr=out,
            )

        def ready() -> bool:
            assert self.proc.poll() is None, f"rara triggers serve exited:\n{self.output()}"
            try:
                with urllib.request.urlopen(self.url + "/readyz", timeout=2) as answer:
                    return bool(answer.status == 200)
            except (urllib.error.URLError, ConnectionError):
                return False

        wait_until(ready, timeout=30, message="rara triggers serve ready")

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
        request = urllib.request.Request(self.url + path, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(10)


@pytest.fixture
def server(database_url: str, tmp_path: Path) -> Iterator[WebhookServer]:
    started = WebhookServer(database_url, tmp_path / "webhook.log")
    yield started
    started.stop()


def test_a_delivery_over_http_starts_one_run(
    conn: psycopg.Connection[Any], make_trigger: MakeTrigger, server: WebhookServer
) -> None:
    make_trigger(webhook={"inputFrom": {"documents": "/docs"}})
    body = json.dumps({"docs": ["a.md"]}).encode()
    headers = {"content-type": "application/json", **signed_headers(body, "gh-1")}

    status, answer = server.post("/hooks/default/docs-landed", body, headers)
    assert status == 201, server.output()
    assert answer == {"run": answer["run"], "created": True, "deliveries": 1}
    status, again = server.post("/hooks/default/docs-landed", body, headers)
    assert (status, again) == (200, {"run": answer["run"], "created": False, "deliveries": 2})
    [(run_input,)] = conn.execute("SELECT input FROM rara_runs").fetchall()
    assert run_input == {"documents": ["a.md"]}

    status, refused = server.post(
        "/hooks/default/docs-landed", body, signed_headers(body, "gh-2", secret="guess")
    )
    assert status == 401
    assert refused == {"error": "signature does not match the body, the delivery id and the time"}
    assert server.post("/hooks/default/nope", body, headers)[0] == 404
    assert server.post("/hooks/Not_A_Namespace/docs-landed", body, headers)[0] == 404


def test_a_body_over_the_endpoints_bound_is_refused_before_it_is_read(
    make_trigger: MakeTrigger, server: WebhookServer
) -> None:
    make_trigger()
    # Only the headers go: the answer comes without the body being sent, let alone read.
    host, port = server.url.removeprefix("http://").split(":")
    client = http.client.HTTPConnection(host, int(port), timeout=10)
    client.putrequest("POST", "/hooks/default/docs-landed")
    client.putheader("content-length", str((1 << 20) + 1))
    client.endheaders()
    answer = client.getresponse()
    assert answer.status == 413
    assert json.loads(answer.read()) == {"error": "body over 1048576 bytes"}
    client.close()


def test_the_watcher_killed_and_restarted_starts_one_run_per_change(
    database_url: str, conn: psycopg.Connection[Any], make_trigger: MakeTrigger, tmp_path: Path
) -> None:
    docs = tmp_path / "root" / "docs"
    docs.mkdir(parents=True)
    make_trigger("docs-changed", objects={"location": "docs", "pollSeconds": 1})
    root = ["--objects-root", str(tmp_path / "root")]
    log = tmp_path / "watcher.log"

    def runs() -> list[list[str]]:
        return [
            sorted(o["key"] for o in row[0])
            for row in conn.execute("SELECT input -> 'objects' FROM rara_runs ORDER BY id")
        ]

    server = WebhookServer(database_url, log, *root)
    (docs / "a.md").write_text("a")
    wait_until(lambda: len(runs()) == 1, timeout=30, message="the first change's run")
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait(10)
    (docs / "b.md").write_text("b")  # changed while no watcher runs
    second = WebhookServer(database_url, log, *root)
    third = WebhookServer(database_url, log, *root)  # and two watchers from now on
    try:
        wait_until(lambda: len(runs()) == 2, timeout=30, message="the second change's run")
        (docs / "c.md").write_text("c")
        wait_until(lambda: len(runs()) == 3, timeout=30, message="the third change's run")
        # a pass of each watcher after the last change (their next polls) starts nothing more
        conn.execute("UPDATE rara_triggers SET next_poll = now()")
        wait_until(
            lambda: (
                conn.execute(
                    "SELECT next_poll > now() FROM rara_triggers WHERE name = 'docs-changed'"
                ).fetchone()
                == (True,)
            ),
            timeout=30,
            message="one more pass",
        )
    finally:
        second.stop()
        third.stop()
    assert runs() == [["a.md"], ["b.md"], ["c.md"]], log.read_text()[-3000:]
