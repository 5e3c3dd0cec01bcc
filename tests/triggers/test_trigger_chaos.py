"""Triggers under chaos: two `rara triggers serve` processes SIGKILLed and restarted at random,
and the database crashed (``pg_ctl stop -m immediate``) and started again, while a sender
delivers webhook events — retrying each until it is answered, and sending some again after —
and a writer changes files, some rewritten with the same bytes. From the history afterwards:
one run per delivery id, none lost; every file's last bytes in a run, and no version of a file
in two runs."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rara.pg.embedded import EmbeddedPostgres, temporary_server
from rara.pg.migrate import migrate
from rara.triggers.manage import apply_trigger
from rara.triggers.model import trigger_from_object
from tests.support.definitions import noop_definition
from tests.support.waiting import wait_until
from tests.triggers.conftest import signed_headers, trigger_document
from tests.triggers.test_webhook_http import WebhookServer

DELIVERIES = 40
WRITES = 30
FILES = 6


@pytest.fixture
def own_server() -> Iterator[tuple[EmbeddedPostgres, str]]:
    """A durable server of the test's own (a crash must lose no acknowledged commit)."""
    if os.environ.get("RARA_TEST_DATABASE_URL"):
        pytest.skip("needs the embedded server's binaries (RARA_TEST_DATABASE_URL is set)")
    server = temporary_server(fast=False)
    url = server.up()
    try:
        migrate(url)
        yield server, url
    finally:
        server.destroy()


def _connect(url: str) -> psycopg.Connection[Any] | None:
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=2)
    except psycopg.OperationalError:
        return None


class Sender(threading.Thread):
    """Delivers DELIVERIES events, each until answered 200/201, alternating servers; a third
    of them sent once more after their answer (a sender's duplicate)."""

    def __init__(self, urls: list[str], rng: random.Random) -> None:
        super().__init__(daemon=True)
        self.urls, self.rng = urls, rng
        self.runs: dict[str, set[int]] = {}
        self.retries = 0

    def _post(self, delivery_id: str) -> int | None:
        body = json.dumps({"doc": delivery_id}).encode()
        request = urllib.request.Request(
            self.rng.choice(self.urls) + "/hooks/default/hook",
            data=body,
            method="POST",
            headers=signed_headers(body, delivery_id),
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return int(json.loads(answer.read())["run"])
        except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
            return None  # killed mid-request, refused while down, a 5xx: send again

    def run(self) -> None:
        for i in range(DELIVERIES):
            time.sleep(self.rng.uniform(0.1, 0.6))  # the events' cadence, through the chaos
            delivery_id = f"d-{i}"
            times = 2 if self.rng.random() < 0.33 else 1
            for _ in range(times):
                while (run_id := self._post(delivery_id)) is None:
                    self.retries += 1
                    time.sleep(0.2)  # the sender's retry cadence
                self.runs.setdefault(delivery_id, set()).add(run_id)


@pytest.mark.timeout(240)
def test_killed_servers_and_a_crashed_database_start_one_run_per_event(
    own_server: tuple[EmbeddedPostgres, str], tmp_path: Path
) -> None:
    server, url = own_server
    root = tmp_path / "root"
    (root / "docs").mkdir(parents=True)
    with psycopg.connect(url, autocommit=True) as conn:
        noop_definition(conn)
        apply_trigger(conn, trigger_from_object(trigger_document("hook")))
        files = trigger_document("files", objects={"location": "docs", "pollSeconds": 1})
        apply_trigger(conn, trigger_from_object(files))
    rng = random.Random(52)
    args = ["--objects-root", str(root)]
    serving = [WebhookServer(url, tmp_path / f"serve{i}.log", *args) for i in range(2)]
    urls = [s.url for s in serving]
    last: dict[str, bytes] = {}
    versions: set[tuple[str, str]] = set()

    def write() -> None:
        for j in range(WRITES):
            name = f"{j % FILES}.txt"
            data = last[name] if name in last and rng.random() < 0.3 else f"v{j}".encode()
            (root / "docs" / name).write_bytes(data)
            last[name] = data
            versions.add((name, "sha256:" + hashlib.sha256(data).hexdigest()))
            time.sleep(rng.uniform(0.1, 0.8))  # the writer's cadence

    sender = Sender(urls, random.Random(7))
    writer = threading.Thread(target=write, daemon=True)
    sender.start()
    writer.start()
    kills = crashes = 0
    try:
        while sender.is_alive() or writer.is_alive():
            time.sleep(rng.uniform(0.5, 2.0))  # the chaos's cadence, not a wait for state
            if rng.random() < 0.3:
                server.crash()
                crashes += 1
                time.sleep(rng.uniform(0.5, 2.0))  # down a while
                server.resume()
            else:
                i = rng.randrange(2)
                serving[i].proc.send_signal(signal.SIGKILL)
                serving[i].proc.wait(10)
                kills += 1
                serving[i] = WebhookServer(url, tmp_path / f"serve{i}.log", *args)
                urls[i] = serving[i].url
        sender.join(60)
        writer.join(60)
        assert not sender.is_alive()

        def all_seen() -> bool:
            conn = _connect(url)
            if conn is None:
                return False
            with conn:
                seen = _file_versions(conn)
            final = {(n, "sha256:" + hashlib.sha256(d).hexdigest()) for n, d in last.items()}
            return final <= {v for run in seen for v in run}

        wait_until(all_seen, 60, "every file's last bytes in a run")
    finally:
        for s in serving:
            s.stop()
    assert kills + crashes >= 5, (kills, crashes)
    assert crashes >= 1
    print(f"chaos: {kills} server kills, {crashes} database crashes, {sender.retries} resends")
    with psycopg.connect(url, autocommit=True) as conn:
        hooks = dict(
            conn.execute(
                "SELECT idempotency_key, id FROM rara_runs"
                " WHERE idempotency_key LIKE 'trigger:hook:%'"
            ).fetchall()
        )
        seen = _file_versions(conn)
    # Webhooks: one run per delivery id, none lost, and every answer named that run.
    assert sorted(hooks) == sorted(f"trigger:hook:d-{i}" for i in range(DELIVERIES))
    for delivery_id, answered in sender.runs.items():
        assert answered == {hooks[f"trigger:hook:{delivery_id}"]}, delivery_id
    # Files: no version in two runs, and each run's objects are versions that were written.
    flat = [v for run in seen for v in run]
    assert len(flat) == len(set(flat)), "a version of a file started two runs"
    assert set(flat) <= versions


def _file_versions(conn: psycopg.Connection[Any]) -> list[list[tuple[str, str]]]:
    return [
        [(o["key"], o["digest"]) for o in row[0]]
        for row in conn.execute(
            "SELECT input -> 'objects' FROM rara_runs WHERE idempotency_key LIKE 'trigger:files:%'"
            " ORDER BY id"
        )
    ]
