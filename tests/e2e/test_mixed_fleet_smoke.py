"""Field smoke of a mixed-language fleet: one workflow whose steps run in the Python worker's
registry, the Python executor and the Go executor, under the restart smoke's kills.

``prepare`` (in-process) fans out to ``shard-py`` (``chaos.shard@1`` on the Python executor)
and ``shard-go`` (``chaos.shard-go@1`` on the Go executor, executor/go/ops/chaos.go, the same
behaviour and file ledger), both checkpointing and resuming, which join in ``merge``
(in-process, consuming both shards' artifacts). Two workers reach both executors
(``--executor-endpoint`` twice, one token).

The restart smoke's machinery is reused, not copied (tests/e2e/test_restart_smoke.py,
tests/e2e/chaos/): its ``Service`` slots (the Go binary is exec'd from the Python command line
``Service`` starts, so the slot's pid is the Go process), its seeded ``ChaosDriver`` (one for
workers, the Python executor and the PostgreSQL restart; a second one SIGKILLs the Go
executor) and its invariants (every run and step succeeded with exactly one succeeded attempt,
exactly one effect per step and none outside its attempt's ownership, checkpoint resumes exact,
progress seqs without gaps, no lease left). Bounded: ``RARA_MIXED_SECONDS`` of chaos (default
30), a 60 s drain, about 90 s in all on two cores.
"""

from __future__ import annotations

import os
import random
import shutil
import time
from collections.abc import Callable
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
    PlannedAction,
    Service,
    free_port,
    make_plan,
)
from tests.e2e.chaos.invariants import evaluate, format_summary
from tests.e2e.test_restart_smoke import (  # the restart smoke's helpers and fixtures
    LEASE,
    RETRY,
    _connect,
    _postgres_restarter,
    _retrying,
    _start_workers,
    _wait_port,
    fleet_dir,  # noqa: F401 - fixture
    services,  # noqa: F401 - fixture
)
from tests.executor.test_go_executor import build_go_executor
from tests.support.definitions import apply

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),  # the smoke takes ~1 min; a cold Go build up to 2-3 more
    pytest.mark.skipif(
        shutil.which("go") is None, reason="go is not installed: the Go executor cannot be built"
    ),
]

RUNS = int(os.environ.get("RARA_MIXED_RUNS", "40"))
WORKERS = 2
STEPS: list[dict[str, Any]] = [
    {
        "key": "prepare",
        "capability": "chaos.work@1",
        "executor": "inprocess",
        "retry": RETRY,
        "input": {"reports": 3, "seconds": 0.2},
    },
    {
        "key": "shard-py",
        "dependsOn": ["prepare"],
        "capability": "chaos.shard@1",
        "executor": "grpc",
        "retry": RETRY,
        "timeout": "60s",
        "input": {"chunks": 4, "seconds": 0.3, "checkpoint": True},
    },
    {
        "key": "shard-go",
        "dependsOn": ["prepare"],
        "capability": "chaos.shard-go@1",
        "executor": "grpc",
        "retry": RETRY,
        "timeout": "60s",
        "input": {"chunks": 4, "seconds": 0.3, "checkpoint": True},
    },
    {
        "key": "merge",
        "dependsOn": ["shard-py", "shard-go"],
        "capability": "chaos.work@1",
        "executor": "inprocess",
        "retry": RETRY,
        "input": {"reports": 2, "seconds": 0.1},
    },
]
CHECKPOINTING = {"shard-py", "shard-go"}
EXEC = "import os, sys; os.execv(sys.argv[1], sys.argv[1:])"  # Service runs Python; become Go


def go_plan(seed: int, seconds: float, kills: int = 2) -> list[PlannedAction]:
    """SIGKILLs of the Go executor, seeded like the main plan, spread over the window."""
    rng = random.Random(seed ^ 0x60)
    return sorted(
        (
            PlannedAction(
                rng.uniform(0.1, 0.8) * seconds, EXECUTOR_SIGKILL, 0.0, rng.uniform(0.2, 1.0)
            )
            for _ in range(kills)
        ),
        key=lambda a: a.offset,
    )


def test_mixed_fleet_under_chaos(
    database_url: str,
    pg_server: EmbeddedPostgres | None,
    pg_admin_url: str,
    fleet_dir: Path,  # noqa: F811
    services: list[Service],  # noqa: F811
    role_url: Callable[[str], str],
) -> None:
    began = time.monotonic()
    binary = build_go_executor()
    seed = int(os.environ.get("RARA_CHAOS_SEED") or random.SystemRandom().randrange(2**31))
    seconds = float(os.environ.get("RARA_MIXED_SECONDS", "30"))
    drain = 60.0
    print(
        f"\nmixed fleet: seed {seed} (replay: RARA_CHAOS_SEED={seed}), {seconds:.0f}s of "
        f"chaos, {RUNS} runs, {WORKERS} workers + Python and Go executors, "
        f"logs in {fleet_dir / 'logs'}"
    )

    with _connect(database_url) as conn:
        conn.execute(handlers.LEDGER_DDL)
        apply(conn, "mixed", STEPS)

    ledger_env = {"RARA_CHAOS_FILE_LEDGER": str(fleet_dir / "ledger")}
    py_port, go_port = free_port(), free_port()
    py_executor = Service(
        "py-executor",
        lambda _id: [
            "-m",
            "rara.executor.main",
            "--listen",
            f"127.0.0.1:{py_port}",
            "--token-file",
            str(fleet_dir / "token"),
            "--plugins",
            "tests.e2e.chaos.plugins",
            "--artifact-root",
            str(fleet_dir / "artifacts"),
            "--max-concurrency",
            "32",
            "--grace",
            "1",
            "--cancel-grace",
            "0.5",
        ],
        fleet_dir / "logs",
        env=ledger_env,
    )
    go_executor = Service(
        "go-executor",
        lambda _id: [
            "-c",
            EXEC,
            str(binary),
            "--listen",
            f"127.0.0.1:{go_port}",
            "--token-file",
            str(fleet_dir / "token"),
            "--plugins",
            "chaos",
            "--artifact-root",
            str(fleet_dir / "artifacts"),
            "--max-concurrency",
            "32",
            "--grace",
            "1",
            "--cancel-grace",
            "0.5",
        ],
        fleet_dir / "logs",
        env=ledger_env,
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
            f"127.0.0.1:{py_port}",
            "--executor-endpoint",
            f"127.0.0.1:{go_port}",
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
        Service(f"mixed-w{i}", worker_argv, fleet_dir / "logs", env=worker_env)
        for i in range(WORKERS)
    ]
    services += [py_executor, go_executor, *workers]
    py_executor.start()
    go_executor.start()
    _wait_port(py_port)
    _wait_port(go_port)
    _start_workers(workers, database_url)

    plan = make_plan(seed, seconds, postgres=pg_server is not None, mean_interval=3.0)
    drivers = [
        ChaosDriver(
            plan,
            workers=workers,
            executor=py_executor,
            restart_postgres=_postgres_restarter(pg_server, pg_admin_url),
        ),
        ChaosDriver(
            go_plan(seed, seconds), workers=[], executor=go_executor, restart_postgres=None
        ),
    ]
    print(
        "chaos plan: "
        + ", ".join(f"+{a.offset:.1f}s {a.kind}" for a in plan)
        + "; Go executor SIGKILL at "
        + ", ".join(f"+{a.offset:.1f}s" for a in drivers[1].plan)
    )
    chaos_started = time.monotonic()
    for driver in drivers:
        driver.start()
    try:
        spread = 0.7 * seconds
        for i in range(RUNS):
            due = chaos_started + spread * i / RUNS
            time.sleep(max(0.0, due - time.monotonic()))

            def start(conn: psycopg.Connection[Any], i: int = i) -> Any:
                return start_run(
                    conn, "mixed", input={"n": i}, idempotency_key=f"mixed-{i}", queue_anyway=True
                )

            _retrying(client_url, start)
        time.sleep(max(0.0, chaos_started + seconds - time.monotonic()))
    finally:
        for driver in drivers:
            driver.stop()
    print(f"mixed fleet: window closed after {time.monotonic() - chaos_started:.1f}s; draining")
    assert not [e for d in drivers for e in d.errors], [d.errors for d in drivers]

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
    died = [
        f"{s.identity} exited {s.proc.returncode if s.proc else None}:\n{s.log_text()[-3000:]}"
        for s in services
        if not s.alive()
    ]
    exits = {s.identity: s.stop(20.0) for s in services}

    events = sorted((e for d in drivers for e in d.events), key=lambda e: e.at)
    with _connect(database_url) as conn:
        summary, problems = evaluate(
            conn,
            file_ledger=fleet_dir / "ledger",
            runs_expected=RUNS,
            events=events,
            checkpointing=CHECKPOINTING,
        )
        outcomes: dict[str, dict[str, int]] = {}
        for key, outcome, n in conn.execute(
            "SELECT s.key, a.outcome::text, count(*) FROM rara_attempts a "
            "JOIN rara_steps s ON s.id = a.step_id GROUP BY 1, 2 ORDER BY 1, 2"
        ).fetchall():
            outcomes.setdefault(key, {})[outcome] = n
    by_executor = {key: counts.get("succeeded", 0) for key, counts in outcomes.items()}
    wall = time.monotonic() - began
    print(format_summary(summary, seed=seed, wall=wall))
    print(
        f"  attempts by step and outcome: {outcomes}; Go executor SIGKILLs "
        f"{sum(e.victim.startswith('go-executor') for e in events)}; drained in {drained:.1f}s"
    )

    assert not died, "fleet processes died on their own:\n" + "\n".join(died)
    assert all(code == 0 for code in exits.values()), f"unclean exits on SIGTERM: {exits}"
    kinds = {(e.kind, e.victim.split(".")[0]) for e in events}
    wanted = {
        (WORKER_SIGKILL, "mixed-w0"),
        (WORKER_SIGTERM, "mixed-w0"),
        (EXECUTOR_SIGKILL, "py-executor"),
        (EXECUTOR_SIGKILL, "go-executor"),
    }
    assert {k for k, _ in wanted} <= {k for k, _ in kinds}, kinds
    assert {v for k, v in wanted if k == EXECUTOR_SIGKILL} <= {
        v for k, v in kinds if k == EXECUTOR_SIGKILL
    }, kinds
    if pg_server is not None:
        assert (POSTGRES_RESTART, "postgres") in kinds, kinds
    assert by_executor == {key: RUNS for key in ("prepare", "shard-py", "shard-go", "merge")}
    assert not left, f"{left} runs not terminal {drain:.0f}s after the chaos (seed {seed})"
    assert not problems, f"{len(problems)} invariant violations (seed {seed}):\n  " + "\n  ".join(
        problems[:30]
    )
