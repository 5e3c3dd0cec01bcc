"""`rara access isolate|open` on a database whose fleet is running: the switch takes every
policy table's lock, and runs start and steps are leased meanwhile — it must neither deadlock
with them (they take those tables in other orders) nor fail one of their statements."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

from rara.runs import start_run
from tests.support.definitions import apply
from tests.support.leasing import lease_now


def test_switching_isolation_under_a_running_fleet_never_deadlocks(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    apply(conn, "work", [{"key": "s", "capability": "work@1"}])
    stop = threading.Event()
    errors: list[BaseException] = []
    done = {"starts": 0, "leases": 0}

    def loop(what: str, act: Callable[[psycopg.Connection[Any]], object]) -> None:
        try:
            with psycopg.connect(database_url, autocommit=True) as mine:
                while not stop.is_set():
                    act(mine)
                    done[what] += 1
        except BaseException as exc:  # re-raised by the assertion below
            errors.append(exc)

    threads = [
        threading.Thread(
            target=loop, args=("starts", lambda c: start_run(c, "work", queue_anyway=True))
        ),
        threading.Thread(
            target=loop, args=("leases", lambda c: lease_now(c, ["work@1"], worker="w", limit=5))
        ),
    ]
    for t in threads:
        t.start()
    try:
        for _ in range(10):
            conn.execute("SELECT rara_namespace_isolation(true)")
            time.sleep(0.02)
            conn.execute("SELECT rara_namespace_isolation(false)")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert errors == []
    assert done["starts"] > 0
    assert done["leases"] > 0
