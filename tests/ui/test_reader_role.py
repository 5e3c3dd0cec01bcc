"""The UI's read-only mode on a login that can only read (a member of rara_reader, migration
0007; chart: ui.database.existingSecret): every page renders, and what it cannot do it is
refused by the database too, not only by the UI."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from typing import Any

import psycopg

from rara.runs import start_run
from tests.support.definitions import apply
from tests.support.ui import UiServer


def _get(server: UiServer, path: str) -> tuple[int, str]:
    with urllib.request.urlopen(server.url + path, timeout=10) as answer:
        return int(answer.status), answer.read().decode()


def test_every_page_renders_for_a_reader(
    conn: psycopg.Connection[Any],
    ui_server: Callable[..., UiServer],
    role_url: Callable[[str], str],
) -> None:
    apply(
        conn,
        "shown",
        [{"key": "a", "capability": "x@1"}, {"key": "b", "capability": "x@1", "dependsOn": ["a"]}],
    )
    run_id = start_run(conn, "shown", queue_anyway=True).run_id
    reader_url = role_url("rara_reader")
    server = ui_server(url=reader_url)
    for path in (
        "/",
        "/runs",
        f"/runs/{run_id}",
        f"/runs/{run_id}/state",
        "/definitions",
        "/definitions/shown",
        "/fleet",
    ):
        status, body = _get(server, path)
        assert status == 200, (path, body[:500])
    assert "shown" in _get(server, f"/runs/{run_id}")[1]
    # The login itself can change nothing, whatever the UI would ask.
    with psycopg.connect(reader_url, autocommit=True) as reader:
        for statement in (
            f"SELECT rara_run_cancel({run_id})",
            f"UPDATE rara_runs SET cancel_requested = true WHERE id = {run_id}",
        ):
            try:
                reader.execute(statement)
            except psycopg.errors.InsufficientPrivilege:
                continue
            raise AssertionError(f"a reader could run {statement}")
