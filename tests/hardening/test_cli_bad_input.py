"""Bad CLI input: exit code 2, one ``error: …`` line naming the problem, no traceback, and
nothing written to the database."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from rara.cli.main import app
from rara.runs import MAX_INPUT_BYTES
from tests.support.definitions import apply

ONE_STEP = [{"key": "a", "capability": "x@1"}]


@pytest.fixture
def cli(database_url: str) -> CliRunner:
    return CliRunner(env={"DATABASE_URL": database_url})


def _refused(cli: CliRunner, *args: str, input: str | None = None) -> str:
    """The one ``error: …`` line a refused command prints."""
    text = _refused_text(cli, *args, input=input)
    lines = text.splitlines()
    assert len(lines) == 1, text
    return lines[0]


def _refused_text(cli: CliRunner, *args: str, input: str | None = None) -> str:
    """All a refused command prints: an invalid definition lists one problem a line."""
    result = cli.invoke(app, list(args), input=input)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    assert "Traceback" not in result.output + result.stderr
    assert result.stderr.startswith("error: "), result.stderr
    return result.stderr.rstrip()


def _runs(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT count(*) FROM rara_runs").fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize(
    ("value", "names"),
    [
        ("{not json", "--input is not valid JSON: Expecting property name"),
        ("[1, 2]", "--input must be a JSON object, got list"),
        ("[]", "--input must be a JSON object, got list"),  # not silently "no input"
        ("null", "--input must be a JSON object, got null"),
        ('"text"', "--input must be a JSON object, got str"),
        ('{"x": NaN}', "run input is not JSON-serialisable"),
        ('{"url": "postgresql://app:hunter2hunter2@db/x"}', "run input holds what looks like"),
        ("@does-not-exist.json", "--input: cannot read does-not-exist.json: No such file"),
    ],
)
def test_runs_start_bad_input(
    cli: CliRunner, conn: psycopg.Connection[Any], value: str, names: str
) -> None:
    apply(conn, "wf", ONE_STEP)
    line = _refused(cli, "runs", "start", "wf", "--queue-anyway", "--input", value)
    assert names in line, line
    assert "hunter2" not in line
    assert _runs(conn) == 0


def test_runs_start_input_files(
    cli: CliRunner, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    apply(conn, "wf", ONE_STEP)
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"blob": "x" * MAX_INPUT_BYTES}))
    line = _refused(cli, "runs", "start", "wf", "--queue-anyway", "--input", f"@{big}")
    assert f"the limit is {MAX_INPUT_BYTES}" in line
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps({"blob": "x" * (4 * MAX_INPUT_BYTES)}))
    assert "huge.json is" in _refused(
        cli, "runs", "start", "wf", "--queue-anyway", "--input", f"@{huge}"
    )
    assert "Is a directory" in _refused(
        cli, "runs", "start", "wf", "--queue-anyway", "--input", f"@{tmp_path}"
    )
    binary = tmp_path / "input.bin"
    binary.write_bytes(b"\xff\xfe{}")
    assert "is not UTF-8 text" in _refused(
        cli, "runs", "start", "wf", "--queue-anyway", "--input", f"@{binary}"
    )
    assert _runs(conn) == 0
    ok = tmp_path / "ok.json"
    ok.write_text('{"n": 1}')
    result = cli.invoke(app, ["runs", "start", "wf", "--queue-anyway", "--input", f"@{ok}"])
    assert result.exit_code == 0, result.stderr
    assert _runs(conn) == 1


def test_unknown_definitions_versions_and_runs(
    cli: CliRunner, conn: psycopg.Connection[Any]
) -> None:
    apply(conn, "wf", ONE_STEP)
    assert "no workflow definition nope" in _refused(cli, "runs", "start", "nope")
    assert "no workflow definition wf version 9" in _refused(
        cli, "runs", "start", "wf", "--version", "9", "--queue-anyway"
    )
    # Brackets in user input are printed, not read as console markup (that was a crash).
    assert "no workflow definition [/bold]" in _refused(cli, "runs", "start", "[/bold]")
    assert "no run 999999" in _refused(cli, "runs", "show", "999999")
    assert "no run 999999" in _refused(cli, "runs", "cancel", "999999")
    assert "no workflow definition nope" in _refused(cli, "definitions", "show", "nope")
    assert _runs(conn) == 0


def test_start_refused_when_nobody_serves_the_capability(
    cli: CliRunner, conn: psycopg.Connection[Any]
) -> None:
    apply(conn, "wf", ONE_STEP)
    assert "no live worker serves x@1" in _refused(cli, "runs", "start", "wf")
    assert _runs(conn) == 0


def test_definitions_apply_bad_files(
    cli: CliRunner, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    assert "-f: cannot read missing.yaml: No such file or directory" in _refused(
        cli, "definitions", "apply", "-f", "missing.yaml"
    )
    assert "Is a directory" in _refused(cli, "definitions", "apply", "-f", str(tmp_path))
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: rara.dev/v1alpha1\nmetadata: {name: w}}\n")
    header, problem, *excerpt = _refused_text(
        cli, "definitions", "apply", "-f", str(bad)
    ).splitlines()
    assert header == "error: invalid workflow definition:"
    # The file and the position are named, and PyYAML's excerpt keeps its caret line.
    assert problem.startswith(f"  {bad}: not valid YAML at line 2, column 20: "), problem
    assert excerpt[0].strip() == "metadata: {name: w}}", excerpt
    assert excerpt[1].index("^") == excerpt[0].index("}}") + 1, excerpt
    invalid = tmp_path / "invalid.yaml"
    invalid.write_text(
        "apiVersion: rara.dev/v1alpha1\nkind: WorkflowDefinition\nmetadata: {name: w}\n"
        "spec:\n  steps:\n    - {key: a, capability: nomajor}\n"
    )
    text = _refused_text(cli, "definitions", "apply", "-f", str(invalid))
    assert text.splitlines()[0] == "error: invalid workflow definition:"
    assert "  spec.steps[0] (step 'a').capability:" in text
    typo = tmp_path / "typo.yaml"
    typo.write_text(
        "apiVersion: rara.dev/v1alpha1\nkind: WorkflowDefinition\n"
        "metadata: {name: w}\nsepc: {steps: [{key: a, capability: x@1}]}\n"
    )
    text = _refused_text(cli, "definitions", "apply", "-f", str(typo))
    assert "  spec: Field required" in text
    assert "  sepc: Extra inputs are not permitted" in text
    assert "<stdin>: a definition must be a mapping" in _refused_text(
        cli, "definitions", "apply", "-f", "-", input="- just\n- a list\n"
    )
    row = conn.execute("SELECT count(*) FROM rara_definition_versions").fetchone()
    assert row == (0,)


def test_unreachable_database_is_exit_3_without_the_password(tmp_path: Path) -> None:
    url = "postgresql://app:hunter2hunter2@127.0.0.1:1/nope?connect_timeout=2"
    result = CliRunner(env={"DATABASE_URL": url}).invoke(app, ["runs", "show", "1"])
    assert result.exit_code == 3, result.stderr
    assert result.stderr.startswith("error: cannot reach the database")
    assert "hunter2" not in result.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["runs", "cancel", "abc"],
            "error: invalid value for 'run_id': Input should be a valid "
            "integer, unable to parse string as an integer (see: rara "
            "runs cancel --help)",
        ),
        (["runs", "cancel"], "error: missing argument 'run_id' (see: rara runs cancel --help)"),
        (
            ["runs", "show", "1", "--bogus"],
            "error: no such option: --bogus (see: rara runs show --help)",
        ),
        (["nope"], "error: no such command 'nope' (see: rara --help)"),
    ],
)
def test_usage_errors_are_one_line_like_every_refusal(args: list[str], expected: str) -> None:
    """The console script, not CliRunner: the one-line form is made in rara.cli.main.main."""
    result = subprocess.run(
        [sys.executable, "-c", "from rara.cli.main import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stderr.strip(), result.stdout) == (2, expected, "")
