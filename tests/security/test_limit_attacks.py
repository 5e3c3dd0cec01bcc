"""Size limits hold where the data enters, in the database (db/functions/limits.sql,
``rara_limits()``; docs/limits.md, "Size limits"): each attack calls the SQL functions directly,
past the Python client's checks, as the weakest login that can reach them. What is refused is
refused first — before the function's other work and before its namespace check — with
SQLSTATE 54000 naming the value and the limit, and nothing is written. A page shows a bounded
part of what it lists, and a step's lease carries only the run input fields its inputSchema
names."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg.types.json import Jsonb

from rara.definitions.model import WorkflowSpec
from rara.definitions.parse import MAX_SPEC_BYTES, MAX_SPEC_STEPS
from rara.pg.logins import ensure_login
from rara.runs import MAX_INPUT_BYTES, start_run
from rara.waits import MAX_PAYLOAD_BYTES
from tests.support.definitions import apply
from tests.support.runs import wait_run
from tests.support.workers import ThreadWorker

Conn = psycopg.Connection[Any]


def _one(conn: Conn, query: str, *params: Any) -> Any:
    row = conn.execute(query.encode(), params).fetchone()
    assert row is not None
    return row[0] if len(row) == 1 else row


def _limits(conn: Conn) -> dict[str, int]:
    return dict(_one(conn, "SELECT rara_limits()"))


def _refused(conn: Conn, query: str, *params: Any) -> tuple[psycopg.Error, float]:
    """The refusal of ``query`` and how long it took (ms, client round trip included)."""
    started = time.perf_counter()
    with pytest.raises(psycopg.Error) as refused:
        conn.execute(query.encode(), params)
    return refused.value, (time.perf_counter() - started) * 1000


def test_python_refuses_what_the_database_refuses_with_the_same_numbers(conn: Conn) -> None:
    limits = _limits(conn)
    assert limits["run_input_bytes"] == MAX_INPUT_BYTES
    assert limits["signal_payload_bytes"] == MAX_PAYLOAD_BYTES
    assert limits["spec_bytes"] == MAX_SPEC_BYTES
    assert limits["spec_steps"] == MAX_SPEC_STEPS
    steps = WorkflowSpec.model_fields["steps"].metadata
    assert any(getattr(m, "max_length", None) == MAX_SPEC_STEPS for m in steps)


def test_a_100k_step_spec_is_refused_before_any_work_even_without_a_namespace(
    conn: Conn, login: Callable[[str | None], Conn]
) -> None:
    # (sent as text, encoded once: the times below are the database's and the transfer's)
    spec = json.dumps({"steps": [{"key": f"s{i}", "capability": "x.y@1"} for i in range(100_000)]})
    query = "SELECT * FROM rara_definition_register('big', %s::jsonb)"
    # A login in no rara role may not call it at all.
    nobody, ms = _refused(login(None), query, spec)
    assert nobody.sqlstate == "42501", nobody
    print(f"\n100,000-step spec, login in no role: refused in {ms:.0f} ms ({nobody.sqlstate})")
    # A client with no namespace (isolation on, nothing granted): the size refusal comes first,
    # before the quadratic walk of the steps and before the namespace check.
    conn.execute("SELECT rara_namespace_isolation(true)")
    client = login("rara_client")
    refused, ms = _refused(client, query, spec)
    assert refused.sqlstate == "54000", refused
    assert refused.diag.message_primary == (
        "spec.steps is 100000 steps; the limit is 1000 steps (spec_steps, rara_limits())"
    )
    print(f"100,000-step spec, client without a namespace: refused in {ms:.0f} ms")
    fat = {"steps": [{"key": "a", "capability": "x.y@1", "input": {"blob": "x" * MAX_SPEC_BYTES}}]}
    refused, ms = _refused(client, query, json.dumps(fat))
    assert refused.sqlstate == "54000", refused
    assert "bytes; the limit is 1000000 bytes (spec_bytes" in str(refused.diag.message_primary)
    print(f"spec of 2x spec_bytes, client without a namespace: refused in {ms:.0f} ms")
    assert _one(conn, "SELECT count(*) FROM rara_definition_versions") == 0


def test_a_run_input_over_the_limit_is_refused_by_rara_run_start(
    conn: Conn, login: Callable[[str | None], Conn]
) -> None:
    version = apply(conn, "small", [{"key": "a", "capability": "test.noop@1"}])
    fat = {"blob": "x" * (2 * MAX_INPUT_BYTES)}
    refused, ms = _refused(
        login("rara_client"),
        "SELECT * FROM rara_run_start('small', NULL, %s, %s, NULL, false, 30)",
        version.digest,
        Jsonb(fat),
    )
    assert refused.sqlstate == "54000", refused
    assert refused.diag.message_primary == (
        f"run input is {2 * MAX_INPUT_BYTES + 12} bytes; the limit is {MAX_INPUT_BYTES} bytes"
        " (run_input_bytes, rara_limits())"
    )
    print(f"\nrun input of 2x run_input_bytes: refused in {ms:.0f} ms")
    assert _one(conn, "SELECT count(*) FROM rara_runs") == 0


def test_an_oversized_signal_payload_is_refused_and_the_step_still_waits(
    conn: Conn, login: Callable[[str | None], Conn]
) -> None:
    apply(conn, "gated", [{"key": "gate", "wait": {"signal": "go"}}])
    run_id = start_run(conn, "gated").run_id
    waiting = conn.execute("SELECT count(*) FROM rara_waits WHERE run_id = %s", (run_id,))
    assert waiting.fetchone() == (1,)
    client = login("rara_client")
    query = "SELECT accepted FROM rara_run_signal(%s, 'go', %s, 'k')"
    refused, ms = _refused(client, query, run_id, Jsonb({"p": "x" * (2 * MAX_PAYLOAD_BYTES)}))
    assert refused.sqlstate == "54000", refused
    assert refused.diag.message_primary == (
        f"signal go: its payload is {2 * MAX_PAYLOAD_BYTES + 9} bytes; the limit is"
        f" {MAX_PAYLOAD_BYTES} bytes (signal_payload_bytes, rara_limits())"
    )
    print(f"\nsignal payload of 2x signal_payload_bytes: refused in {ms:.0f} ms")
    assert _one(conn, "SELECT count(*) FROM rara_signals") == 0
    # (first, before even looking for the run: a run that is not there is not reached)
    refused, _ = _refused(client, query, 999_999, Jsonb({"p": "x" * (2 * MAX_PAYLOAD_BYTES)}))
    assert refused.sqlstate == "54000", refused
    assert client.execute(query.encode(), (run_id, Jsonb({"ok": True}))).fetchone() == (True,)
    wait_run(conn, run_id, status="succeeded")


def test_a_map_with_more_children_than_the_cap_fails_writing_none(
    conn: Conn, role_url: Callable[[str | None], str], tmp_path: Path
) -> None:
    cap = _limits(conn)["map_children"]
    apply(
        conn,
        "wide",
        [
            {"key": "list", "capability": "test.items@1", "input": {"count": cap + 1}},
            {
                "key": "each",
                "capability": "test.noop@1",
                "dependsOn": ["list"],
                "map": {"over": "list.result.items"},
            },
        ],
    )
    run_id = start_run(conn, "wide", queue_anyway=True).run_id
    worker = ThreadWorker(role_url("rara_worker"), tmp_path).start(conn)
    try:
        wait_run(conn, run_id, status="failed", timeout=60)
    finally:
        worker.stop()
    status, error, total = _one(
        conn,
        "SELECT status, error, map_total FROM rara_steps WHERE run_id = %s AND key = 'each'",
        run_id,
    )
    assert status == "failed"
    assert total is None
    assert error["code"] == "MAP_TOO_LARGE"
    assert error["message"] == (
        f"map.over list.result.items has {cap + 1} elements; the limit is {cap} children per"
        " map step (map_children, rara_limits())"
    )
    written = conn.execute(
        "SELECT (SELECT count(*) FROM rara_steps WHERE map_parent IS NOT NULL),"
        " (SELECT count(*) FROM rara_map_lists)"
    ).fetchone()
    assert written == (0, 0)


def test_a_client_logins_statements_are_cancelled_after_its_timeout(
    conn: Conn, database_url: str, role_url: Callable[[str | None], str]
) -> None:
    url = role_url("rara_client")
    name = urlsplit(url).username
    conn.execute("SELECT rara_login_limit(%s, 200)", (name,))
    with psycopg.connect(url, autocommit=True) as client:
        refused, ms = _refused(client, "SELECT pg_sleep(5)")
    assert refused.sqlstate == "57014", refused  # query_canceled: statement timeout
    assert ms < 4000
    print(f"\nclient login's pg_sleep(5): cancelled after {ms:.0f} ms")
    # ensure_login gives a client's or a reader's login the default; a worker's has none.
    made = {g: f"t_limit_{g}_{uuid.uuid4().hex[:8]}" for g in ("rara_client", "rara_worker")}
    try:
        for group, login_name in made.items():
            ensure_login(database_url, group, login_name)
        settings = dict(
            conn.execute(
                "SELECT r.rolname, s.setconfig FROM pg_roles r"
                " LEFT JOIN pg_db_role_setting s ON s.setrole = r.oid AND s.setdatabase = 0"
                " WHERE r.rolname = ANY (%s)",
                (list(made.values()),),
            ).fetchall()
        )
        timeout = _limits(conn)["statement_timeout_ms"]
        assert settings[made["rara_client"]] == [f"statement_timeout={timeout}"]
        assert settings[made["rara_worker"]] is None
    finally:
        for login_name in made.values():
            conn.execute(f'DROP ROLE IF EXISTS "{login_name}"'.encode())


def test_a_step_is_leased_only_the_input_fields_its_schema_names(
    conn: Conn, thread_worker: Callable[..., Any]
) -> None:
    apply(
        conn,
        "narrow",
        [
            {
                "key": "reads",
                "capability": "test.echo@1",
                "inputSchema": {"type": "object", "properties": {"limit": {"type": "integer"}}},
            },
            {"key": "whole", "capability": "test.echo@1"},
            {
                "key": "open",  # a schema that admits fields it does not name: the whole input
                "capability": "test.echo@1",
                "inputSchema": {
                    "type": "object",
                    "properties": {"limit": {"type": "integer"}},
                    "patternProperties": {"^b": {"type": "string"}},
                },
            },
        ],
    )
    fat = {"limit": 3, "blob": "x" * (MAX_INPUT_BYTES - 100)}
    run_id = start_run(conn, "narrow", input=fat, queue_anyway=True).run_id
    thread_worker()
    wait_run(conn, run_id, status="succeeded")
    seen = dict(
        conn.execute(
            "SELECT key, result -> 'input' FROM rara_steps WHERE run_id = %s", (run_id,)
        ).fetchall()
    )
    assert seen["reads"] == {"limit": 3}
    assert seen["whole"] == fat
    assert seen["open"] == fat


def test_a_run_page_shows_a_bounded_part_of_a_fat_input_and_of_a_wide_map(
    conn: Conn, ui_server: Callable[..., Any]
) -> None:
    apply(
        conn,
        "fat",
        [{"key": "each", "capability": "test.noop@1", "map": {"over": "input.items"}}],
    )
    fat = {"blob": "x" * (MAX_INPUT_BYTES - 2000), "items": list(range(150))}
    run_id = start_run(conn, "fat", input=fat, queue_anyway=True).run_id
    ui = ui_server()
    with urllib.request.urlopen(f"{ui.url}/runs/{run_id}", timeout=30) as answer:
        html = answer.read().decode()
    assert 'data-more-children="50"' in html  # 100 of the 150 children listed
    assert "… 50 more children" in html
    assert "data-clipped=" in html
    assert "more bytes, not shown" in html
    assert html.count("x" * 1000) <= 16  # the input's 254 KiB: at most SHOWN_BYTES of it
    print(f"\nrun page of a 254 KiB input and 150 children: {len(html)} bytes")
