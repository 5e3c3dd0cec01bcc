"""Resume from failure (`rara runs retry N --from-failure`; docs/step-cache.md, "Resume"): a
new run of the same version and input reuses exactly the steps that succeeded in run N,
cached or not, and runs the rest."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from rara.cli.main import app
from rara.errors import ResumeRefused
from rara.runs import resume_run
from tests.support.runs import define, reused_of, start, steps_of, wait_run
from tests.worker.handlers import FAILING, TALLY

ITEMS = {"text": "t", "items": ["p", "q", "r"]}


def _calls(run_id: int) -> list[str]:
    return sorted(k.split(":", 1)[1] for k in TALLY if k.split(":", 1)[0] == str(run_id))


def _define(conn: psycopg.Connection[Any]) -> None:
    once = {"retry": {"maxAttempts": 1}}
    define(
        conn,
        "resumable",
        [
            {"key": "a", "capability": "test.tally@1"},
            {
                "key": "shard",
                "capability": "test.tally@1",
                "dependsOn": ["a"],
                "map": {"over": "input.items"},
            },
            {"key": "c", "capability": "test.flaky@1", "dependsOn": ["a"], **once},
            {"key": "d", "capability": "test.tally@1", "dependsOn": ["shard", "c"]},
            {"key": "e", "capability": "test.flaky@1", **once},
        ],
    )


def test_a_resume_reuses_exactly_the_succeeded_steps(
    conn: psycopg.Connection[Any], thread_worker: Any, database_url: str
) -> None:
    _define(conn)
    thread_worker()
    FAILING.update({"c", "e"})
    failed = start(conn, "resumable", ITEMS)
    wait_run(conn, failed, status="failed")
    status = {s["key"]: s["status"] for s in steps_of(conn, failed) if "[" not in s["key"]}
    assert status == {
        "a": "succeeded",
        "shard": "succeeded",
        "c": "failed",
        "d": "cancelled",
        "e": "failed",
    }
    FAILING.clear()

    cli = CliRunner(env={"DATABASE_URL": database_url, "COLUMNS": "200"})
    out = cli.invoke(app, ["runs", "retry", str(failed), "--from-failure"])
    assert out.exit_code == 0, out.output
    resumed = int(out.output.split()[1].rstrip(":"))
    assert out.output.startswith(f"run {resumed}: resumes run {failed}, 5 steps reused")
    wait_run(conn, resumed, status="succeeded")

    # Ran: what failed (c, e) and what never ran (d). Reused: a, the map and its children.
    assert _calls(resumed) == ["c", "d", "e"]
    reused = reused_of(conn, resumed)
    assert sorted(k for k, v in reused.items() if v) == [
        "a",
        "shard",
        "shard[0]",
        "shard[1]",
        "shard[2]",
    ]
    assert {v["via"] for v in reused.values() if v} == {"resume"}
    assert {v["run"] for v in reused.values() if v} == {failed}
    attempts = conn.execute(
        "SELECT count(*) FROM rara_attempts a JOIN rara_steps s ON s.id = a.step_id"
        " WHERE s.run_id = %s AND s.reused_from IS NOT NULL",
        (resumed,),
    ).fetchone()
    assert attempts == (0,)  # a reused step never ran in the new run

    # The same results as a run that never failed.
    clean = start(conn, "resumable", ITEMS)
    wait_run(conn, clean, status="succeeded")
    results = {s["key"]: s["result"] for s in steps_of(conn, clean)}
    assert {s["key"]: s["result"] for s in steps_of(conn, resumed)} == results


def test_a_resume_is_refused_when_it_would_differ_or_has_nothing_to_do(
    conn: psycopg.Connection[Any], thread_worker: Any, database_url: str
) -> None:
    _define(conn)
    thread_worker()
    FAILING.add("e")
    failed = start(conn, "resumable", ITEMS)
    wait_run(conn, failed, status="failed")
    with pytest.raises(ResumeRefused, match="another input"):
        resume_run(conn, failed, input={"text": "other", "items": []})
    with pytest.raises(ResumeRefused, match="version 1, not 2"):
        resume_run(conn, failed, version=2)
    FAILING.clear()
    clean = start(conn, "resumable", ITEMS)
    wait_run(conn, clean, status="succeeded")
    cli = CliRunner(env={"DATABASE_URL": database_url})
    refused = cli.invoke(app, ["runs", "retry", str(clean), "--from-failure"])
    assert refused.exit_code == 2
    assert "only a failed or cancelled run resumes" in refused.output
    missing = cli.invoke(app, ["runs", "retry", "999", "--from-failure"])
    assert missing.exit_code == 2
    assert "no run 999" in missing.output

    first = resume_run(conn, failed, idempotency_key="again")
    resume_run(conn, failed)  # another run with reused steps, not counted as the first's
    second = resume_run(conn, failed, idempotency_key="again")
    assert (first.created, second.created) == (True, False)
    assert second.run_id == first.run_id
    assert second.reused == first.reused == 7  # all but e: a, shard and its 3 children, c, d
