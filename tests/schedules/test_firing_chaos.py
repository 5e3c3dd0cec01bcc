"""Schedules under chaos: two `rara schedules run` processes, each SIGKILLed and restarted at
random, while 200 ticks of a 1 s schedule pass. From the history afterwards: one run per tick,
no tick twice, none missed (the deadline covers the moments both are down)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rara.pg import schedules as schedule_sql
from tests.schedules.conftest import MakeSchedule
from tests.support.schedule_history import DecidedTick, tick_violations
from tests.support.waiting import wait_until

TICKS = 200


def _firer(url: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DATABASE_URL": url}
    with open(log, "ab") as out:
        return subprocess.Popen(
            [str(Path(sys.executable).parent / "rara"), "schedules", "run"],
            env=env,
            stdout=out,
            stderr=out,
        )


@pytest.mark.timeout(420)
def test_two_firers_killed_at_random_fire_each_tick_once(
    conn: psycopg.Connection[Any],
    make_schedule: MakeSchedule,
    role_url: Callable[[str], str],
    tmp_path: Path,
) -> None:
    name = make_schedule("chaos", startingDeadlineSeconds=30, successfulRunsHistoryLimit=1000)
    row = schedule_sql.get(conn, name, namespace="default")
    assert row is not None
    first = row.next_tick
    last = first + timedelta(seconds=TICKS - 1)
    url = role_url("rara_client")
    rng = random.Random(33)
    firers = [_firer(url, tmp_path / f"firer{i}.log") for i in range(2)]
    kills = 0
    try:
        while schedule_sql.get(conn, name, namespace="default").next_tick <= last:  # type: ignore[union-attr]
            time.sleep(rng.uniform(0.2, 2.5))  # the chaos's cadence, not a wait for state
            i = rng.randrange(2)
            firers[i].send_signal(signal.SIGKILL)
            firers[i].wait(10)
            kills += 1
            if rng.random() < 0.3:  # sometimes both are down a while
                time.sleep(rng.uniform(0.5, 3.0))
            firers[i] = _firer(url, tmp_path / f"firer{i}.log")

        def decided() -> bool:
            row = schedule_sql.get(conn, name, namespace="default")
            return row is not None and row.last_tick is not None and row.last_tick >= last

        wait_until(decided, 60, f"tick {last} decided")
    finally:
        for firer in firers:
            firer.send_signal(signal.SIGKILL)
            firer.wait(10)
    assert kills >= 50
    history = [
        DecidedTick(tick, outcome, run_id)
        for tick, outcome, run_id in conn.execute(
            "SELECT tick, outcome, run_id FROM rara_schedule_ticks WHERE schedule = %s",
            (name,),
        )
    ]
    run_keys = dict(
        conn.execute(
            "SELECT id, idempotency_key FROM rara_runs WHERE idempotency_key LIKE %s",
            (f"schedule:{name}:%",),
        ).fetchall()
    )
    expected = [first + timedelta(seconds=s) for s in range(TICKS)]
    assert tick_violations(name, expected, history, run_keys) == []
    total = conn.execute("SELECT count(*) FROM rara_runs").fetchone()
    assert total == (len(run_keys),)  # every run is the schedule's
    row = schedule_sql.get(conn, name, namespace="default")
    assert row is not None
    assert row.missed_ticks == 0
