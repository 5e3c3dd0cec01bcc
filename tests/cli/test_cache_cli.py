"""`rara runs show|watch` name a step reused from the step cache, and where from; `rara cache`
lists, explains and drops entries (docs/step-cache.md)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from rara.cli.main import app
from tests.support.runs import define, start, wait_run


@pytest.mark.usefixtures("wide_console")
def test_show_watch_and_cache_commands(
    conn: psycopg.Connection[Any], thread_worker: Any, database_url: str
) -> None:
    thread_worker()
    define(
        conn,
        "cached",
        [
            {"key": "a", "capability": "test.tally@1", "cache": {}},
            {"key": "b", "capability": "test.tally@1", "dependsOn": ["a"]},
        ],
    )
    first = start(conn, "cached", {"text": "x"})
    wait_run(conn, first, status="succeeded")
    again = start(conn, "cached", {"text": "x"})
    wait_run(conn, again, status="succeeded")
    other = start(conn, "cached", {"text": "y"})
    wait_run(conn, other, status="succeeded")
    cli = CliRunner(env={"DATABASE_URL": database_url})

    watched = cli.invoke(app, ["runs", "watch", str(again)])
    assert watched.exit_code == 0, watched.output
    [a_line] = [line for line in watched.output.splitlines() if line.startswith("a succeeded")]
    assert a_line.endswith(f"(reused from cache: run {first} step a attempt 1)"), a_line
    shown = cli.invoke(app, ["runs", "show", str(again)])
    assert shown.exit_code == 0, shown.output
    assert f"cache: run {first} step a attempt 1" in shown.output

    listed = cli.invoke(app, ["cache", "list"])
    assert listed.exit_code == 0, listed.output
    assert listed.output.count("test.tally@1") == 2  # a, of each input

    explained = cli.invoke(app, ["cache", "explain", str(other), "a"])
    assert explained.exit_code == 0, explained.output
    assert "miss:" in explained.output
    assert f"(run {first}); changed: input" in explained.output
    hit = cli.invoke(app, ["cache", "explain", str(again), "a"])
    assert hit.exit_code == 0, hit.output
    assert "hit: sha256:" in hit.output
    uncached = cli.invoke(app, ["cache", "explain", str(again), "b"])
    assert uncached.exit_code == 2
    assert "has no cache key" in uncached.output

    dropped = cli.invoke(app, ["cache", "drop", "--capability", "test.tally@1"])
    assert dropped.exit_code == 0, dropped.output
    assert "dropped 2 entries" in dropped.output
    bad = cli.invoke(app, ["cache", "drop", "sha256:" + "0" * 64])
    assert bad.exit_code == 2
    assert "no such entry" in bad.output
    third = start(conn, "cached", {"text": "x"})
    wait_run(conn, third, status="succeeded")
    shown = cli.invoke(app, ["runs", "show", str(third)])
    assert "cache: run" not in shown.output  # dropped: it ran


@pytest.mark.usefixtures("wide_console")
def test_explain_compares_with_the_entry_that_matches_best(
    conn: psycopg.Connection[Any], thread_worker: Any, database_url: str
) -> None:
    """`rara cache explain` compares a missed step with the entry whose parts match most, not
    the newest, and names the part that differs and, for the input, the fields."""
    fields = {"limit": {"type": "integer"}}  # (not text: else its key would be s's)
    define(
        conn,
        "explained",
        [
            {"key": "s", "capability": "test.tally@1", "cache": {}},
            {
                "key": "declared",
                "capability": "test.tally@1",
                "cache": {},
                "inputSchema": {"type": "object", "properties": fields},
            },
        ],
    )
    thread_worker()
    runs = []
    for run_input in (
        {"text": "x", "limit": 1},
        {"text": "other", "limit": 9},
        {"text": "x", "limit": 2},
    ):
        runs.append(start(conn, "explained", run_input))
        wait_run(conn, runs[-1], status="succeeded")
    best, _newer, missed = runs  # the newer entry differs in two fields

    cli = CliRunner(env={"DATABASE_URL": database_url})
    explained = cli.invoke(app, ["cache", "explain", str(missed), "s"])
    assert explained.exit_code == 0, explained.output
    assert "best-matching entry (2 compared): sha256:" in explained.output
    assert f"(run {best}); changed: input (limit)" in explained.output
    # Without an inputSchema naming its fields, every field is in the key: it says so.
    assert "'s' has no inputSchema naming the run input fields it reads" in explained.output
    declared = cli.invoke(app, ["cache", "explain", str(missed), "declared"])
    assert "changed: input (limit)" in declared.output
    assert "no inputSchema" not in declared.output
    unknown = cli.invoke(app, ["cache", "explain", str(missed), "nope"])
    assert unknown.exit_code == 2
    assert f"run {missed} has no step 'nope'" in unknown.output
    rows = [line.split() for line in explained.output.splitlines() if "input.limit *" in line]
    assert len(rows) == 1, explained.output
    assert rows[0][2] != rows[0][3], explained.output  # two digests
