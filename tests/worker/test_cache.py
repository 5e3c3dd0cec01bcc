"""The step cache end to end (docs/step-cache.md): a real worker, a real database and the
local artifact store. test.tally records each call of its handler, so a reused step shows as
a call that did not happen."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from rara.artifacts import open_store
from rara.artifacts.gc import collect_garbage
from rara.cli.main import app
from rara.pg import cache as cache_sql
from rara.pg import retention
from tests.support.runs import define, start, steps_of, wait_run
from tests.support.waiting import wait_until
from tests.worker.handlers import FAILING, TALLY

CACHED = {"cache": {"ttl": "1h"}}


def _calls(run_id: int) -> list[str]:
    """The step keys of ``run_id`` whose handler was called."""
    return sorted(k.split(":", 1)[1] for k in TALLY if k.split(":", 1)[0] == str(run_id))


def _reused(conn: psycopg.Connection[Any], run_id: int) -> dict[str, Any]:
    rows = conn.execute(
        "SELECT key, reused_from FROM rara_steps WHERE run_id = %s AND map_over IS NULL"
        " ORDER BY id",
        (run_id,),
    ).fetchall()
    return dict(rows)


def _manifest(conn: psycopg.Connection[Any], run_id: int) -> dict[str, str]:
    rows = conn.execute(
        "SELECT s.key, a.digest FROM rara_steps s"
        " JOIN rara_step_artifacts a ON a.step_id = s.id AND a.attempt = s.attempt"
        " WHERE s.run_id = %s",
        (run_id,),
    ).fetchall()
    return dict(rows)


def _outcomes(conn: psycopg.Connection[Any], run_id: int) -> list[str]:
    """The outcomes of the attempts of the run's one step, in order."""
    rows = conn.execute(
        "SELECT a.outcome::text FROM rara_attempts a JOIN rara_steps s ON s.id = a.step_id"
        " WHERE s.run_id = %s ORDER BY a.attempt",
        (run_id,),
    ).fetchall()
    return [o for (o,) in rows]


def _chain(conn: psycopg.Connection[Any], name: str) -> None:
    define(
        conn,
        name,
        [
            {"key": "a", "capability": "test.tally@1", **CACHED},
            {"key": "b", "capability": "test.tally@1", "dependsOn": ["a"], **CACHED},
            {"key": "c", "capability": "test.tally@1", "dependsOn": ["b"]},  # not cached
        ],
    )


def test_a_hit_reuses_result_and_artifacts_without_calling_the_handler(
    conn: psycopg.Connection[Any], thread_worker: Any
) -> None:
    _chain(conn, "chain")
    thread_worker()
    first = start(conn, "chain", {"text": "x"})
    wait_run(conn, first, status="succeeded")
    again = start(conn, "chain", {"text": "x"})
    wait_run(conn, again, status="succeeded")
    other = start(conn, "chain", {"text": "y"})
    wait_run(conn, other, status="succeeded")

    assert _calls(first) == ["a", "b", "c"]
    assert _calls(again) == ["c"]  # only the step without cache: ran again
    assert _calls(other) == ["a", "b", "c"]  # another input: another key
    reused = _reused(conn, again)
    assert reused["c"] is None
    for key in ("a", "b"):
        source = reused[key]
        assert (source["via"], source["run"], source["key"], source["attempt"]) == (
            "cache",
            first,
            key,
            1,
        )
    assert _manifest(conn, again) == _manifest(conn, first)
    results = {s["key"]: s["result"] for s in steps_of(conn, first)}
    assert {s["key"]: s["result"] for s in steps_of(conn, again)} == results
    assert len(cache_sql.list_entries(conn)) == 4  # a and b, of each input


def _blob(tmp_path: Path, digest: str) -> Path:
    hexd = digest.removeprefix("sha256:")
    return tmp_path / "artifacts" / "sha256" / hexd[:2] / hexd[2:]


@pytest.mark.parametrize("damage", ["deleted", "corrupt"])
def test_a_missing_or_corrupt_cached_blob_recomputes(
    conn: psycopg.Connection[Any], thread_worker: Any, tmp_path: Path, damage: str
) -> None:
    _chain(conn, "chain")
    thread_worker()
    first = start(conn, "chain", {"text": "x"})
    wait_run(conn, first, status="succeeded")
    blob = _blob(tmp_path, _manifest(conn, first)["a"])
    if damage == "deleted":
        blob.unlink()
    else:
        blob.chmod(0o644)
        blob.write_bytes(b"not what was stored")
    again = start(conn, "chain", {"text": "x"})
    wait_run(conn, again, status="succeeded")

    assert _calls(again) == ["a", "c"]  # a recomputed; b's own blob is intact: reused
    reused = _reused(conn, again)
    assert reused["a"] is None
    assert reused["b"]["run"] == first
    assert blob.read_bytes() == b"x"  # written again by the recomputation
    [entry] = [e for e in cache_sql.list_entries(conn) if e.step_key == "a"]
    assert entry.source_run == again  # the recomputation's entry replaced the broken one
    third = start(conn, "chain", {"text": "x"})
    wait_run(conn, third, status="succeeded")
    assert _calls(third) == ["c"]


def test_concurrent_misses_compute_once(conn: psycopg.Connection[Any], thread_worker: Any) -> None:
    """Single flight (docs/step-cache.md, "Concurrent misses"): two runs that miss one key at
    once (a worker leases both) compute it once; the other step gives its lease back and then
    reuses the entry. Both runs succeed with the same result."""
    define(conn, "slow", [{"key": "a", "capability": "test.tally@1", **CACHED}])
    thread_worker(concurrency=4)
    runs = [start(conn, "slow", {"text": "x", "pause": 1.0}) for _ in range(2)]
    for run_id in runs:
        wait_run(conn, run_id, status="succeeded")
    assert sorted(len(_calls(r)) for r in runs) == [0, 1]
    computed, waited = runs if _calls(runs[0]) else runs[::-1]
    assert _reused(conn, waited)["a"]["run"] == computed
    outcomes = _outcomes(conn, waited)
    assert outcomes[0] == "released"  # deferred while the other computed
    assert outcomes[-1] == "succeeded"
    [entry] = cache_sql.list_entries(conn)
    assert entry.source_run == computed
    results = [steps_of(conn, r)[0]["result"] for r in runs]
    assert results[0] == results[1]


def test_a_claim_of_a_failed_computation_lets_the_waiting_step_compute(
    conn: psycopg.Connection[Any], thread_worker: Any
) -> None:
    """The step that waits is not held up by one that failed: its next lease computes."""
    define(
        conn,
        "flaky",
        [{"key": "a", "capability": "test.flaky@1", "retry": {"maxAttempts": 1}, **CACHED}],
    )
    failing = start(conn, "flaky", {"text": "x", "pause": 1.0})
    FAILING.add(f"{failing}:a")  # (its idempotency key: the other run's step succeeds)
    thread_worker(concurrency=4)
    wait_until(
        lambda: (
            conn.execute(
                "SELECT status::text FROM rara_steps WHERE run_id = %s", (failing,)
            ).fetchone()
            == ("running",)
        ),
        message="the first step running",
    )
    waiting = start(conn, "flaky", {"text": "x", "pause": 1.0})
    wait_run(conn, waiting, status="succeeded")
    # (Usually failed by now; on a starved machine its lease may expire first and its end come
    # later: either way the waiting step computed once, without waiting for it.)
    wait_run(conn, failing, status="failed")
    assert _calls(waiting) == ["a"]
    outcomes = _outcomes(conn, waiting)
    assert outcomes[0] == "released"  # deferred while the failing one ran
    assert outcomes[-1] == "succeeded"


def test_map_children_cache_one_by_one(conn: psycopg.Connection[Any], thread_worker: Any) -> None:
    define(
        conn,
        "shards",
        [
            {
                "key": "shard",
                "capability": "test.tally@1",
                "map": {"over": "input.items"},
                **CACHED,
            },
            {"key": "merge", "capability": "test.tally@1", "dependsOn": ["shard"], **CACHED},
        ],
    )
    thread_worker()
    first = start(conn, "shards", {"items": ["p", "q", "r"]})
    wait_run(conn, first, status="succeeded")
    changed = start(conn, "shards", {"items": ["p", "Q", "r"]})
    wait_run(conn, changed, status="succeeded")

    assert _calls(first) == ["merge", "shard[0]", "shard[1]", "shard[2]"]
    # Only the child whose item changed runs, and merge, whose upstream changed with it.
    assert _calls(changed) == ["merge", "shard[1]"]
    reused = _reused(conn, changed)
    assert reused["shard[1]"] is None
    assert reused["merge"] is None
    assert reused["shard[0]"]["run"] == reused["shard[2]"]["run"] == first


def _shards(conn: psycopg.Connection[Any], items: list[str]) -> None:
    """split writes each of ``items`` as an artifact; each child of ``read`` is given all of
    them and reads its own (test.read_shard). The map is over the run input's ``slots``, so
    a child's input is its index alone, whatever the items."""
    define(
        conn,
        "sharded",
        [
            {"key": "split", "capability": "test.shard@1", "input": {"items": items}},
            {
                "key": "read",
                "capability": "test.read_shard@1",
                "dependsOn": ["split"],
                "map": {"over": "input.slots"},
                **CACHED,
            },
        ],
    )


def test_a_child_given_every_shard_misses_only_when_its_own_changed(
    conn: psycopg.Connection[Any],
    thread_worker: Any,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The entry is found by what its step read, not by all it was given: one changed shard
    recomputes one child (docs/step-cache.md, "The key")."""
    thread_worker()
    _shards(conn, ["p", "q", "r"])
    first = start(conn, "sharded", {"slots": [0, 1, 2]})
    wait_run(conn, first, status="succeeded")
    _shards(conn, ["p", "Q", "r"])  # a new version: shard-1.txt has other bytes
    changed = start(conn, "sharded", {"slots": [0, 1, 2]})
    wait_run(conn, changed, status="succeeded")

    reused = _children_reused(conn, changed)
    assert reused[1] is None  # it read shard-1.txt, which changed
    assert reused[0]["run"] == reused[2]["run"] == first
    results = {s["key"]: s["result"] for s in steps_of(conn, changed)}
    assert [results[f"read[{i}]"]["text"] for i in range(3)] == ["p", "Q", "r"]
    # The entry of the child that ran read its own shard only.
    [entry] = [e for e in cache_sql.list_entries(conn) if e.source_run == changed and e.reads]
    assert list(entry.reads) == ["split/shard-1.txt"]
    # `rara cache explain` names the read that changed.
    monkeypatch.setenv("COLUMNS", "200")  # (as tests/cli's wide_console)
    cli = CliRunner(env={"DATABASE_URL": database_url})
    explained = cli.invoke(app, ["cache", "explain", str(changed), "read[1]"])
    assert explained.exit_code == 0, explained.output
    assert f"(run {first}); changed: reads (split/shard-1.txt)" in explained.output


def _children_reused(conn: psycopg.Connection[Any], run_id: int) -> dict[int, Any]:
    rows = conn.execute(
        "SELECT map_index, reused_from FROM rara_steps"
        " WHERE run_id = %s AND map_parent IS NOT NULL ORDER BY map_index",
        (run_id,),
    ).fetchall()
    return dict(rows)


def test_prune_and_gc_keep_what_a_live_entry_points_to(
    conn: psycopg.Connection[Any], thread_worker: Any, tmp_path: Path
) -> None:
    """The entry keeps its own result and manifest: pruning the run that made it leaves it
    whole, and gc keeps its blobs until the entry expires or is dropped."""
    _chain(conn, "chain")
    worker = thread_worker()
    first = start(conn, "chain", {"text": "x"})
    wait_run(conn, first, status="succeeded")
    manifest = _manifest(conn, first)
    worker.stop()
    conn.execute(
        "UPDATE rara_runs SET finished_at = finished_at - interval '60 days',"
        " created_at = created_at - interval '60 days' WHERE id = %s",
        (first,),
    )
    pruned = retention.prune(conn, before=retention.horizon(conn, timedelta(days=30)), batch=10)
    assert pruned.runs == 1
    store = open_store(tmp_path / "artifacts")
    report = collect_garbage(conn, store, grace_seconds=0)
    assert set(report.deleted) == {manifest["c"]}  # c has no cache: nothing points to it
    assert store.exists(manifest["a"])
    assert store.exists(manifest["b"])

    thread_worker()
    again = start(conn, "chain", {"text": "x"})
    wait_run(conn, again, status="succeeded")
    assert _calls(again) == ["c"]
    assert _reused(conn, again)["a"]["run"] == first  # from a run that is gone

    # An expired entry points to nothing gc must keep.
    conn.execute("UPDATE rara_step_cache SET expires_at = now() - interval '1 s'")
    conn.execute("DELETE FROM rara_step_artifacts")  # (as a prune of the second run would)
    report = collect_garbage(conn, store, grace_seconds=0)
    assert {manifest["a"], manifest["b"]} <= set(report.deleted)
