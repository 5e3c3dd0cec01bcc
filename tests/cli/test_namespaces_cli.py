"""The CLI in namespaces: `-n/--namespace` (else RARA_NAMESPACE, else default) picks where
definitions, runs and schedules are applied, started and listed; `-A` lists every namespace
with a namespace column; a document's metadata.namespace wins unless `-n` names another,
which is refused; a bad namespace name is refused naming the flag, and nothing is written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner, Result

from rara.cli.main import app

DEFINITION = """\
apiVersion: rara.dev/v1alpha1
kind: WorkflowDefinition
metadata: {{name: etl{namespace}}}
spec:
  steps:
    - {{key: a, capability: test.produce@1, input: {{text: x}}}}
"""

SCHEDULE = """\
apiVersion: rara.dev/v1alpha1
kind: WorkflowSchedule
metadata: {{name: nightly{namespace}}}
spec:
  definition: etl
  schedule: "0 2 * * *"
"""


def _document(template: str, path: Path, namespace: str | None = None) -> str:
    path.write_text(template.format(namespace=f", namespace: {namespace}" if namespace else ""))
    return str(path)


@pytest.fixture
def cli(database_url: str) -> CliRunner:
    # RARA_NAMESPACE unset unless a test sets it: what the environment says must not leak in.
    return CliRunner(env={"DATABASE_URL": database_url, "RARA_NAMESPACE": None})


def _ok(cli: CliRunner, *args: str, env: dict[str, str] | None = None) -> str:
    result = cli.invoke(app, list(args), env=env)
    assert result.exit_code == 0, (args, result.output, result.stderr)
    return result.output


def _refused(cli: CliRunner, *args: str) -> str:
    result: Result = cli.invoke(app, list(args))
    assert result.exit_code == 2, (args, result.output, result.stderr)
    assert "Traceback" not in result.output + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), result.stderr
    return lines[0]


def _rows(conn: psycopg.Connection[Any], table: str) -> list[tuple[Any, ...]]:
    return conn.execute(f"SELECT namespace, name FROM {table} ORDER BY 1, 2").fetchall()


def _run_namespaces(conn: psycopg.Connection[Any]) -> list[tuple[int, str]]:
    return conn.execute("SELECT id, namespace FROM rara_runs ORDER BY id").fetchall()


def _table_rows(output: str) -> list[list[str]]:
    """The cells of a rich table's header and body rows (┃ and │ between cells)."""
    lines = (line.replace("┃", "│") for line in output.splitlines())
    return [
        [cell.strip() for cell in line.strip("│ ").split("│")]
        for line in lines
        if line.count("│") > 2
    ]


@pytest.mark.usefixtures("wide_console")
def test_definitions_and_runs_live_in_their_namespace(
    cli: CliRunner, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    doc = _document(DEFINITION, tmp_path / "etl.yaml")
    assert "team-a/etl version 1 " in _ok(cli, "definitions", "apply", "-f", doc, "-n", "team-a")
    assert "team-b/etl version 1 " in _ok(
        cli, "definitions", "apply", "-f", doc, "--namespace", "team-b"
    )
    assert _rows(conn, "rara_definitions") == [("team-a", "etl"), ("team-b", "etl")]
    assert "no workflow definition etl" in _refused(cli, "definitions", "show", "etl")
    assert "team-a/etl version 1" in _ok(cli, "definitions", "show", "etl", "-n", "team-a")

    listed = _table_rows(_ok(cli, "definitions", "list", "-n", "team-a"))
    assert [row[:2] for row in listed[1:]] == [["etl", "1"]], listed
    everywhere = _table_rows(_ok(cli, "definitions", "list", "-A"))
    assert everywhere[0][0] == "namespace", everywhere
    assert [row[:3] for row in everywhere[1:]] == [["team-a", "etl", "1"], ["team-b", "etl", "1"]]

    run_a = int(_ok(cli, "runs", "start", "etl", "-n", "team-a", "--queue-anyway", "-q"))
    run_b = int(
        _ok(
            cli,
            "runs",
            "start",
            "etl",
            "--queue-anyway",
            "-q",
            env={"RARA_NAMESPACE": "team-b"},
        )
    )
    assert _run_namespaces(conn) == [(run_a, "team-a"), (run_b, "team-b")]
    # Not in default: no definition etl there.
    assert "no workflow definition" in _refused(cli, "runs", "start", "etl", "--queue-anyway")

    only_a = _table_rows(_ok(cli, "runs", "list", "-n", "team-a"))
    assert only_a[0][0] == "run", only_a  # no namespace column without -A
    assert [row[0] for row in only_a[1:]] == [str(run_a)], only_a
    only_b = _table_rows(_ok(cli, "runs", "list", env={"RARA_NAMESPACE": "team-b"}))
    assert [row[0] for row in only_b[1:]] == [str(run_b)], only_b
    assert _table_rows(_ok(cli, "runs", "list"))[1:] == []  # default has none
    both = _table_rows(_ok(cli, "runs", "list", "--all-namespaces"))
    assert both[0][:2] == ["namespace", "run"], both
    assert sorted(row[:2] for row in both[1:]) == sorted(
        [["team-a", str(run_a)], ["team-b", str(run_b)]]
    )

    # A run is named by its id alone; a retry runs again in that run's namespace.
    assert "team-a/etl@1" in _ok(cli, "runs", "show", str(run_a))
    # Refused as `runs start` is while no live worker serves its capability; queued on request.
    assert "no live worker serves" in _refused(cli, "runs", "retry", str(run_a))
    retried = _ok(
        cli, "runs", "retry", str(run_a), "--queue-anyway", env={"RARA_NAMESPACE": "team-b"}
    )
    assert "team-a/etl@1 again" in retried
    assert _run_namespaces(conn)[-1][1] == "team-a"


@pytest.mark.parametrize(
    ("args", "env", "names"),
    [
        (("-n", "Team_A"), {}, "--namespace 'Team_A' is not a namespace name"),
        (("--namespace", "team-"), {}, "--namespace 'team-' is not a namespace name"),
        ((), {"RARA_NAMESPACE": "team a"}, "RARA_NAMESPACE 'team a' is not a namespace name"),
    ],
)
def test_a_bad_namespace_is_refused_naming_the_flag_and_writes_nothing(
    cli: CliRunner,
    conn: psycopg.Connection[Any],
    tmp_path: Path,
    args: tuple[str, ...],
    env: dict[str, str],
    names: str,
) -> None:
    doc = _document(DEFINITION, tmp_path / "etl.yaml")
    schedule = _document(SCHEDULE, tmp_path / "nightly.yaml")
    bad = CliRunner(env={**cli.env, **env})
    for command in (
        ("definitions", "apply", "-f", doc),
        ("definitions", "list"),
        ("runs", "start", "etl", "--queue-anyway"),
        ("runs", "list"),
        ("schedules", "apply", "-f", schedule),
        ("schedules", "list"),
        ("schedules", "pause", "nightly"),
    ):
        assert names in _refused(bad, *command, *args), command
    assert _rows(conn, "rara_definitions") == []
    assert _rows(conn, "rara_schedules") == []
    assert _run_namespaces(conn) == []


def test_a_document_namespace_wins_unless_the_flag_names_another(
    cli: CliRunner, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    doc = _document(DEFINITION, tmp_path / "etl.yaml", namespace="team-b")
    refused = _refused(cli, "definitions", "apply", "-f", doc, "-n", "team-a")
    assert "WorkflowDefinition etl: metadata.namespace is 'team-b'" in refused
    assert "the namespace given is 'team-a'" in refused
    assert _rows(conn, "rara_definitions") == []

    # RARA_NAMESPACE is a default, not an order: the document's namespace wins over it.
    applied = _ok(cli, "definitions", "apply", "-f", doc, env={"RARA_NAMESPACE": "team-a"})
    assert "team-b/etl version 1" in applied
    assert "team-b/etl version 1 " in _ok(cli, "definitions", "apply", "-f", doc, "-n", "team-b")
    assert _rows(conn, "rara_definitions") == [("team-b", "etl")]

    schedule = _document(SCHEDULE, tmp_path / "nightly.yaml", namespace="team-b")
    refused = _refused(cli, "schedules", "apply", "-f", schedule, "-n", "team-a")
    assert "WorkflowSchedule nightly: metadata.namespace is 'team-b'" in refused
    assert _rows(conn, "rara_schedules") == []
    assert "team-b/nightly (created)" in _ok(cli, "schedules", "apply", "-f", schedule)
    assert _rows(conn, "rara_schedules") == [("team-b", "nightly")]


@pytest.mark.usefixtures("wide_console")
def test_schedules_per_namespace(
    cli: CliRunner, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    doc = _document(DEFINITION, tmp_path / "etl.yaml")
    schedule = _document(SCHEDULE, tmp_path / "nightly.yaml")
    for namespace in ("team-a", "team-b"):
        _ok(cli, "definitions", "apply", "-f", doc, "-n", namespace)
        created = _ok(cli, "schedules", "apply", "-f", schedule, "-n", namespace)
        assert f"{namespace}/nightly (created)" in created
    assert _rows(conn, "rara_schedules") == [("team-a", "nightly"), ("team-b", "nightly")]
    assert _refused(cli, "schedules", "show", "nightly") == "error: no schedule nightly"

    assert "team-a/nightly: paused" in _ok(cli, "schedules", "pause", "nightly", "-n", "team-a")
    only_a = _table_rows(_ok(cli, "schedules", "list", "-n", "team-a"))
    assert [(row[0], row[5]) for row in only_a[1:]] == [("nightly", "paused")], only_a
    only_b = _table_rows(_ok(cli, "schedules", "list", env={"RARA_NAMESPACE": "team-b"}))
    assert [row[0] for row in only_b[1:]] == ["nightly"], only_b
    assert only_b[1][5] != "paused", only_b
    both = _table_rows(_ok(cli, "schedules", "list", "-A"))
    assert both[0][:2] == ["namespace", "name"], both
    assert [row[:2] for row in both[1:]] == [["team-a", "nightly"], ["team-b", "nightly"]], both
    assert [row[6] == "paused" for row in both[1:]] == [True, False], both

    run_id = int(_ok(cli, "schedules", "trigger", "nightly", "-n", "team-b").strip())
    assert _run_namespaces(conn) == [(run_id, "team-b")]
    assert f"run {run_id}" in _ok(cli, "schedules", "show", "nightly", "-n", "team-b")
    assert "team-b/nightly: deleted" in _ok(cli, "schedules", "delete", "nightly", "-n", "team-b")
    assert _rows(conn, "rara_schedules") == [("team-a", "nightly")]
