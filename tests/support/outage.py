"""Riding through a database outage: the scenario tests/e2e/test_outage.py asserts and
``make bench``'s ``outage`` section reports (bench/outage.py). Test-only code, outside the
wheel; the benchmarks import it from here.

A server of its own (``temporary_server``), one worker process (concurrency 8, lease 60 s, its
heartbeat every 20 s) and a stream of short runs (``bench.sleep@1``, 2 s each, 2 runs/s,
started through the outages: the client retries). Per outage: two long runs that span it
start, the worker is asked for a heartbeat (a ``rara_cancel`` NOTIFY makes a worker holding
attempts ask the database at once: rara.worker.listener) and, ``after`` seconds after it landed, the
server is stopped at once (``pg_ctl stop -m immediate``: every connection dropped, as a crash
or a failover does), left down for the outage, and started again on the same port.

Two alignments (``OUTAGES``): right after a heartbeat (5 and 45 s) needs the longest ride — the
leases were last extended just before the outage began, so an answer must come within the lease
less the outage; 10 s after one (20 s) the database returns between two of the worker's
scheduled heartbeats, so only retrying soon confirms the leases soon. After the 45 s outage the
long runs sleep past the lease: keeping them takes a heartbeat after the return. Reported per
outage, from the server's return: the seconds to the worker's first heartbeat and to the first
lease (pool, lease loop and completion writes reconnected, a slot freed), and the leases that
expired (attempts closed ``lease_expired``). At the end every run must have succeeded;
``check`` (the test: tests/support/history.py) reads the database before it is dropped.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

from rara.pg.embedded import temporary_server
from rara.pg.migrate import migrate
from rara.runs import start_run
from tests.support.definitions import noop_definition
from tests.support.workers import worker_processes

Conn = psycopg.Connection[Any]
DEFINITION = "outage"
CONCURRENCY = 8
SHORT_SECONDS = 2.0
RUNS_PER_SECOND = 2.0
LONG_RUNS = 2
LONG_AFTER = 8.0  # how long a long run sleeps past the outage's end
# After an outage longer than half the lease the long runs sleep past the lease (plus this), so
# that keeping them takes a heartbeat after the return, not only the lease they were leased with.
PAST_LEASE = 5.0
# (outage seconds, seconds after the worker's heartbeat that it begins)
OUTAGES: tuple[tuple[float, float], ...] = ((5.0, 0.0), (20.0, 10.0), (45.0, 0.0))


def connect(url: str) -> Conn:
    return psycopg.connect(url, autocommit=True, connect_timeout=5)


def _retrying(url: str, what: Callable[[Conn], Any], within: float = 120.0) -> Any:
    """``what`` on a fresh connection, riding out the outage (as any client must)."""
    deadline = time.monotonic() + within
    while True:
        try:
            with connect(url) as conn:
                return what(conn)
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)
    return found


def scalar(conn: Conn, query: str, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


class _Stream(threading.Thread):
    """Starts a short run every 1/``RUNS_PER_SECOND`` s until stopped, riding the outages."""

    def __init__(self, url: str) -> None:
        super().__init__(name="outage-stream", daemon=True)
        self.url = url
        self.started = 0
        self.error: BaseException | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        due = time.monotonic()
        try:
            while not self._halt.is_set():
                key = f"short-{self.started}"

                def start(conn: Conn, key: str = key) -> None:
                    start_run(
                        conn,
                        DEFINITION,
                        input={"seconds": SHORT_SECONDS},
                        idempotency_key=key,
                        queue_anyway=True,
                    )

                _retrying(self.url, start)
                self.started += 1
                due += 1 / RUNS_PER_SECOND
                self._halt.wait(max(0.0, due - time.monotonic()))
        except BaseException as exc:  # surfaced by stop()
            self.error = exc

    def stop(self) -> int:
        self._halt.set()
        self.join(60)
        if self.error is not None:
            raise self.error
        return self.started


def _ride(
    url: str,
    server: Any,
    seconds: float,
    after: float,
    n: int,
    lease_seconds: float,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """One outage of ``seconds``, ``after`` seconds after a heartbeat; its figures."""
    with connect(url) as conn:
        expired_before = scalar(
            conn, "SELECT count(*) FROM rara_attempts WHERE outcome = 'lease_expired'"
        )
        sleep = after + seconds + LONG_AFTER
        if seconds > lease_seconds / 2:
            sleep = max(sleep, lease_seconds + PAST_LEASE)
        long_runs = [
            start_run(
                conn,
                DEFINITION,
                input={"seconds": sleep},
                idempotency_key=f"long-{n}-{i}",
                queue_anyway=True,
            ).run_id
            for i in range(LONG_RUNS)
        ]
        until(
            lambda: conn.execute(
                "SELECT min(id) FROM rara_steps WHERE run_id = ANY(%s) AND status = 'running' "
                "HAVING count(*) = %s",
                (long_runs, LONG_RUNS),
            ).fetchone(),
            60,
            "the long runs",
        )
        beat = scalar(conn, "SELECT max(heartbeat_at) FROM rara_workers")
        conn.execute("NOTIFY rara_cancel")  # a heartbeat now (cancels nothing)
        until(
            lambda: scalar(conn, "SELECT max(heartbeat_at) FROM rara_workers") != beat,
            30,
            "the worker's heartbeat",
        )
    time.sleep(after)  # (the scenario's alignment, not a wait for a condition)
    server.crash()
    down_at = time.monotonic()
    time.sleep(seconds)  # the outage itself
    server.resume()
    down = time.monotonic() - down_at
    with connect(url) as conn:
        # The return: when the server started (a heartbeat or lease may land before resume()
        # has returned, and rara_workers keeps only the latest heartbeat).
        back_wall = float(scalar(conn, "SELECT extract(epoch FROM pg_postmaster_start_time())"))
        beat_at: datetime = until(
            lambda: scalar(
                conn,
                "SELECT max(heartbeat_at) FROM rara_workers WHERE heartbeat_at > to_timestamp(%s)",
                (back_wall,),
            ),
            60,
            "a heartbeat after the outage",
        )
        first: datetime = until(
            lambda: scalar(
                conn,
                "SELECT min(started_at) FROM rara_attempts WHERE started_at > to_timestamp(%s)",
                (back_wall,),
            ),
            60,
            "a lease after the outage",
        )
        until(
            lambda: scalar(
                conn,
                "SELECT bool_and(status = 'succeeded') FROM rara_runs WHERE id = ANY(%s)",
                (long_runs,),
            ),
            sleep + 60,
            "the long runs to succeed",
        )
        expired = (
            scalar(conn, "SELECT count(*) FROM rara_attempts WHERE outcome = 'lease_expired'")
            - expired_before
        )
    to_lease, to_beat = first.timestamp() - back_wall, beat_at.timestamp() - back_wall
    say(
        f"outage {seconds:>4.0f} s, {after:.0f} s after a heartbeat (down {down:.1f} s): after "
        f"the database's return, first heartbeat {to_beat:.2f} s, first lease {to_lease:.2f} s; "
        f"expired leases {expired}"
    )
    return {
        "outage_s": seconds,
        "after_heartbeat_s": after,
        "down_s": round(down, 3),
        "return_to_first_heartbeat_s": round(to_beat, 3),
        "return_to_first_lease_s": round(to_lease, 3),
        "expired_leases": expired,
    }


def measure(
    outages: Sequence[tuple[float, float]] = OUTAGES,
    *,
    lease_seconds: float = 60.0,
    say: Callable[[str], None] = print,
    logs: Path | None = None,
    check: Callable[[Conn], None] | None = None,
) -> dict[str, Any]:
    """The scenario above; ``check(conn)`` runs on the database at the end, before it goes."""
    logs = logs or Path(tempfile.mkdtemp(prefix="rara-outage-logs-"))
    # Not ``fast``: with synchronous_commit off a crash loses commits already acknowledged (a
    # lease, a run's start) — no failover worth the name does that (docs/operations.md).
    server = temporary_server(fast=False)
    url = server.up()
    try:
        migrate(url)
        with connect(url) as conn:
            noop_definition(conn, DEFINITION, capability="bench.sleep@1")
        with worker_processes(
            url,
            ["outage-w0"],
            logs,
            concurrency=CONCURRENCY,
            lease_seconds=lease_seconds,
            reaper_seconds=1.0,
        ) as procs:
            with connect(url) as conn:
                until(
                    lambda: scalar(conn, "SELECT count(*) FROM rara_workers") == 1,
                    60,
                    "the worker to register",
                )
            stream = _Stream(url)
            stream.start()
            try:
                rows = [
                    _ride(url, server, seconds, after, n, lease_seconds, say)
                    for n, (seconds, after) in enumerate(outages)
                ]
            finally:
                started = stream.stop()
            with connect(url) as conn:
                until(
                    lambda: (
                        scalar(
                            conn,
                            "SELECT count(*) FROM rara_runs WHERE status NOT IN "
                            "('succeeded', 'failed', 'cancelled')",
                        )
                        == 0
                    ),
                    120,
                    "every run to end",
                )
                runs = dict(
                    conn.execute(
                        "SELECT status::text, count(*) FROM rara_runs GROUP BY 1"
                    ).fetchall()
                )
                if check is not None:
                    check(conn)
            alive = all(p.poll() is None for p in procs)
        say(
            f"runs: {runs} ({started} short, {LONG_RUNS * len(outages)} long); worker "
            f"{'alive throughout' if alive else 'DIED'} (logs in {logs})"
        )
        return {
            "lease_seconds": lease_seconds,
            "outages": rows,
            "runs": runs,
            "worker_alive": alive,
            "logs": str(logs),
        }
    finally:
        server.destroy()
