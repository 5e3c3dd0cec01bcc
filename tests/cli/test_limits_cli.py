"""`rara limits`: the fleet's limits per capability, a namespace's quotas (`-n`) and weights,
listed with what each counts running; bad input is refused naming what is wrong, and nothing
is written."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from rara.cli.main import app
from rara.pg import limits


@pytest.fixture
def cli(database_url: str) -> CliRunner:
    return CliRunner(env={"DATABASE_URL": database_url, "RARA_NAMESPACE": None})


def _ok(cli: CliRunner, *args: str) -> str:
    result = cli.invoke(app, ["limits", *args])
    assert result.exit_code == 0, (args, result.output, result.stderr)
    return result.output


def test_limits_quotas_and_weights(cli: CliRunner, conn: psycopg.Connection[Any]) -> None:
    assert "gpu@1: at most 2 running" in _ok(cli, "set", "gpu@1", "2")
    assert "team-a/gpu@1: at most 1 running" in _ok(cli, "set", "gpu@1", "1", "-n", "team-a")
    _ok(cli, "set", "*", "5", "--namespace", "team-a")
    assert "team-b: weight 3" in _ok(cli, "weight", "team-b", "3")
    listing = _ok(cli)
    for expected in ("gpu@1", "team-a", "team-b", "every other namespace: weight 1"):
        assert expected in listing
    assert [(r.capability, r.max_running) for r in limits.list_all(conn)] == [("gpu@1", 2)]
    assert [(q.namespace, q.capability, q.max_running) for q in limits.list_quotas(conn)] == [
        ("team-a", "*", 5),
        ("team-a", "gpu@1", 1),
    ]
    assert [(s.namespace, s.weight) for s in limits.list_shares(conn)] == [("team-b", 3)]
    _ok(cli, "unset", "*", "-n", "team-a")
    _ok(cli, "weight", "team-b", "1")  # the default again: no row
    assert [q.capability for q in limits.list_quotas(conn)] == ["gpu@1"]
    assert limits.list_shares(conn) == []


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["set", "gpu@1", "1", "-n", "Team_A"], "--namespace 'Team_A'"),
        (["set", "*", "1"], "capability '*'"),
        (["set", "gpu", "1", "-n", "team-a"], "capability 'gpu'"),
        (["weight", "team_b", "2"], "NAMESPACE 'team_b'"),
        (["weight", "team-b", "0"], "greater than or equal to 1"),
    ],
)
def test_bad_input_is_refused_naming_it(
    cli: CliRunner, conn: psycopg.Connection[Any], args: list[str], names: str
) -> None:
    result = cli.invoke(app, ["limits", *args])
    assert result.exit_code == 2, result.output
    assert names in result.stderr
    assert "Traceback" not in result.output + result.stderr
    assert limits.list_all(conn) == []
    assert limits.list_quotas(conn) == []
    assert limits.list_shares(conn) == []
