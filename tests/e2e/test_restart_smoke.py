"""Restart smoke under chaos: nothing lost, nothing done twice.

A real PostgreSQL (the session's test server, restarted once mid-way), 3 worker processes and
1 executor process run ≥ 300 runs of a 4-step definition — ``prepare`` (in-process) fans out
to ``shard-a`` and ``shard-b`` (grpc; ``shard-a`` checkpoints and resumes) which join in
``merge`` (in-process, consuming the shards' artifacts). Every step reports progress several
times and records one effect in a ledger keyed by its idempotency key (``chaos_ledger`` for
in-process steps, a file ledger for the executor's), check-then-insert with no unique
constraint, only once it is about to complete.

Meanwhile a seeded chaos driver (``RARA_CHAOS_SEED`` replays its plan) SIGKILLs and restarts
workers and the executor, SIGTERMs workers (graceful release) and restarts PostgreSQL once.
Leases are 2 s. After ``RARA_CHAOS_SECONDS`` (default 60) the fleet drains against a deadline
(``RARA_CHAOS_DRAIN_SECONDS``, default 90), stops, and the invariants are checked
(tests/e2e/chaos/invariants.py): every run and step succeeded with exactly one succeeded
attempt, exactly one effect per step (duplicates 0, lost work 0, no effect made outside its
attempt's ownership), no lease left running, progress seqs without gaps, checkpoint resumes
exact, fenced writes inside their attempt, and ``check_history``. The summary is printed and
written as JSON to ``$RARA_CHAOS_REPORT`` when set.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rara.pg.embedded import EmbeddedPostgres
from rara.runs import start_run
from tests.e2e.chaos import handlers
from tests.e2e.chaos.fleet import (
    EXECUTOR_SIGKILL,
    POSTGRES_RESTART,
    WORKER_SIGKILL,
    WORKER_SIGTERM,
    ChaosDriver,
    Service,
    free_port,
    make_plan,
)
from tests.e2e.chaos.invariants import evaluate, format_summary
from tests.support.definitions import apply

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

RUNS = int(os.environ.get("RARA_CHAOS_RUNS", "300"))
WORKERS = 3
LEASE = {
    "lease-seconds": 2.0,
    "heartbeat-seconds": 0.5,
    "reaper-seconds": 0.5,
    "poll-seconds": 0.5,
    "shutdown-grace-seconds": 0.3,
    "cancel-grace-seconds": 0.3,
    "concurrency": 6,
}
RETRY = {"maxAttempts": 40, "initialDelay": "50ms", "maxDelay": "1s", "backoffCoefficient": 2}
STEPS: list[dict[str, Any]] = [
    {
        "key": "prepare",
        "capability": "chaos.work@1",
        "executor": "inprocess",
        "retry": RETRY,
        "input": {"reports": 4, "seconds": 0.25},
    },
    {
        "key": "shard-a",
        "dependsOn": ["prepare"],
        "capability": "chaos.shard@1",
        "executor": "grpc",
        "retry": RETRY,
        "timeout": "60s",
        "input": {"chunks": 5, "seconds": 0.35, "checkpoint": True},
    },
    {
        "key": "shard-b",
        "dependsOn": ["prepare"],
        "capability": "chaos.shard@1",
        "executor": "grpc",
        "retry": RETRY,
        "timeout": "60s",
        "input": {"chunks": 4, "seconds": 0.3},
    },
    {
        "key": "merge",
        "dependsOn": ["shard-a", "shard-b"],
        "capability": "chaos.work@1",
        "executor": "inprocess",
        "retry": RETRY,
        "input": {"reports": 3, "seconds": 0.2},
    },
]
CHECKPOINTING = {"shard-a"}


def _connect(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True, connect_timeout=5)


def _retrying(
    url: str, what: Callable[[psycopg.Connection[Any]], Any], within: float = 60.0
) -> Any:
    """Run ``what`` on a fresh connection, riding out the PostgreSQL restart."""
    deadline = time.monotonic() + within
    while True:
        try:
            with _connect(url) as conn:
                return what(conn)
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _wait_port(port: int, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {port}")


def _start_workers(workers: list[Service], database_url: str) -> None:
    """Start the worker processes and wait (60 s at most) until each has registered."""
    for w in workers:
        w.start()
    with _connect(database_url) as conn:
        deadline = time.monotonic() + 60
        while conn.execute(
            "SELECT count(*) FROM rara_workers WHERE stopped_at IS NULL"
        ).fetchone() != (len(workers),):
            assert all(w.alive() for w in workers), [w.log_text()[-2000:] for w in workers]
            assert time.monotonic() < deadline, "workers did not register"
            time.sleep(0.1)


def _postgres_restarter(
    pg_server: EmbeddedPostgres | None, pg_admin_url: str
) -> Callable[[], None] | None:
    """What the chaos driver calls to restart PostgreSQL (None: an external server)."""
    if pg_server is None:
        return None

    def restart() -> None:
        pg_server.restart()
        _retrying(pg_admin_url, lambda c: c.execute("SELECT 1"), within=60)  # back for all

    return restart


@pytest.fixture
def fleet_dir(tmp_path: Path) -> Path:
    for sub in ("artifacts", "ledger", "logs"):
        (tmp_path / sub).mkdir()
    (tmp_path / "token").write_text(secrets.token_hex(16))
    return tmp_path


@pytest.fixture
def services() -> Iterator[list[Service]]:
    started: list[Service] = []
    yield started
    for svc in started:  # whatever a failure left behind
        svc.kill()


def test_restart_smoke_under_chaos(
    database_url: str,
    pg_server: EmbeddedPostgres | None,
    pg_admin_url: str,
    fleet_dir: Path,
    services: list[Service],
    role_url: Callable[[str], str],
) -> None:
    began = time.monotonic()
    seed = int(os.environ.get("RARA_CHAOS_SEED") or random.SystemRandom().randrange(2**31))
    seconds = float(os.environ.get("RARA_CHAOS_SECONDS", "60"))
    drain = float(os.environ.get("RARA_CHAOS_DRAIN_SECONDS", "90"))
    print(
        f"\nchaos: seed {seed} (replay: RARA_CHAOS_SEED={seed}), {seconds:.0f}s of chaos, "
        f"{RUNS} runs, {WORKERS} workers + 1 executor, logs in {fleet_dir / 'logs'}"
    )

    with _connect(database_url) as conn:
        conn.execute(handlers.LEDGER_DDL)
        apply(conn, "chaos", STEPS)

    port = free_port()
    executor = Service(
        "executor",
        lambda _id: [
            "-m",
            "rara.executor.main",
            "--listen",
            f"127.0.0.1:{port}",
            "--token-file",
            str(fleet_dir / "token"),
            "--plugins",
            "tests.e2e.chaos.plugins",
            "--artifact-root",
            str(fleet_dir / "artifacts"),
            "--max-concurrency",
            "64",
            "--grace",
            "1",
            "--cancel-grace",
            "0.5",
        ],
        fleet_dir / "logs",
        env={"RARA_CHAOS_FILE_LEDGER": str(fleet_dir / "ledger")},
    )

    # Each process under its own role (docs/least-privilege.md): the workers as rara_worker,
    # the runs started as rara_client; the checks below read as the owner.
    worker_url, client_url = role_url("rara_worker"), role_url("rara_client")

    def worker_argv(identity: str) -> list[str]:
        args = [
            "-m",
            "rara.worker",
            "--handlers",
            "tests.e2e.chaos.handlers",
            "--database-url",
            worker_url,
            "--id",
            identity,
            "--artifact-root",
            str(fleet_dir / "artifacts"),
            "--executor-endpoint",
            f"127.0.0.1:{port}",
            "--executor-token-file",
            str(fleet_dir / "token"),
        ]
        for flag, value in LEASE.items():
            args += [f"--{flag}", str(value)]
        return args

    worker_env = {
        "RARA_WORKER_LOG_JSON": "true",
        "RARA_WORKER_EXECUTOR_REFRESH_SECONDS": "0.5",
        "RARA_WORKER_PROGRESS_PER_SECOND": "20",
        "RARA_CHAOS_LEDGER_DSN": database_url,
    }
    workers = [
        Service(f"chaos-w{i}", worker_argv, fleet_dir / "logs", env=worker_env)
        for i in range(WORKERS)
    ]
    services += [executor, *workers]
    executor.start()
    _wait_port(port)
    _start_workers(workers, database_url)

    plan = make_plan(seed, seconds, postgres=pg_server is not None)
    print("chaos plan: " + ", ".join(f"+{a.offset:.1f}s {a.kind}" for a in plan))
    if pg_server is None:
        print("chaos: RARA_TEST_DATABASE_URL is set: no PostgreSQL restart")
    driver = ChaosDriver(
        plan,
        workers=workers,
        executor=executor,
        restart_postgres=_postgres_restarter(pg_server, pg_admin_url),
    )
    chaos_started = time.monotonic()
    driver.start()
    try:
        # Runs arrive over the first 70% of the window, so the chaos always has work to hit.
        spread = 0.7 * seconds
        for i in range(RUNS):
            due = chaos_started + spread * i / RUNS
            time.sleep(max(0.0, due - time.monotonic()))
            _retrying(
                client_url,
                lambda c, i=i: start_run(
                    c, "chaos", input={"n": i}, idempotency_key=f"chaos-{i}", queue_anyway=True
                ),
            )
        time.sleep(max(0.0, chaos_started + seconds - time.monotonic()))
    finally:
        driver.stop()
    print(f"chaos: window closed after {time.monotonic() - chaos_started:.1f}s; draining")
    assert not driver.errors, driver.errors

    def unfinished(conn: psycopg.Connection[Any]) -> int:
        row = conn.execute(
            "SELECT count(*) FROM rara_runs WHERE status NOT IN "
            "('succeeded', 'failed', 'cancelled')"
        ).fetchone()
        return int(row[0]) if row else -1

    drain_started = time.monotonic()
    while (left := _retrying(database_url, unfinished)) and (
        time.monotonic() - drain_started < drain
    ):
        time.sleep(0.5)
    drained = time.monotonic() - drain_started
    print(f"chaos: drained in {drained:.1f}s ({left} runs unfinished)")

    # Nobody may have died on their own: every slot is alive, then stops cleanly on SIGTERM.
    died = [
        f"{s.identity} exited {s.proc.returncode if s.proc else None}:\n{s.log_text()[-3000:]}"
        for s in services
        if not s.alive()
    ]
    exits = {s.identity: s.stop(20.0) for s in services}

    with _connect(database_url) as conn:
        summary, problems = evaluate(
            conn,
            file_ledger=fleet_dir / "ledger",
            runs_expected=RUNS,
            events=driver.events,
            checkpointing=CHECKPOINTING,
        )
    wall = time.monotonic() - began
    summary.update(
        seed=seed,
        chaos_seconds=seconds,
        drain_seconds=round(drained, 3),
        wall_seconds=round(wall, 3),
        runs_unfinished_at_deadline=left,
        exit_codes=exits,
        events_log=[e.as_json() for e in driver.events],
        problems=problems[:50],
    )
    print(format_summary(summary, seed=seed, wall=wall))
    if report := os.environ.get("RARA_CHAOS_REPORT"):
        Path(report).write_text(json.dumps(summary, indent=2, default=str))

    assert not died, "fleet processes died on their own:\n" + "\n".join(died)
    assert all(code == 0 for code in exits.values()), f"unclean exits on SIGTERM: {exits}"
    kinds = {e.kind for e in driver.events}
    wanted = {WORKER_SIGKILL, WORKER_SIGTERM, EXECUTOR_SIGKILL}
    if pg_server is not None:
        wanted.add(POSTGRES_RESTART)
    assert wanted <= kinds, f"the chaos did not do {wanted - kinds} (seed {seed})"
    assert not left, f"{left} runs not terminal {drain:.0f}s after the chaos (seed {seed})"
    assert not problems, f"{len(problems)} invariant violations (seed {seed}):\n  " + "\n  ".join(
        problems[:30]
    )
