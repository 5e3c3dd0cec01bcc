"""The worker end to end in one process: results, input merge, dependencies, artifacts,
progress and checkpoints."""

from __future__ import annotations

from typing import Any

import psycopg

from tests.support.history import check_history
from tests.support.runs import attempts_of, define, start, steps_of, wait_run
from tests.support.waiting import wait_until


def test_result_and_input_merge(conn: psycopg.Connection[Any], thread_worker: Any) -> None:
    define(
        conn,
        "echo",
        [
            {
                "key": "only",
                "capability": "test.echo@1",
                "input": {"static": 1, "both": "definition"},
            }
        ],
    )
    thread_worker()
    run_id = start(conn, "echo", {"both": "run", "extra": True})
    wait_run(conn, run_id, status="succeeded")
    [step] = steps_of(conn, run_id)
    assert step["result"] == {
        "input": {"static": 1, "both": "run", "extra": True},
        "attempt": 1,
        "key": f"{run_id}:only",
    }
    check_history(conn)


def test_dependants_ready_in_the_same_transaction(
    conn: psycopg.Connection[Any], thread_worker: Any
) -> None:
    define(
        conn,
        "chain",
        [
            {"key": "a", "capability": "test.echo@1"},
            {"key": "b", "capability": "test.echo@1", "dependsOn": ["a"]},
            {"key": "c", "capability": "test.echo@1", "dependsOn": ["a", "b"]},
        ],
    )
    run_id = start(conn, "chain")
    assert [s["status"] for s in steps_of(conn, run_id)] == ["ready", "blocked", "blocked"]
    thread_worker()
    wait_run(conn, run_id, status="succeeded")
    times = dict(
        conn.execute(
            "SELECT key, finished_at FROM rara_steps WHERE run_id = %s", (run_id,)
        ).fetchall()
    )
    ready_at = dict(
        conn.execute(
            "SELECT key, available_at FROM rara_steps WHERE run_id = %s", (run_id,)
        ).fetchall()
    )
    # now() is the transaction's start: equal timestamps = the same transaction.
    assert ready_at["b"] == times["a"]
    assert ready_at["c"] == times["b"]
    run = conn.execute(
        "SELECT started_at <= finished_at FROM rara_runs WHERE id = %s", (run_id,)
    ).fetchone()
    assert run == (True,)
    check_history(conn)


def test_failure_for_good_cancels_dependants_and_fails_run(
    conn: psycopg.Connection[Any], thread_worker: Any
) -> None:
    define(
        conn,
        "doomed",
        [
            {"key": "a", "capability": "test.fail@1"},
            {"key": "b", "capability": "test.echo@1", "dependsOn": ["a"]},
        ],
    )
    thread_worker()
    run_id = start(conn, "doomed", {"terminal": True})
    wait_run(conn, run_id, status="failed")
    a, b = steps_of(conn, run_id)
    assert (a["status"], b["status"]) == ("failed", "cancelled")
    assert b["error"]["code"] == "UPSTREAM_FAILED"


def test_artifacts_flow_downstream(conn: psycopg.Connection[Any], thread_worker: Any) -> None:
    define(
        conn,
        "art",
        [
            {"key": "make", "capability": "test.produce@1"},
            {"key": "use", "capability": "test.consume@1", "dependsOn": ["make"]},
        ],
    )
    thread_worker()
    run_id = start(conn, "art", {"text": "hello corpus"})
    wait_run(conn, run_id, status="succeeded")
    make, use = steps_of(conn, run_id)
    assert use["result"] == {"text": "hello corpus", "inputs": ["corpus.txt", "make/corpus.txt"]}
    manifest = conn.execute("SELECT name, digest, media_type FROM rara_step_artifacts").fetchall()
    assert manifest == [("corpus.txt", make["result"]["digest"], "text/plain")]


def test_progress_is_coalesced_and_the_last_state_lands(
    conn: psycopg.Connection[Any], thread_worker: Any
) -> None:
    define(conn, "chatty", [{"key": "talk", "capability": "test.chatty@1"}])
    thread_worker(progress_per_second=5.0)
    run_id = start(conn, "chatty", {"calls": 20_000, "seconds": 1.0})
    wait_run(conn, run_id, status="succeeded")
    rows = conn.execute(
        "SELECT seq, fraction, message, created_at FROM rara_events ORDER BY seq"
    ).fetchall()
    seqs = [r[0] for r in rows]
    assert seqs == sorted(set(seqs))
    assert seqs[0] >= 1
    span = (rows[-1][3] - rows[0][3]).total_seconds()
    assert 2 <= len(rows) <= 5 * span + 3, (len(rows), span)  # ≤ 5/s, plus the final flush
    assert rows[-1][1] == 1.0
    assert rows[-1][2] == "item 20000"


def test_checkpoints_resume_the_next_attempt(
    conn: psycopg.Connection[Any], thread_worker: Any
) -> None:
    retry = {"maxAttempts": 3, "initialDelay": "10ms", "maxDelay": "10ms"}
    define(
        conn,
        "ckpt",
        [
            {"key": "sync", "capability": "test.checkpoint_sync@1", "retry": retry},
            {"key": "async", "capability": "test.checkpoint_async@1", "retry": retry},
        ],
    )
    thread_worker()
    run_id = start(conn, "ckpt", {"items": 6, "crash_at": 4})
    wait_run(conn, run_id, status="succeeded")
    for step in steps_of(conn, run_id):
        assert step["result"] == {"resumed_from": 4, "attempt": 2}
    per_attempt = conn.execute(
        "SELECT s.key, c.attempt, max(c.seq), count(*) FROM rara_checkpoints c "
        "JOIN rara_steps s ON s.id = c.step_id GROUP BY 1, 2 ORDER BY 1, 2"
    ).fetchall()
    assert per_attempt == [
        ("async", 1, 4, 4),
        ("async", 2, 2, 2),
        ("sync", 1, 4, 4),
        ("sync", 2, 2, 2),
    ]


def test_awaited_checkpoints_resume_the_next_attempt(
    conn: psycopg.Connection[Any], thread_worker: Any
) -> None:
    retry = {"maxAttempts": 3, "initialDelay": "10ms", "maxDelay": "10ms"}
    define(conn, "ackpt", [{"key": "a", "capability": "test.checkpoint_awaited@1", "retry": retry}])
    thread_worker()
    run_id = start(conn, "ackpt", {"items": 6, "crash_at": 4})
    wait_run(conn, run_id, status="succeeded")
    assert steps_of(conn, run_id)[0]["result"] == {"resumed_from": 4, "attempt": 2}
    per_attempt = conn.execute(
        "SELECT c.attempt, max(c.seq), count(*) FROM rara_checkpoints c GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert per_attempt == [(1, 4, 4), (2, 2, 2)]


def test_grpc_steps_are_not_leased_without_a_grpc_executor(
    conn: psycopg.Connection[Any], thread_worker: Any
) -> None:
    define(
        conn,
        "routed",
        [
            {"key": "remote", "capability": "test.echo@1", "executor": "grpc"},
            {"key": "local", "capability": "test.echo@1"},
        ],
    )
    thread_worker()
    run_id = start(conn, "routed")
    wait_until(
        lambda: steps_of(conn, run_id)[1]["status"] == "succeeded", message="local step done"
    )
    assert steps_of(conn, run_id)[0]["status"] == "ready"
    assert attempts_of(conn, run_id)[0]["key"] == "local"


def test_parallel_steps_finishing_together_end_their_run(
    conn: psycopg.Connection[Any], thread_worker: Any
) -> None:
    """Sibling steps completing in concurrent transactions must not each miss the other's
    commit when aggregating the run (the run would stay `running` forever)."""
    define(conn, "fan", [{"key": f"p{i}", "capability": "test.noop@1"} for i in range(8)])
    thread_worker(concurrency=16)
    thread_worker(concurrency=16)
    runs = [start(conn, "fan") for _ in range(40)]
    for run_id in runs:
        wait_run(conn, run_id, status="succeeded", timeout=30)


def test_result_over_the_limit_fails_for_good_with_nothing_written(
    conn: psycopg.Connection[Any], thread_worker: Any
) -> None:
    from rara.worker.attempt import MAX_RESULT_BYTES

    define(conn, "big", [{"key": "b", "capability": "test.big@1"}])
    thread_worker()
    ok = start(conn, "big", {"bytes": 1000})
    too_big = start(conn, "big", {"bytes": MAX_RESULT_BYTES + 1})
    wait_run(conn, ok, status="succeeded")
    wait_run(conn, too_big, status="failed")
    [step] = steps_of(conn, too_big)
    assert step["attempt"] == 1  # not retried
    assert step["result"] is None
    assert step["error"]["code"] == "RESULT_TOO_LARGE"
    assert f"the limit is {MAX_RESULT_BYTES}" in step["error"]["message"]
    manifests = conn.execute(
        "SELECT r.id, count(a.name) FROM rara_runs r JOIN rara_steps s ON s.run_id = r.id "
        "LEFT JOIN rara_step_artifacts a ON a.step_id = s.id GROUP BY r.id ORDER BY r.id"
    ).fetchall()
    assert manifests == [(ok, 1), (too_big, 0)]  # result and manifest together, or neither
