"""A paused run with a real worker (docs/state-machines.md, "Paused runs"): its running step
finishes, its ready step and what the running one unblocks are not leased however often the
worker leases — each lease woken by a `rara_ready` naming their capability — and the resume
wakes the worker, which runs them at once."""

from __future__ import annotations

from typing import Any

import psycopg

from rara.client import Client
from tests.support.runs import attempts_of, define, start, steps_of, wait_run
from tests.support.waiting import wait_until
from tests.worker.handlers import OPENED, SEEN
from tests.worker.test_wakeups import LONG, _idle, naps  # noqa: F401 (naps: a fixture)

LEASES_WATCHED = 3  # leases of a free slot that must take nothing of the paused run


def test_a_paused_run_leases_nothing_new_until_it_is_resumed(
    conn: psycopg.Connection[Any],
    database_url: str,
    thread_worker: Any,
    naps: list[float],  # noqa: F811
) -> None:
    define(
        conn,
        "pausable",
        [
            {"key": "a", "capability": "test.until_opened@1"},
            {"key": "b", "capability": "test.until_opened@1"},
            {"key": "c", "capability": "test.echo@1", "dependsOn": ["a"]},
        ],
    )
    # One slot: a (the lower id in their lane) runs, b waits ready behind it. Long polls: only
    # an event wakes the worker.
    worker = thread_worker(concurrency=1, **LONG)
    _idle(worker, naps, LONG["listening_poll_seconds"])
    run_id = start(conn, "pausable")
    wait_until(lambda: "started" in SEEN.get(f"{run_id}:a", {}), message="a running")
    client = Client(database_url)
    assert client.pause_run(run_id).steps == 1  # b
    OPENED.update({f"{run_id}:a", f"{run_id}:b"})
    wait_until(lambda: steps_of(conn, run_id)[0]["status"] == "succeeded", message="a's end")
    assert [s["status"] for s in steps_of(conn, run_id)] == ["succeeded", "ready", "ready"]
    for _ in range(LEASES_WATCHED):
        before = len(naps)
        conn.execute(
            "SELECT pg_notify('rara_ready', c) FROM unnest(%s::text[]) c",
            (["test.until_opened@1", "test.echo@1"],),
        )
        wait_until(lambda: len(naps) > before, message="the worker woken, leased, asleep")  # noqa: B023
    assert [a["key"] for a in attempts_of(conn, run_id)] == ["a"]
    assert client.get_run(run_id).phase_text == "paused"
    assert client.unpause_run(run_id).steps == 2
    # Within seconds, not the worker's 60 s poll: the resume's rara_ready woke it.
    wait_run(conn, run_id, status="succeeded", timeout=10)
    assert sorted(a["key"] for a in attempts_of(conn, run_id)) == ["a", "b", "c"]
    assert steps_of(conn, run_id)[0]["result"] == {"opened": True}
