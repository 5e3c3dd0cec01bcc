"""Worker groups (``rara worker --processes N``, rara.worker.group): a supervisor and its
members as real processes, real signals, one LISTEN backend for the whole group."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from tests.support.history import check_history
from tests.support.runs import attempts_of, define, start, steps_of, wait_run
from tests.support.waiting import wait_until
from tests.support.workers import WorkerProcess

NAME = "rara-test-group"  # the application_name of the group's connections
LISTENER = f"{NAME} listener"  # its listener's (rara.worker.group.listener_url)


def _count(conn: psycopg.Connection[Any], where: str, *params: Any) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND " + where,
        params,
    ).fetchone()
    assert row is not None
    return int(row[0])


class Group:
    """A group's supervisor (``WorkerProcess``) and what its log says of its members."""

    def __init__(self, proc: WorkerProcess, processes: int) -> None:
        self.proc = proc
        self.ids = [f"{proc.id}-{k}" for k in range(processes)]

    def events(self, event: str) -> list[dict[str, Any]]:
        found = []
        for line in self.proc.log.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and entry.get("event") == event:
                found.append(entry)
        return found

    def pid_of(self, member: int) -> int:
        """The pid of member ``member`` now (its latest start)."""
        return int(
            [e for e in self.events("worker process started") if e["member"] == member][-1]["pid"]
        )

    def registered(self, conn: psycopg.Connection[Any]) -> bool:
        assert self.proc.proc.poll() is None, f"group exited:\n{self.proc.output()}"
        row = conn.execute(
            "SELECT count(*) FROM rara_workers WHERE id = ANY(%s) AND stopped_at IS NULL",
            (self.ids,),
        ).fetchone()
        return row is not None and row[0] == len(self.ids)


@pytest.fixture
def group(database_url: str, tmp_path: Path, conn: psycopg.Connection[Any]) -> Iterator[Any]:
    started: list[Group] = []

    def make(group_id: str, processes: int, **settings: Any) -> Group:
        url = make_conninfo(database_url, application_name=NAME)
        proc = WorkerProcess(
            url,
            group_id,
            tmp_path / f"{group_id}.log",
            artifact_root=tmp_path / "artifacts",
            processes=processes,
            **settings,
        )
        made = Group(proc, processes)
        started.append(made)
        wait_until(lambda: made.registered(conn), timeout=60, message="every member registered")
        return made

    yield make
    for made in started:  # members stop by themselves once their supervisor is gone
        if made.proc.proc.poll() is None:
            made.proc.signal(signal.SIGTERM)
            try:
                made.proc.wait(20)
            except Exception:
                made.proc.signal(signal.SIGKILL)
                made.proc.wait(10)


def _listening(conn: psycopg.Connection[Any]) -> bool:
    """The group's listener is connected and has run its LISTENs."""
    return _count(conn, "application_name = %s AND query LIKE 'LISTEN %%'", LISTENER) == 1


def test_a_group_of_three_runs_a_run_over_one_listening_backend(
    conn: psycopg.Connection[Any], group: Any
) -> None:
    grp = group("grp", 3, concurrency=2)
    wait_until(lambda: _listening(conn), message="the group's listener connected")
    # Its members hold connections of their own (pools), and LISTEN on none of them: a
    # backend's `query` is its last statement, and a listener's stays `LISTEN …` until its
    # first ping after 15 s of quiet.
    assert _count(conn, "application_name = %s", NAME) >= 3
    assert _count(conn, "application_name = %s AND query LIKE 'LISTEN %%'", NAME) == 0
    define(conn, "wide", [{"key": f"s{i}", "capability": "test.sleep@1"} for i in range(9)])
    run_id = start(conn, "wide", {"seconds": 0.3})
    wait_run(conn, run_id, status="succeeded", timeout=30)
    workers = {a["worker"] for a in attempts_of(conn, run_id)}
    assert workers <= set(grp.ids)
    assert len(workers) >= 2, workers  # 2 slots each, 9 steps: more than one member ran them
    assert _count(conn, "application_name = %s", LISTENER) == 1
    check_history(conn)


def test_a_ready_step_wakes_an_idle_member_through_the_relay(
    conn: psycopg.Connection[Any], group: Any
) -> None:
    # Polls 30 s apart: a step leased within seconds was announced, and the members hear
    # announcements only through the group's relay.
    grp = group("relayed", 2, poll_seconds=30.0)
    wait_until(lambda: _listening(conn), message="the group's listener connected")

    def idle() -> bool:
        # Each member heartbeat a second after it started and after the listener connected:
        # its first lease (at its start) and the one the relay's `connect` wakes are behind it.
        row = conn.execute(
            "SELECT bool_and(w.heartbeat_at > greatest(w.started_at, l.backend_start) "
            "+ interval '1 second') FROM rara_workers w, pg_stat_activity l "
            "WHERE w.id = ANY(%s) AND l.application_name = %s",
            (grp.ids, LISTENER),
        ).fetchone()
        return row is not None and bool(row[0])

    wait_until(idle, timeout=15, message="the members idle, polling 30 s apart")
    define(conn, "one", [{"key": "s", "capability": "test.echo@1"}])
    began = time.monotonic()
    run_id = start(conn, "one")
    wait_run(conn, run_id, status="succeeded", timeout=10)
    assert time.monotonic() - began < 10
    [attempt] = attempts_of(conn, run_id)
    assert attempt["worker"] in grp.ids


def test_sigterm_stops_the_group_gracefully(conn: psycopg.Connection[Any], group: Any) -> None:
    grace = 1.0
    # A sync handler that ignores cancel: its lease is released at the end of the grace.
    define(
        conn, "long", [{"key": "s", "capability": "test.sleep_sync@1", "retry": {"maxAttempts": 1}}]
    )
    grp = group("leaving", 2, shutdown_grace_seconds=grace)
    run_id = start(conn, "long", {"seconds": 60, "slow_attempts": 1, "ignore_cancel": True})
    wait_until(lambda: steps_of(conn, run_id)[0]["leased_by"] in grp.ids, message="the step leased")
    grp.proc.signal(signal.SIGTERM)
    signalled = time.monotonic()
    assert grp.proc.wait(grace + 10) == 0, grp.proc.output()
    assert time.monotonic() - signalled >= grace
    [step] = steps_of(conn, run_id)
    assert (step["status"], step["releases"]) == ("ready", 1)  # given back, not failed
    [attempt] = attempts_of(conn, run_id)
    assert attempt["outcome"] == "released"
    row = conn.execute(
        "SELECT bool_and(stopped_at IS NOT NULL) FROM rara_workers WHERE id = ANY(%s)", (grp.ids,)
    ).fetchone()
    assert row == (True,)
    assert len(grp.events("worker process started")) == 2  # none restarted on the way out


def test_a_second_sigint_skips_the_grace(conn: psycopg.Connection[Any], group: Any) -> None:
    define(
        conn, "long", [{"key": "s", "capability": "test.sleep_sync@1", "retry": {"maxAttempts": 1}}]
    )
    grp = group("hurried", 2, shutdown_grace_seconds=60.0)
    run_id = start(conn, "long", {"seconds": 120, "slow_attempts": 1, "ignore_cancel": True})
    wait_until(lambda: steps_of(conn, run_id)[0]["leased_by"] in grp.ids, message="the step leased")
    grp.proc.signal(signal.SIGINT)
    wait_until(  # the member running the step took it: its grace began
        lambda: grp.events("stopping: waiting for running attempts"),
        message="the first SIGINT taken",
    )
    grp.proc.signal(signal.SIGINT)
    assert grp.proc.wait(20) == 0, grp.proc.output()  # not the 60 s grace
    [step] = steps_of(conn, run_id)
    assert (step["status"], step["releases"]) == ("ready", 1)


def test_a_killed_member_is_restarted_and_the_run_completes(
    conn: psycopg.Connection[Any], group: Any
) -> None:
    define(
        conn,
        "crashy",
        [
            {
                "key": "s",
                "capability": "test.sleep@1",
                "retry": {"maxAttempts": 2, "initialDelay": "1ms"},
            }
        ],
    )
    grp = group("crashing", 2)
    run_id = start(conn, "crashy", {"seconds": 60, "slow_attempts": 1})
    victim_id = wait_until(
        lambda: steps_of(conn, run_id)[0]["leased_by"], message="the step leased"
    )
    member = grp.ids.index(victim_id)
    victim = grp.pid_of(member)
    os.kill(victim, signal.SIGKILL)
    wait_until(
        lambda: grp.pid_of(member) != victim, timeout=15, message="the killed member restarted"
    )
    [exited] = grp.events("worker process exited; restarting")
    assert (exited["member"], exited["pid"], exited["code"]) == (member, victim, -signal.SIGKILL)
    wait_run(conn, run_id, status="succeeded", timeout=30)
    first, second = attempts_of(conn, run_id)
    assert (first["worker"], first["outcome"]) == (victim_id, "lease_expired")
    assert second["outcome"] == "succeeded"
    grp.proc.signal(signal.SIGTERM)
    assert grp.proc.wait(20) == 0, grp.proc.output()
    check_history(conn)


def test_members_stop_by_themselves_when_the_supervisor_is_killed(
    conn: psycopg.Connection[Any], group: Any
) -> None:
    """Their relay breaks: a lost listener (they poll), and with nobody left to stop them,
    they stop themselves, gracefully."""
    grp = group("orphans", 2)
    grp.proc.signal(signal.SIGKILL)
    grp.proc.wait(10)
    wait_until(
        lambda: (
            conn.execute(
                "SELECT bool_and(stopped_at IS NOT NULL) FROM rara_workers WHERE id = ANY(%s)",
                (grp.ids,),
            ).fetchone()
            == (True,)
        ),
        timeout=20,
        message="the orphaned members stopped",
    )


def test_a_member_that_cannot_load_its_handlers_stops_the_group(
    database_url: str, tmp_path: Path
) -> None:
    """Exit 2 (rara.worker.main): starting it again cannot help, so the group exits 2."""
    proc = WorkerProcess(
        database_url, "broken", tmp_path / "broken.log", processes=2, handlers="no_such.module"
    )
    assert proc.wait(60) == 2, proc.output()
    assert "stopping the group" in proc.output()
