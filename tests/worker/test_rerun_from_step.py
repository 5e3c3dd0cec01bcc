"""Re-run from a step (`rara runs retry N --from-step STEP`, ``Client.resume_run(N,
rerun_from=STEP)``; docs/step-cache.md, "Resume"): a new run of run N's version and input in
which the chosen step and every step downstream of it run again, and every other step that
succeeded in run N is reused."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from rara.cli.main import app
from rara.client import Client
from rara.errors import ResumeRefused
from tests.support.runs import define, reused_of, start, wait_run
from tests.worker.handlers import TALLY


def _calls(run_id: int) -> list[str]:
    return sorted(k.split(":", 1)[1] for k in TALLY if k.split(":", 1)[0] == str(run_id))


def _chain(conn: psycopg.Connection[Any]) -> int:
    """A chain a → b → c that succeeded: the run re-run from."""
    define(
        conn,
        "chain",
        [
            {"key": "a", "capability": "test.tally@1"},
            {"key": "b", "capability": "test.tally@1", "dependsOn": ["a"]},
            {"key": "c", "capability": "test.tally@1", "dependsOn": ["b"]},
        ],
    )
    run = start(conn, "chain", {"text": "t"})
    wait_run(conn, run, status="succeeded")
    return run


def test_a_rerun_from_a_step_runs_it_and_its_dependants_again(
    conn: psycopg.Connection[Any], thread_worker: Any, database_url: str
) -> None:
    thread_worker()
    done = _chain(conn)
    client = Client(database_url)
    again = client.resume_run(done, rerun_from="b", idempotency_key="rerun-b")
    assert again.created
    assert again.reused == 1
    wait_run(conn, again.run_id, status="succeeded")
    assert _calls(again.run_id) == ["b", "c"]  # a was reused, b and c ran again
    reused = reused_of(conn, again.run_id)
    assert reused["a"] == {
        "via": "resume",
        "run": done,
        "step": reused["a"]["step"],
        "key": "a",
        "attempt": 1,
    }
    assert reused["b"] is None
    assert reused["c"] is None
    row = conn.execute(
        "SELECT resumes, rerun_from FROM rara_runs WHERE id = %s", (again.run_id,)
    ).fetchone()
    assert row == (done, "b")
    # The same key finds the run it made.
    twice = client.resume_run(done, rerun_from="b", idempotency_key="rerun-b")
    assert (twice.run_id, twice.created) == (again.run_id, False)


def test_a_rerun_from_an_unknown_step_is_refused_naming_it(
    conn: psycopg.Connection[Any], thread_worker: Any, database_url: str
) -> None:
    thread_worker()
    done = _chain(conn)
    with pytest.raises(ResumeRefused, match=f'run {done} has no step "nope" to re-run from'):
        Client(database_url).resume_run(done, rerun_from="nope")
    # A plain resume of a run that succeeded stays refused: re-running needs a step.
    with pytest.raises(ResumeRefused, match="only a failed or cancelled run resumes"):
        Client(database_url).resume_run(done)


def test_the_cli_reruns_from_a_step(
    conn: psycopg.Connection[Any], thread_worker: Any, database_url: str
) -> None:
    worker = thread_worker()
    done = _chain(conn)
    cli = CliRunner(env={"DATABASE_URL": database_url, "COLUMNS": "200"})
    out = cli.invoke(app, ["runs", "retry", str(done), "--from-step", "c"])
    assert out.exit_code == 0, out.output
    rerun = int(out.output.split()[1].rstrip(":"))
    assert out.output.startswith(f"run {rerun}: resumes run {done} from step c, 2 steps reused")
    wait_run(conn, rerun, status="succeeded")
    assert _calls(rerun) == ["c"]
    unknown = cli.invoke(app, ["runs", "retry", str(done), "--from-step", "zz"])
    assert unknown.exit_code != 0
    assert 'has no step "zz"' in unknown.output
    helped = cli.invoke(app, ["runs", "retry", "--help"])
    assert "--from-step" in helped.output
    # With no live worker, a re-run is refused for what it would run again, though every
    # step succeeded in the run it re-runs.
    worker.stop()
    refused = cli.invoke(app, ["runs", "retry", str(done), "--from-step", "c"])
    assert refused.exit_code != 0
    assert "no live worker serves test.tally@1" in refused.output
