"""Concurrency limits per capability (migration 0009, docs/limits.md): enforced in the lease
across workers and executor kinds, read by the operator's scaling, set by `rara limits`."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rara.pg import limits
from rara.pg import steps as step_sql
from rara.pg.queries import many
from rara.pg.runs import enqueue_many
from rara.worker.store import LEASED
from tests.db.test_map_steps import _end, _won
from tests.support.definitions import apply
from tests.support.leasing import lease_now


def _ready(conn: psycopg.Connection[Any], n: int, executor: str = "inprocess") -> None:
    apply(conn, f"gpu-{executor}", [{"key": "s", "capability": "gpu@1", "executor": executor}])
    enqueue_many(
        conn,
        definition=f"gpu-{executor}",
        version=None,
        runs=n,
        steps=1,
        key="s",
        capability="gpu@1",
        executor=executor,
    )


def test_the_lease_runs_no_more_than_the_limit(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    _ready(conn, 5)
    limits.set_limit(conn, "gpu@1", 2)
    first = lease_now(conn, ["gpu@1"], worker="w", limit=10)
    assert len(first) == 2
    assert lease_now(conn, ["gpu@1"], worker="w", limit=10) == []
    _end(database_url, _won(first[0]))  # a slot frees
    assert len(lease_now(conn, ["gpu@1"], worker="w", limit=10)) == 1
    limits.set_limit(conn, "gpu@1", 0)  # paused
    _end(database_url, _won(first[1]))
    assert lease_now(conn, ["gpu@1"], worker="w", limit=10) == []
    limits.set_limit(conn, "gpu@1", None)  # no limit any more
    assert len(lease_now(conn, ["gpu@1"], worker="w", limit=10)) == 2
    assert limits.list_all(conn) == []


def test_its_slots_are_shared_by_executor_kinds_and_by_concurrent_workers(
    conn: psycopg.Connection[Any], database_url: str
) -> None:
    _ready(conn, 4, "inprocess")
    _ready(conn, 4, "grpc")
    limits.set_limit(conn, "gpu@1", 3)
    both = many(
        conn,
        "step_lease",
        LEASED,
        capabilities=["gpu@1", "gpu@1"],
        executors=["inprocess", "grpc"],
        limit=10,
        worker="w",
        lease_seconds=30,
        after_ranks=None,
        after_ats=None,
        after_ids=None,
        after_namespaces=None,
        except_namespaces=None,
    )
    assert len(both) == 3
    limits.set_limit(conn, "gpu@1", 6)
    # Eight workers at once: the limit's row makes them take turns; together, 3 more.
    leased: list[int] = []
    start = threading.Barrier(8)

    def lease(n: int) -> None:
        with psycopg.connect(database_url, autocommit=True) as mine:
            start.wait()
            leased.append(
                len(
                    lease_now(
                        mine,
                        ["gpu@1"],
                        worker=f"w{n}",
                        limit=10,
                        executor="grpc" if n % 2 else "inprocess",
                    )
                )
            )

    threads = [threading.Thread(target=lease, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sum(leased) == 3
    assert conn.execute("SELECT count(*) FROM rara_steps WHERE status = 'running'").fetchone() == (
        6,
    )


def test_the_operator_scales_by_what_the_limit_lets_run(conn: psycopg.Connection[Any]) -> None:
    _ready(conn, 5)
    limits.set_limit(conn, "gpu@1", 2)
    [row] = step_sql.backlog(conn)
    assert (row.ready, row.running, row.max_running, row.workable) == (5, 0, 2, 2)


def test_who_may_set_limits(conn: psycopg.Connection[Any], role_url: Any) -> None:
    with psycopg.connect(role_url("rara_client"), autocommit=True) as client:
        limits.set_limit(client, "gpu@1", 1)
    with (
        psycopg.connect(role_url("rara_worker"), autocommit=True) as worker,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        limits.set_limit(worker, "gpu@1", 100)
    assert [(r.capability, r.max_running) for r in limits.list_all(conn)] == [("gpu@1", 1)]


def test_the_cli_sets_lists_and_refuses_a_bad_capability(database_url: str) -> None:
    def rara(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(Path(sys.executable).parent / "rara"), "limits", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "DATABASE_URL": database_url, "COLUMNS": "120"},
        )

    assert rara("set", "adapt.lora@1", "2").returncode == 0
    listed = rara()
    assert listed.returncode == 0
    assert "adapt.lora@1" in listed.stdout
    bad = rara("set", "GPU", "2")
    assert bad.returncode == 2
    assert "capability 'GPU' is not name@major" in bad.stderr
    assert "Traceback" not in bad.stderr
    assert rara("unset", "adapt.lora@1").returncode == 0
    assert "no limits" in rara().stdout
