"""rara.testing, the kit handler authors test with: a handler run by a real worker against the
test's database and a local artifact store — its result, its error, retries with a
checkpoint, and its artifacts read back."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from rara.context import OutputArtifact, StepContext, StepOutcome
from rara.errors import TerminalError
from rara.testing import run_step, temporary_database
from rara.worker.registry import Registry

registry = Registry()


@registry.handler("kit.echo@1")
def echo(ctx: StepContext) -> StepOutcome:
    ref = ctx.artifacts.put_bytes(b"echoed", "text/plain")
    return StepOutcome(
        result={"input": dict(ctx.input), "attempt": ctx.attempt, "step": ctx.step_key},
        artifacts=[OutputArtifact("echo.txt", ref, "text/plain")],
    )


@registry.handler("kit.resume@1")
async def resume(ctx: StepContext) -> dict[str, object]:
    """Fails its first attempt after a checkpoint; the next starts from it."""
    if ctx.checkpoint is None:
        await ctx.asave_checkpoint({"done": 3})
        raise RuntimeError("preempted")
    return {"resumed_from": dict(ctx.checkpoint.state), "attempt": ctx.attempt}


@registry.handler("kit.refuse@1")
def refuse(ctx: StepContext) -> None:
    raise TerminalError("no such document: 42")


def test_a_handler_runs_as_a_worker_runs_it(database_url: str, tmp_path: Path) -> None:
    step = run_step(
        registry, "kit.echo@1", {"name": "Ada"}, step_input={"shout": True},
        database_url=database_url, artifacts=tmp_path / "artifacts",
    )  # fmt: skip
    assert step.status == "succeeded", step.error
    # The run input overlays the step's own input, as in a run of a definition.
    assert step.result == {"input": {"name": "Ada", "shout": True}, "attempt": 1, "step": "step"}
    assert [a["outcome"] for a in step.attempts] == ["succeeded"]
    assert step.artifacts["echo.txt"].startswith("sha256:")
    assert step.read_artifact("echo.txt") == b"echoed"
    assert (tmp_path / "artifacts").is_dir()


def test_a_retry_starts_from_the_checkpoint(database_url: str, tmp_path: Path) -> None:
    step = run_step(
        registry, "kit.resume@1", max_attempts=2,
        database_url=database_url, artifacts=tmp_path,
    )  # fmt: skip
    assert step.status == "succeeded", step.error
    assert step.result == {"resumed_from": {"done": 3}, "attempt": 2}
    assert [a["outcome"] for a in step.attempts] == ["failed", "succeeded"]
    assert "preempted" in str(step.attempts[0]["error"])


def test_a_failure_is_returned_with_its_error(database_url: str, tmp_path: Path) -> None:
    step = run_step(
        "tests.guide.test_testing_kit", "kit.refuse@1", max_attempts=3,
        database_url=database_url, artifacts=tmp_path,
    )  # fmt: skip
    assert step.status == "failed"
    assert step.error is not None
    assert "no such document: 42" in step.error["message"]
    assert len(step.attempts) == 1  # terminal: not retried
    assert step.result is None


def test_an_unregistered_capability_is_named(database_url: str, tmp_path: Path) -> None:
    with pytest.raises(KeyError, match=r"no handler for kit\.nothing@1 \(registered: kit\."):
        run_step(registry, "kit.nothing@1", database_url=database_url, artifacts=tmp_path)


def test_temporary_database_is_migrated_and_dropped(pg_admin_url: str) -> None:
    with temporary_database(pg_admin_url) as url:
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT count(*) FROM rara_runs").fetchone() == (0,)
        name = url.rsplit("/", 1)[1]
    with psycopg.connect(pg_admin_url) as conn:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
    assert found is None
