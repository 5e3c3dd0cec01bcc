"""Step logs end to end in one worker: what each handler writes lands on its own attempt,
even with several steps running at once on the loop and in threads; the bound keeps head and
tail and says how much it dropped; secrets are masked before anything is stored; the log is
live while the step runs and complete before the attempt's end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from rara.pg.step_logs import LogCursor, list_chunks
from rara.step_output import HEAD_BYTES, TAIL_BYTES
from tests.support.runs import define, start, wait_run
from tests.support.waiting import wait_until
from tests.worker.log_handlers import LOG_HANDLERS


def log_of(conn: psycopg.Connection[Any], run_id: int, key: str, attempt: int = 1) -> str:
    return "".join(
        c.body for c in list_chunks(conn, run_id, key, limit=10_000) if c.attempt == attempt
    )


def test_concurrent_steps_each_keep_their_own_output(
    conn: psycopg.Connection[Any], thread_worker: Any
) -> None:
    """Three async and three sync handlers at once in one worker: every line of each lands on
    its own step, in the order written, none on another's."""
    keys = [f"a{i}" for i in range(3)] + [f"t{i}" for i in range(3)]
    define(
        conn,
        "chatty",
        [
            {"key": k, "capability": f"test.log.{'chatty' if k[0] == 'a' else 'chatty_sync'}@1"}
            for k in keys
        ],
    )
    thread_worker(handlers=[LOG_HANDLERS], concurrency=6)
    run_id = start(conn, "chatty", {"lines": 30})
    wait_run(conn, run_id, status="succeeded")
    for key in keys:
        text = log_of(conn, run_id, key)
        outs = [line for line in text.splitlines() if " out " in line]
        assert outs == [f"{key} out {i}" for i in range(30)], text[:500]
        logged = [line for line in text.splitlines() if "logged" in line]
        assert logged == [f"WARNING tests.chatty: {key} logged {i}" for i in range(30)]
        if key[0] == "a":
            assert f"{key} err 29" in text
        others = [k for k in keys if k != key]
        assert not any(f"{k} " in text for k in others), text[:500]


def test_the_bound_keeps_head_and_tail_and_counts_what_it_dropped(
    conn: psycopg.Connection[Any], thread_worker: Any
) -> None:
    lines = 30_000  # 3,000,000 bytes of output
    define(conn, "flood", [{"key": "f", "capability": "test.log.flood@1"}])
    thread_worker(handlers=[LOG_HANDLERS])
    run_id = start(conn, "flood", {"lines": lines})
    wait_run(conn, run_id, status="succeeded")
    chunks = list_chunks(conn, run_id, "f", limit=10_000)
    assert [c.seq for c in chunks] == list(range(1, len(chunks) + 1))
    dropped = lines * 100 - HEAD_BYTES - TAIL_BYTES
    [marked] = [c for c in chunks if c.dropped]
    assert marked.dropped == dropped
    text = "".join(c.body for c in chunks)
    head, marker, tail = text.partition(f"[rara: {dropped} bytes of output dropped here")
    assert marker, text[HEAD_BYTES - 100 : HEAD_BYTES + 300]
    assert len(head.encode()) == HEAD_BYTES
    assert head.startswith("00000000xxx")
    tail = tail.split("\n", 1)[1]  # the rest of the marker's line
    assert len(tail.encode()) == TAIL_BYTES
    assert tail.endswith(f"{lines - 1:08d}".ljust(99, "x") + "\n")
    assert sum(len(c.body.encode()) for c in chunks) < 1024 * 1024 + 1024


def test_secrets_are_masked_before_they_are_stored(
    conn: psycopg.Connection[Any], thread_worker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A secret the step resolved (printed in two writes), a password assignment, an AWS key
    id in a logging record: none is stored; NUL is stored as its escape."""
    monkeypatch.setenv("RARA_SECRET_TESTLOG_TOKEN", "tok-7f3a9c-private")
    define(conn, "secret", [{"key": "s", "capability": "test.log.secret@1"}])
    thread_worker(handlers=[LOG_HANDLERS])
    run_id = start(conn, "secret")
    wait_run(conn, run_id, status="succeeded")
    text = log_of(conn, run_id, "s")
    assert "the token is [REDACTED] (do not tell)" in text
    assert "tok-7f3a9c-private" not in text
    assert "private" not in text
    assert "sw0rdfish" not in text
    assert "AKIAABCDEFGHIJKLMNOP" not in text
    assert "key [REDACTED] in use" in text
    assert "NUL here:\\x00." in text
    stored = conn.execute("SELECT string_agg(body, '') FROM rara_step_logs").fetchone()
    assert stored is not None
    assert "tok-7f3a9c" not in stored[0]


def test_the_secrets_a_step_names_are_masked_however_it_reads_them(
    conn: psycopg.Connection[Any], thread_worker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RARA_SECRET_TESTLOG_TOKEN", "named-9d8c7b")
    secrets = {"TOKEN": {"name": "testlog", "key": "token"}, "GONE": {"name": "nowhere"}}
    define(conn, "leaky", [{"key": "l", "capability": "test.log.leaky@1", "secrets": secrets}])
    thread_worker(handlers=[LOG_HANDLERS])
    run_id = start(conn, "leaky")
    wait_run(conn, run_id, status="succeeded")
    assert log_of(conn, run_id, "l") == "leaking [REDACTED]!\n"


def test_the_log_is_live_while_the_step_runs_and_whole_before_its_end(
    conn: psycopg.Connection[Any], thread_worker: Any, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    define(
        conn,
        "live",
        [{"key": "w", "capability": "test.log.until@1", "retry": {"maxAttempts": 1}}],
    )
    thread_worker(handlers=[LOG_HANDLERS])
    run_id = start(conn, "live", {"release": str(release), "fail": True})
    cursor = LogCursor()
    first = wait_until(
        lambda: list_chunks(conn, run_id, "w", cursor), timeout=10, message="the first line"
    )
    assert "".join(c.body for c in first) == "w started\n"
    status = conn.execute("SELECT status::text FROM rara_steps WHERE run_id = %s", (run_id,))
    assert status.fetchone() == ("running",)
    release.touch()
    wait_run(conn, run_id, status="failed")
    rest = "".join(c.body for c in list_chunks(conn, run_id, "w", cursor))
    assert rest.startswith("w done\n")
    assert "Traceback" in rest
    assert "ValueError: boom after the release" in rest
