"""An attempt's ``ended_at`` is when its end took the step, not when the end's transaction
began: an end that waits for another step's row lock must not be stamped before progress the
attempt wrote, legitimately, while it still held its lease. The kind suite's invariant "no event
after its attempt ended" (tests/e2e/kind) reads these times; with ``now()`` it saw such events
as late writes."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg

from rara.runs import start_run
from tests.support.definitions import apply
from tests.support.leasing import lease_now
from tests.support.waiting import wait_until


def test_an_end_that_waited_is_stamped_after_the_progress_written_meanwhile(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    apply(conn, "t", [{"key": "a", "capability": "x@1"}, {"key": "b", "capability": "x@1"}])
    start_run(conn, "t", queue_anyway=True)
    first, second = sorted(lease_now(conn, ["x@1"], worker="w", limit=5), key=lambda s: s.id)
    successes = json.dumps(
        [
            {"id": s.id, "token": str(s.lease_token), "result": {}, "manifest": []}
            for s in (first, second)
        ]
    )

    def end_both() -> list[Any]:
        with psycopg.connect(database_url, autocommit=True) as ender:
            return ender.execute(
                "SELECT * FROM rara_step_end_many('w', %s)", (successes,)
            ).fetchall()

    with psycopg.connect(database_url) as blocker, ThreadPoolExecutor(1) as pool:
        # Someone holds the first step's row (a heartbeat, a reaper): the end starts, takes
        # the steps in id order, and waits at the first.
        blocker.execute("SELECT 1 FROM rara_steps WHERE id = %s FOR UPDATE", (first.id,))
        ending = pool.submit(end_both)
        wait_until(
            lambda: (
                conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND query LIKE '%%rara_step_end_many%%'"
                ).fetchone()
                == (1,)
            ),
            timeout=20,
            message="the end waiting for the first step's lock",
        )
        # Meanwhile the second attempt still owns its step: its progress is accepted.
        accepted = conn.execute(
            "SELECT * FROM rara_step_progress_many('w', %s, %s, '{1}', '{0.5}', '{half}',"
            " ARRAY['{}'::jsonb])",
            ([second.id], [second.lease_token]),
        ).fetchall()
        assert accepted == [(second.id,)]
        blocker.rollback()
        assert sorted(ending.result(timeout=30)) == sorted(
            [(first.id, "succeeded"), (second.id, "succeeded")]
        )
    row = conn.execute(
        "SELECT e.created_at < a.ended_at FROM rara_events e"
        " JOIN rara_attempts a USING (step_id, attempt) WHERE e.step_id = %s",
        (second.id,),
    ).fetchone()
    assert row == (True,), "the end is stamped before progress its attempt wrote while owning"


def test_a_lease_is_stamped_after_the_end_it_follows(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    """The lease's rounds are statements of their own: one may take a step whose previous
    attempt ended (and committed) after the lease's transaction began. The new attempt starts
    when the lease took the step, so never before the end it follows (the history checker's
    "no two owners overlap" reads these times; now() broke it by a millisecond under chaos)."""
    apply(conn, "t", [{"key": "a", "capability": "x@1"}])
    start_run(conn, "t", queue_anyway=True)
    [first] = lease_now(conn, ["x@1"], worker="w", limit=1)
    with psycopg.connect(database_url) as ender, psycopg.connect(database_url) as leaser:
        ender.execute("SELECT now()")  # the release's transaction begins: its available_at
        leaser.execute("SELECT now()")  # then the lease's, whose now() is earlier than the end
        ender.execute(
            "SELECT rara_step_release_many('w', %s, %s)", ([first.id], [first.lease_token])
        )
        ender.commit()
        [second] = lease_now(leaser, ["x@1"], worker="w2", limit=1)
        leaser.commit()
    assert second.id == first.id
    ended, started = conn.execute(
        "SELECT max(ended_at) FILTER (WHERE attempt = 1), max(started_at) FILTER"
        " (WHERE attempt = 2) FROM rara_attempts WHERE step_id = %s",
        (first.id,),
    ).fetchone()
    assert started >= ended
