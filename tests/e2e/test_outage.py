"""Riding through a database outage shorter than the lease: nothing lost, nothing stalled.

The scenario is ``tests/support/outage.py`` (also ``make bench``'s ``outage`` section): a server
of the test's own, stopped at once (``pg_ctl stop -m immediate``) for 5 s and 45 s right after
the worker's heartbeat and for 20 s beginning 10 s after one, under a stream of runs, with a
lease of 60 s (a heartbeat every 20 s). Each outage ends before the leases held expire, so the
worker — retrying its heartbeat about every second (rara.worker.retry) — keeps every one: no
attempt is closed ``lease_expired``, every run succeeds, exactly once
(tests/support/history.py), and the first lease after the database's return comes within a few
seconds (every reconnect backs off 2 s at most), printed. After an outage during which a
heartbeat failed (20 s, 45 s) the next one comes within a few seconds of the return.

Before: after a failed heartbeat the worker waited its whole interval again (20 s, after up to
10 s waiting for a pool connection): the 20 s outage, ending between two of those, had its
leases confirmed only 15 s after the database was back (measured), the 45 s outage 30 s after,
past the lease of steps still running then.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.history import check_history
from tests.support.outage import OUTAGES, measure

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

HEARTBEAT_SECONDS = 20.0  # the worker's interval: a third of the lease
FIRST_LEASE_WITHIN = 10.0  # seconds after the database's return: no stall
FIRST_HEARTBEAT_WITHIN = 5.0  # after an outage that failed a heartbeat: retried every second


def test_outages_shorter_than_the_lease_lose_nothing(tmp_path: Path) -> None:
    checked: dict[str, int] = {}

    def check(conn: psycopg.Connection[Any]) -> None:
        checked.update(check_history(conn))

    result = measure(OUTAGES, lease_seconds=60.0, logs=tmp_path, check=check)
    print(result)
    assert result["worker_alive"], f"the worker died; logs in {tmp_path}"
    assert set(result["runs"]) == {"succeeded"}, result["runs"]
    assert checked, "the history was not checked"
    for row in result["outages"]:
        assert row["expired_leases"] == 0, row
        assert row["return_to_first_lease_s"] < FIRST_LEASE_WITHIN, row
        if row["after_heartbeat_s"] + row["outage_s"] > HEARTBEAT_SECONDS:
            assert row["return_to_first_heartbeat_s"] < FIRST_HEARTBEAT_WITHIN, row
