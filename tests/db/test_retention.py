"""`rara runs prune` (issue 17, item 4): finished runs that ended before a horizon go, with
their steps, attempts, events, checkpoints and manifests, in bounded batches; everything else
stays, blobs a kept run references included; only the schema's owner may."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from rara.artifacts import open_store
from rara.artifacts.gc import collect_garbage
from rara.cli.main import app
from rara.pg import artifacts as artifact_sql
from rara.pg import retention
from rara.pg.queries import sql
from rara.runs import cancel_run, start_run
from rara.states import AttemptOutcome
from rara.worker.store import end_many
from rara.worker.vocabulary import Ending, Fence
from tests.support.definitions import apply, noop_definition
from tests.support.history_fill import fill
from tests.support.leasing import lease_now

PAIR = [{"key": "a", "capability": "x@1"}, {"key": "b", "capability": "x@1", "dependsOn": ["a"]}]
FAILS: list[dict[str, Any]] = [{"key": "a", "capability": "y@1", "retry": {"maxAttempts": 1}}]
TABLES = (
    "rara_runs",
    "rara_steps",
    "rara_attempts",
    "rara_events",
    "rara_checkpoints",
    "rara_step_artifacts",
)
Conn = psycopg.Connection[Any]


def _finish(conn: Conn, url: str, blob: Callable[[str], tuple[str, int]]) -> None:
    """Run every ready step to its end as a worker would, each attempt with a progress event,
    a checkpoint and an artifact (``blob(key)``: its digest and size); the first attempt of
    each step fails (a retry), so steps have two attempts."""
    tried: set[int] = set()
    while leased := lease_now(conn, ["x@1"], worker="w", limit=100):
        for s in leased:
            digest, size = blob(s.key)
            conn.execute(
                sql("step_progress_many"),
                {
                    "worker": "w",
                    "step_ids": [s.id],
                    "tokens": [s.lease_token],
                    "seqs": [1],
                    "fractions": [0.5],
                    "messages": ["half"],
                    "metrics": [json.dumps({"x": 1})],
                },
            )
            conn.execute(
                sql("step_checkpoint"),
                {
                    "worker": "w",
                    "step_id": s.id,
                    "token": s.lease_token,
                    "seq": 1,
                    "state": json.dumps({"at": 1}),
                    "digest": digest,
                    "size": size,
                },
            )
        endings = [
            Ending(
                Fence(s.id, "w", s.lease_token),
                s.run_id,
                AttemptOutcome.SUCCEEDED,
                result={"ok": s.key},
                artifacts=[
                    {
                        "name": "out",
                        "digest": blob(s.key)[0],
                        "size": blob(s.key)[1],
                        "media_type": "text/plain",
                    }
                ],
            )
            if s.id in tried
            else Ending(
                Fence(s.id, "w", s.lease_token),
                s.run_id,
                AttemptOutcome.FAILED,
                error={"code": "X", "message": "once"},
                retryable=True,
            )
            for s in leased
        ]
        tried.update(s.id for s in leased)

        asyncio.run(_end(url, *endings))
        # The retries at once, without their backoff.
        conn.execute("UPDATE rara_steps SET available_at = now() WHERE status = 'ready'")


def _age(conn: Conn, run_ids: list[int], days: int) -> None:
    """Pretend the runs ended (and started) ``days`` ago (as the owner: no state changes)."""
    conn.execute(
        "UPDATE rara_runs SET finished_at = finished_at - make_interval(days => %s), "
        "created_at = created_at - make_interval(days => %s) WHERE id = ANY(%s)",
        (days, days, run_ids),
    )


def _rows(conn: Conn, run_ids: list[int]) -> dict[str, int]:
    """Rows of each table that belong to the runs."""
    steps = "(SELECT id FROM rara_steps WHERE run_id = ANY(%(ids)s))"
    counts = {}
    for table in TABLES:
        where = (
            "id = ANY(%(ids)s)"
            if table == "rara_runs"
            else "run_id = ANY(%(ids)s)"
            if table == "rara_steps"
            else f"step_id IN {steps}"
        )
        if table == "rara_attempts":  # its rows outlive a step only if the trigger failed
            where = "run_id = ANY(%(ids)s)"
        row = conn.execute(
            f"SELECT count(*) FROM {table} WHERE {where}", {"ids": run_ids}
        ).fetchone()
        assert row is not None
        counts[table] = int(row[0])
    return counts


@pytest.fixture
def history(conn: Conn, database_url: str, tmp_path: Path) -> dict[str, Any]:
    """Runs of every kind: old finished ones (succeeded, failed, cancelled), a recent finished
    one, an old one still running and an old one never started. The old succeeded runs' blobs
    are their own except b's, which the recent run shares."""
    apply(conn, "pair", PAIR)
    apply(conn, "fails", FAILS)
    store = open_store(str(tmp_path / "artifacts"))
    shared = store.put_bytes(b"shared by old and recent runs")
    blobs: dict[int, Any] = {}

    def blob_for(run_id: int) -> Callable[[str], tuple[str, int]]:
        def blob(key: str) -> tuple[str, int]:
            if key == "b":
                return shared.digest, shared.size
            if run_id not in blobs:
                blobs[run_id] = store.put_bytes(f"own blob of run {run_id}".encode())
            return blobs[run_id].digest, blobs[run_id].size

        return blob

    old = [start_run(conn, "pair", queue_anyway=True).run_id for _ in range(3)]
    for run_id in old:
        _finish(conn, database_url, blob_for(run_id))  # one at a time: its own blob
    failed = start_run(conn, "fails", queue_anyway=True).run_id
    [step] = lease_now(conn, ["y@1"], worker="w", limit=1)
    asyncio.run(
        _end(
            database_url,
            Ending(
                Fence(step.id, "w", step.lease_token),
                failed,
                AttemptOutcome.FAILED,
                error={"code": "X", "message": "no"},
                retryable=False,
            ),
        )
    )
    cancelled = start_run(conn, "pair", queue_anyway=True).run_id
    cancel_run(conn, cancelled)
    recent = start_run(conn, "pair", queue_anyway=True).run_id
    _finish(conn, database_url, blob_for(recent))
    running = start_run(conn, "fails", queue_anyway=True).run_id
    lease_now(conn, ["y@1"], worker="w", limit=1)
    pending = start_run(conn, "pair", queue_anyway=True).run_id
    for run_id in (running, pending):  # old, but not finished: never pruned
        conn.execute(
            "UPDATE rara_runs SET created_at = created_at - interval '90 days' WHERE id = %s",
            (run_id,),
        )
    _age(conn, [*old, failed, cancelled], 40)
    _age(conn, [recent], 5)
    statuses = dict(conn.execute("SELECT id, status::text FROM rara_runs").fetchall())
    assert [statuses[r] for r in (*old, failed, cancelled, recent, running, pending)] == [
        "succeeded"
    ] * 3 + ["failed", "cancelled", "succeeded", "running", "pending"]
    return {
        "old": [*old, failed, cancelled],
        "kept": [recent, running, pending],
        "store": store,
        "shared": shared.digest,
        "own": {r: b.digest for r, b in blobs.items()},
        "recent": recent,
    }


async def _end(url: str, *endings: Ending) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as aconn:
        await end_many(aconn, endings)


def _prune(conn: Conn, days: int = 30, **kwargs: Any) -> retention.PruneCounts:
    return retention.prune(
        conn, before=retention.horizon(conn, timedelta(days=days)), **{"batch": 100, **kwargs}
    )


def test_prune_deletes_old_finished_runs_and_everything_under_them(
    conn: Conn, history: dict[str, Any]
) -> None:
    before_old, before_kept = _rows(conn, history["old"]), _rows(conn, history["kept"])
    assert before_old == {
        "rara_runs": 5,
        "rara_steps": 9,
        "rara_attempts": 13,
        "rara_events": 12,
        "rara_checkpoints": 12,
        "rara_step_artifacts": 6,
    }
    deleted = _prune(conn)
    assert deleted == retention.PruneCounts(
        runs=5, steps=9, attempts=13, events=12, checkpoints=12, manifests=6
    )
    assert _rows(conn, history["old"]) == dict.fromkeys(TABLES, 0)
    assert _rows(conn, history["kept"]) == before_kept  # recent, running, pending: untouched
    assert before_kept["rara_events"] == 4  # the recent run's history is whole
    # Nothing under a pruned run is left anywhere (no orphans by another path).
    for table in TABLES[2:]:
        row = conn.execute(
            f"SELECT count(*) FROM {table} t WHERE NOT EXISTS "
            "(SELECT FROM rara_steps s WHERE s.id = t.step_id)"
        ).fetchone()
        assert row == (0,), table
    assert _prune(conn) == retention.PruneCounts()  # again: nothing left to do


def test_blobs_stay_until_gc_which_keeps_those_kept_runs_reference(
    conn: Conn, history: dict[str, Any]
) -> None:
    _prune(conn)
    store = history["store"]
    own = set(history["own"].values())
    rows = {d for (d,) in conn.execute("SELECT digest FROM rara_artifacts").fetchall()}
    assert own | {history["shared"]} <= rows  # prune deletes no blob, nor its row
    referenced = artifact_sql.referenced(conn)
    assert history["shared"] in referenced  # the recent run's manifest and checkpoint
    assert history["own"][history["recent"]] in referenced
    report = collect_garbage(conn, store, grace_seconds=0)
    assert set(report.deleted) == own - {history["own"][history["recent"]]}
    assert store.exists(history["shared"])
    assert store.exists(history["own"][history["recent"]])


def test_batches_are_bounded_and_an_interrupted_prune_carries_on(
    conn: Conn, history: dict[str, Any]
) -> None:
    seen: list[int] = []

    def stop_after_two(counts: retention.PruneCounts) -> None:
        seen.append(counts.runs)
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _prune(conn, batch=2, on_batch=stop_after_two)
    assert seen == [2, 2]
    assert _rows(conn, history["old"])["rara_runs"] == 1  # two batches committed
    seen.clear()
    assert _prune(conn, batch=2, on_batch=lambda c: seen.append(c.runs)).runs == 1
    assert seen == [1]


def test_the_step_bound_takes_whole_runs(conn: Conn, history: dict[str, Any]) -> None:
    """Past the first run of a batch, at most max_steps steps: 2-step runs one at a time under
    a bound of 3, however many runs a batch may take; a run larger than the bound goes whole."""
    steps: list[int] = []
    _prune(conn, batch=100, max_steps=3, on_batch=lambda c: steps.append(c.steps))
    # Runs in id order: three pairs, the failed run (1 step), the cancelled pair.
    assert steps == [2, 2, 2 + 1, 2]
    assert _rows(conn, history["old"])["rara_runs"] == 0
    _age(conn, history["kept"][:1], 40)
    assert _prune(conn, max_steps=1).steps == 2


def test_dry_run_counts_and_deletes_nothing(conn: Conn, history: dict[str, Any]) -> None:
    before = _rows(conn, history["old"])
    counts = _prune(conn, dry_run=True, batch=2)
    assert counts == retention.PruneCounts(
        runs=5, steps=9, attempts=13, events=12, checkpoints=12, manifests=6
    )
    assert _rows(conn, history["old"]) == before
    assert _prune(conn, days=60, dry_run=True) == retention.PruneCounts()


@pytest.mark.parametrize("group", ["rara_worker", "rara_operator", "rara_client", "rara_reader"])
def test_a_process_role_is_refused(
    conn: Conn, history: dict[str, Any], role_url: Callable[[str], str], group: str
) -> None:
    before = _rows(conn, history["old"])
    with psycopg.connect(role_url(group), autocommit=True) as theirs:
        for dry_run in (False, True):
            with pytest.raises(retention.PruneRefused, match="only the schema's owner"):
                _prune(theirs, dry_run=dry_run)
        # Nor can it go around the command: no grant deletes history.
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            theirs.execute(sql("run_prune_delete_many"), {"run_ids": history["old"]})
    assert _rows(conn, history["old"]) == before


def test_a_running_run_is_never_deleted_whoever_asks(conn: Conn, history: dict[str, Any]) -> None:
    running, pending = history["kept"][1:]
    row = conn.execute(sql("run_prune_delete_many"), {"run_ids": [running, pending]}).fetchone()
    assert row == (0, 0, 0, 0, 0, 0)


# -- the command ---------------------------------------------------------------------------


@pytest.fixture
def cli(database_url: str) -> CliRunner:
    return CliRunner(env={"DATABASE_URL": database_url})


def test_cli_prunes_and_prints_what_it_deleted(
    cli: CliRunner, conn: Conn, history: dict[str, Any]
) -> None:
    dry = cli.invoke(app, ["runs", "prune", "--older-than", "30d", "--dry-run", "--batch", "2"])
    assert dry.exit_code == 0, dry.output
    assert dry.stdout.startswith(
        "would delete 5 runs, 9 steps, 13 attempts, 12 events, "
        "12 checkpoints, 6 artifact manifests (runs finished before "
    )
    done = cli.invoke(app, ["runs", "prune", "--older-than", "30d"])
    assert done.exit_code == 0, done.output
    assert done.stdout.startswith("deleted 5 runs, 9 steps, 13 attempts, 12 events, ")
    assert _rows(conn, history["old"])["rara_runs"] == 0
    again = cli.invoke(app, ["runs", "prune", "--older-than", "4d"])  # the recent run, 5 d ago
    assert again.stdout.startswith("deleted 1 runs, 2 steps, 4 attempts")


@pytest.mark.parametrize("age", ["3x", "-1d", "30", "d", "1.5d", "30 days"])
def test_cli_bad_age_is_one_line_and_exit_2(cli: CliRunner, conn: Conn, age: str) -> None:
    result = cli.invoke(app, ["runs", "prune", "--older-than", age])
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        f"error: --older-than {age!r}: expected a whole number and a unit, "
        "one of s, m, h, d, w (e.g. 30d)\n"
    )
    assert conn.execute("SELECT count(*) FROM rara_runs").fetchone() == (0,)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--older-than", "30d", "--batch", "0"],
            "error: invalid value for '--batch': Input should be greater than or equal to 1",
        ),
        ([], "error: missing option '--older-than'"),
    ],
)
def test_cli_usage_errors_are_one_line(args: list[str], expected: str) -> None:
    """The console script, not CliRunner: the one-line form is made in rara.cli.main.main."""
    result = subprocess.run(
        [sys.executable, "-c", "from rara.cli.main import main; main()", "runs", "prune", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith(expected), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_cli_refuses_a_process_role(
    history: dict[str, Any], role_url: Callable[[str], str]
) -> None:
    result = CliRunner(env={"DATABASE_URL": role_url("rara_client")}).invoke(
        app, ["runs", "prune", "--older-than", "30d"]
    )
    assert result.exit_code == 2
    assert result.stderr.startswith(
        "error: rara runs prune deletes history, which only the schema's owner may"
    )
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_benchmark_history_is_a_valid_history_and_prunes_by_age(conn: Conn) -> None:
    """bench/history.py's set-wise history (finished over the last 60 days) holds every
    invariant a worker-made one does, and a prune of 30 days takes the older half of it."""
    from tests.support.history import check_history

    noop_definition(conn)
    assert fill(conn, 2_000)["rows"] == {
        "rara_runs": 100,
        "rara_steps": 500,
        "rara_attempts": 1_000,
        "rara_events": 1_000,
    }
    check_history(conn, writes=True)
    counts = _prune(conn)
    assert counts.runs in (49, 50)  # run 50 ended exactly 30 days before the fill's now()
    assert counts == retention.PruneCounts(
        runs=counts.runs, steps=5 * counts.runs, attempts=10 * counts.runs, events=10 * counts.runs
    )
    check_history(conn, writes=True)
    assert conn.execute("SELECT count(*) FROM rara_runs").fetchone() == (100 - counts.runs,)
