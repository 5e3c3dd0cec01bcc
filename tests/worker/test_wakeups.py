"""What wakes an idle worker (docs/lease-protocol.md, "Wake-ups"): while its LISTEN connection is
up it polls only every ``listening_poll_seconds``, so a step that a limit, a quota or a
concurrency key held back must start on the ``rara_ready`` its blocker's end sends
(``rara_admission_freed``), well before that poll; without a listener the short poll
(``poll_seconds``) finds it. Real workers on a real PostgreSQL; the blocking attempts are
leased and ended by hand, as another worker's, so that no slot of the worker under test frees
and wakes it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from rara.pg import limits
from rara.runs import start_run
from rara.worker.leasing import Leasing
from tests.db.test_map_steps import _end, _won
from tests.support.definitions import apply
from tests.support.leasing import lease_now
from tests.support.waiting import wait_until
from tests.support.workers import ThreadWorker

A = "team-a"
LONG = {"poll_seconds": 30.0, "listening_poll_seconds": 60.0}  # no poll within a test


def _status(conn: psycopg.Connection[Any], run_id: int) -> str:
    [(status,)] = conn.execute("SELECT status FROM rara_runs WHERE id = %s", (run_id,)).fetchall()
    return str(status)


@pytest.fixture
def naps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The lease loop's sleeps, as they begin (the longest each may be), in order."""
    seen: list[float] = []
    sleep = Leasing._sleep

    async def recorded(self: Leasing, seconds: float) -> None:
        seen.append(seconds)
        await sleep(self, seconds)

    monkeypatch.setattr(Leasing, "_sleep", recorded)
    return seen


def _idle(worker: ThreadWorker, naps: list[float], poll: float) -> None:
    """Until the worker listens and its lease loop sleeps its long poll, with no wake-up
    pending: nothing but an event wakes it now. (Read from another thread: the same sleep
    seen twice, a little apart, is not a lease's moment between two.)"""

    def asleep() -> int | None:
        leasing = worker.worker.leasing if worker.worker is not None else None
        if leasing is None or not leasing.listening or leasing.wake.is_set():
            return None
        return len(naps) if naps and naps[-1] == poll else None

    def still_asleep() -> bool:
        before = asleep()
        time.sleep(0.1)
        return before is not None and asleep() == before

    wait_until(still_asleep, message="the worker listening and asleep")


# Each policy: (set it up, the blocker's capability, the waiting step's capability)
Policy = Callable[[psycopg.Connection[Any]], None]
POLICIES: dict[str, tuple[Policy, str, str]] = {
    "limit": (lambda c: limits.set_limit(c, "test.noop@1", 1), "test.noop@1", "test.noop@1"),
    "quota": (lambda c: limits.set_quota(c, A, "test.noop@1", 1), "test.noop@1", "test.noop@1"),
    "quota-of-all": (
        lambda c: limits.set_quota(c, A, limits.EVERY_CAPABILITY, 1),
        "test.sleep@1",
        "test.noop@1",
    ),
    "key": (lambda c: None, "test.sleep@1", "test.noop@1"),
}


@pytest.mark.parametrize("policy", list(POLICIES))
def test_a_held_back_step_starts_when_its_blocker_ends(
    conn: psycopg.Connection[Any],
    database_url: str,
    thread_worker: Any,
    naps: list[float],
    policy: str,
) -> None:
    setup, blocking, waiting = POLICIES[policy]
    # (a key: one group, shared by two capabilities' steps, at most one per customer)
    key = {"concurrency": {"key": "input.customer", "max": 1, "group": "crm"}}
    extra = key if policy == "key" else {}
    apply(conn, "blocker", [{"key": "s", "capability": blocking, **extra}], namespace=A)
    apply(conn, "waiter", [{"key": "s", "capability": waiting, **extra}], namespace=A)
    setup(conn)
    start_run(conn, "blocker", input={"customer": "acme"}, namespace=A, queue_anyway=True)
    [blocker] = lease_now(conn, [blocking], worker="w", limit=1)
    run_id = start_run(
        conn, "waiter", input={"customer": "acme"}, namespace=A, queue_anyway=True
    ).run_id
    worker = thread_worker(capabilities=[waiting], **LONG)
    _idle(worker, naps, LONG["listening_poll_seconds"])
    assert _status(conn, run_id) == "pending"  # held back
    ended = time.monotonic()
    _end(database_url, _won(blocker))
    wait_until(lambda: _status(conn, run_id) == "succeeded", timeout=10, message="waiter ran")
    assert time.monotonic() - ended < 5  # by the notification: the poll is a minute


def test_without_a_listener_the_short_poll_finds_what_sent_nothing(
    conn: psycopg.Connection[Any], thread_worker: Any, naps: list[float]
) -> None:
    apply(conn, "work", [{"key": "s", "capability": "test.noop@1"}])
    limits.set_limit(conn, "test.noop@1", 0)  # paused
    run_id = start_run(conn, "work", queue_anyway=True).run_id
    worker = thread_worker(listen=False, poll_seconds=0.3, listening_poll_seconds=60.0)
    wait_until(lambda: naps and naps[-1] == 0.3, message="the worker's first, empty, lease")
    assert worker.worker is not None
    assert not worker.worker.leasing.listening
    # Unpaused behind the functions' back: nothing is notified (rara_capability_limit_set
    # would). The poll finds it.
    conn.execute("DELETE FROM rara_capability_limits")
    wait_until(lambda: _status(conn, run_id) == "succeeded", timeout=5, message="the poll")


def test_a_lost_listener_polls_short_until_it_is_back(
    conn: psycopg.Connection[Any], thread_worker: Any, naps: list[float]
) -> None:
    apply(conn, "work", [{"key": "s", "capability": "test.noop@1"}])
    limits.set_limit(conn, "test.noop@1", 0)
    first = start_run(conn, "work", queue_anyway=True).run_id
    worker = thread_worker(poll_seconds=0.3, listening_poll_seconds=60.0)
    _idle(worker, naps, 60.0)
    assert worker.worker is not None
    leasing = worker.worker.leasing
    assert leasing.poll == 60.0
    # Listening, an event that sends nothing waits for the long poll: not found at once.
    conn.execute("DELETE FROM rara_capability_limits")
    deadline = time.monotonic() + 1.5  # five short polls
    while time.monotonic() < deadline:
        assert _status(conn, first) == "pending"
        time.sleep(0.1)
    # The listener's connection dies: the worker looks at once, and polls short.
    conn.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE datname = current_database() AND query LIKE 'LISTEN rara_%%'"
    )
    wait_until(lambda: _status(conn, first) == "succeeded", timeout=5, message="looked on loss")
    # Back, and long again (the reconnect wakes the loops: what was sent meanwhile is gone).
    wait_until(lambda: leasing.listening, message="the listener back")
    assert leasing.poll == 60.0
