"""A database restart is not a worker failure: leases survive any outage shorter than the lease.

Real processes: a server of the test's own, stopped at once (``pg_ctl stop -m immediate``, as a
crash does: crash recovery on the way back) and started again on the same port, and two worker
processes with a lease of 30 s (a heartbeat every 10 s). Each outage begins 9 s after the
workers' heartbeat — the worst alignment: the leases were last extended 9 s before it, so an
outage of 21 s or more outlasts them — under long runs that span it. The rule
(docs/lease-protocol.md, "Outages"): a lease confirmed before the database's return stays alive
until a third of the lease plus 2 s after the return whatever its expiry, and a worker that saw
the database away keeps its attempts that long past their horizon.

- 5, 20 and 28 s: no lease reaped, every run succeeds, each step in one attempt.
- 45 s (longer than the lease): the attempts are given up at their horizon; after the return
  their worker gives their leases back (or the reaper ends them), and they run again; every
  run succeeds.
- A worker SIGKILLed during a 20 s outage: its leases are reaped within lease + heartbeat
  of the database's return, and its steps run again on the other worker.

Every phase ends with the ownership history checked (tests/support/history.py): never two
owners of a step, fenced writes inside their attempt. The figures are printed (``-s``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rara.pg.embedded import temporary_server
from rara.pg.migrate import migrate
from rara.runs import start_run
from tests.support.definitions import noop_definition
from tests.support.history import check_history
from tests.support.outage import connect, scalar, until
from tests.support.workers import worker_processes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

Conn = psycopg.Connection[Any]
LEASE = 30.0
HEARTBEAT = LEASE / 3
AFTER_BEAT = 9.0  # the outage begins this long after the workers' heartbeat
PAST = 4.0  # the runs sleep this long past the outage's end
RUNS = 4


def _outage(
    url: str, server: Any, seconds: float, n: int, kill: Callable[[], None] | None = None
) -> dict[str, Any]:
    """Long runs across an outage of ``seconds`` (``kill`` called in its middle); once they
    ended, the figures: their steps' attempts by outcome, the most attempts of one step, and
    when the database came back (epoch seconds)."""
    with connect(url) as conn:
        runs = [
            start_run(
                conn,
                "outage",
                input={"seconds": AFTER_BEAT + seconds + PAST},
                idempotency_key=f"outage-{n}-{i}",
                queue_anyway=True,
            ).run_id
            for i in range(RUNS)
        ]
        until(
            lambda: (
                scalar(
                    conn,
                    "SELECT count(*) FROM rara_steps WHERE run_id = ANY(%s) AND status = 'running'",
                    (runs,),
                )
                == RUNS
            ),
            60,
            "the runs to start",
        )
        beats = conn.execute("SELECT id, heartbeat_at FROM rara_workers").fetchall()
        conn.execute("NOTIFY rara_cancel")  # every worker holding attempts heartbeats now
        until(
            lambda: all(
                scalar(conn, "SELECT heartbeat_at FROM rara_workers WHERE id = %s", (w,)) != at
                for w, at in beats
            ),
            30,
            "the workers' heartbeats",
        )
    time.sleep(AFTER_BEAT)  # (the scenario's alignment, not a wait for a condition)
    server.crash()
    if kill is not None:
        kill()
    time.sleep(seconds)  # the outage itself
    server.resume()
    with connect(url) as conn:
        back = float(scalar(conn, "SELECT extract(epoch FROM rara_db_return())"))
        until(
            lambda: scalar(
                conn,
                "SELECT bool_and(status = 'succeeded') FROM rara_runs WHERE id = ANY(%s)",
                (runs,),
            ),
            AFTER_BEAT + seconds + PAST + 3 * LEASE,
            "the runs to succeed",
        )
        outcomes = dict(
            conn.execute(
                "SELECT a.outcome::text, count(*) FROM rara_attempts a "
                "JOIN rara_steps s ON s.id = a.step_id WHERE s.run_id = ANY(%s) GROUP BY 1",
                (runs,),
            ).fetchall()
        )
        most = scalar(conn, "SELECT max(attempt) FROM rara_steps WHERE run_id = ANY(%s)", (runs,))
        check_history(conn, writes=True)
    return {
        "outage_s": seconds,
        "outcomes": outcomes,
        "most_attempts": most,
        "back": back,
        "runs": runs,
    }


def test_leases_survive_outages_shorter_than_the_lease(tmp_path: Path) -> None:
    began = time.monotonic()
    # Not ``fast``: a crash must not lose acknowledged commits (docs/operations.md).
    server = temporary_server(fast=False)
    url = server.up()
    try:
        migrate(url)
        with connect(url) as conn:
            noop_definition(conn, "outage", capability="bench.sleep@1")
        with worker_processes(
            url,
            ["lease-w0", "lease-w1"],
            tmp_path,
            concurrency=RUNS // 2,  # the runs of a phase on both workers
            lease_seconds=LEASE,
            reaper_seconds=1.0,
        ) as procs:
            with connect(url) as conn:
                until(
                    lambda: scalar(conn, "SELECT count(*) FROM rara_workers") == 2,
                    60,
                    "the workers to register",
                )
            for n, seconds in enumerate((5.0, 20.0, 28.0)):
                row = _outage(url, server, seconds, n)
                print(row)
                assert row["outcomes"] == {"succeeded": RUNS}, row
                assert row["most_attempts"] == 1, row

            # Longer than the lease: the attempts given up, their leases given back by their
            # worker on its return (released) or reaped, retried; nothing lost.
            row = _outage(url, server, 45.0, 3)
            print(row)
            outcomes = row["outcomes"]
            assert outcomes.pop("succeeded") == RUNS, row
            assert set(outcomes) <= {"released", "lease_expired"}, row
            assert sum(outcomes.values()) == RUNS, row
            assert row["most_attempts"] == 2, row

            # w1 SIGKILLed during an outage: its leases are reaped after the return, w0's kept.
            row = _outage(url, server, 20.0, 4, kill=procs[1].kill)
            print(row)
            with connect(url) as conn:
                reaped = conn.execute(
                    "SELECT a.worker, extract(epoch FROM a.ended_at) FROM rara_attempts a "
                    "JOIN rara_steps s ON s.id = a.step_id "
                    "WHERE s.run_id = ANY(%s) AND a.outcome = 'lease_expired'",
                    (row["runs"],),
                ).fetchall()
            assert reaped, f"the killed worker held none of the runs: {row}"
            assert {w for w, _ in reaped} == {"lease-w1"}, reaped
            late = max(float(at) - row["back"] for _, at in reaped)
            print(f"the killed worker's {len(reaped)} leases reaped {late:.1f} s after the return")
            assert late < LEASE + HEARTBEAT, late
            assert row["outcomes"] == {"succeeded": RUNS, "lease_expired": len(reaped)}, row
            assert procs[0].poll() is None, f"the worker died; logs in {tmp_path}"
    finally:
        server.destroy()
    print(f"wall {time.monotonic() - began:.0f} s")
