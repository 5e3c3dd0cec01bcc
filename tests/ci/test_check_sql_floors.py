"""`.ci/check-sql-floors.py` (run by `make lint`): the function files stand on floors.

Each case is a small git work tree of its own, checked by the real script in a real process
(``tests.support.ci_checks``): a bad one must fail naming the file, the function and the
callee, a good one must pass. The last case checks this repository itself.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.ci_checks import CI, check_tree

SCRIPT = "check-sql-floors.py"


def fn(name: str, body: str = "NULL", language: str = "plpgsql") -> str:
    """A function file's definition of ``name`` whose body evaluates ``body``."""
    if language == "sql":
        return (
            f"CREATE OR REPLACE FUNCTION {name}() RETURNS integer\nLANGUAGE sql AS $$\n"
            f"    SELECT {body}\n$$;\nSELECT rara_grant('{name}');\n\n"
        )
    return (
        f"CREATE OR REPLACE FUNCTION {name}() RETURNS integer\nLANGUAGE plpgsql AS $$\n"
        f"BEGIN\n    RETURN {body};\nEND $$;\nSELECT rara_grant('{name}');\n\n"
    )


GOOD = {
    "db/functions/ORDER": "# lowest first\nbase.sql  # the ground\nsteps.sql\nlease.sql\n",
    "db/functions/base.sql": "CREATE OR REPLACE FUNCTION rara_grant(routine text) RETURNS void\n"
    "LANGUAGE plpgsql AS $$ BEGIN END $$;\nSELECT rara_grant('rara_grant');\n",
    "db/functions/steps.sql": fn("rara_run_count", "1")
    + fn("rara_step_unblock", "rara_run_count() + rara_map_expand()")
    # a circle inside one file is no circle between floors
    + fn("rara_map_expand", "rara_step_unblock()"),
    "db/functions/lease.sql": "-- rara_lease_late( is in a comment: no call\n"
    + fn("rara_step_end", "rara_step_unblock() + rara_run_count()  /* rara_lease_late() */")
    + fn("rara_lease_late", "'rara_step_end: a word in a string, no call'"),
    "db/migrations/0001_first.sql": "CREATE FUNCTION rara_grant(routine text) RETURNS void\n"
    "LANGUAGE plpgsql AS $$ BEGIN END $$;\n"
    "CREATE FUNCTION rara_old() RETURNS integer LANGUAGE sql AS $$ SELECT 1 $$;\n"
    "CREATE FUNCTION rara_renamed() RETURNS integer LANGUAGE sql AS $$ SELECT 1 $$;\n",
    "db/migrations/0002_second.sql": "DROP FUNCTION IF EXISTS rara_old(), rara_x(text);\n"
    "ALTER FUNCTION rara_renamed() RENAME TO rara_run_count;\n"
    "CREATE OR REPLACE FUNCTION rara_step_end() RETURNS integer\n"
    "LANGUAGE sql AS $$ SELECT 2 $$;\n",
}


def test_a_tree_on_floors_passes(tmp_path: Path) -> None:
    done = check_tree(SCRIPT, tmp_path, GOOD)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_call_up_a_floor_fails_naming_file_function_and_callee(tmp_path: Path) -> None:
    """steps.sql calls lease.sql, which calls steps.sql: a circle between two floors."""
    steps = GOOD["db/functions/steps.sql"] + fn("rara_step_cancel", "rara_step_end()")
    done = check_tree(SCRIPT, tmp_path, {**GOOD, "db/functions/steps.sql": steps})
    assert done.returncode == 1
    assert (
        "db/functions/steps.sql:22: rara_step_cancel calls rara_step_end of "
        "db/functions/lease.sql, a floor above it" in done.stdout
    ), done.stdout


def test_a_statement_of_a_file_that_calls_up_fails(tmp_path: Path) -> None:
    base = GOOD["db/functions/base.sql"] + "SELECT rara_run_count();\n"
    done = check_tree(SCRIPT, tmp_path, {**GOOD, "db/functions/base.sql": base})
    assert done.returncode == 1
    assert (
        "db/functions/base.sql:4: a statement of the file calls rara_run_count of "
        "db/functions/steps.sql, a floor above it" in done.stdout
    ), done.stdout


def test_a_sql_body_calling_a_function_defined_below_it_fails(tmp_path: Path) -> None:
    """PostgreSQL resolves a LANGUAGE sql body's names when it creates it: callee first."""
    lease = fn("rara_lease_first", "rara_lease_second()", language="sql") + fn(
        "rara_lease_second", "1"
    )
    done = check_tree(SCRIPT, tmp_path, {**GOOD, "db/functions/lease.sql": lease})
    assert done.returncode == 1
    assert (
        "db/functions/lease.sql:1: rara_lease_first calls rara_lease_second, defined below it "
        "(line 7)" in done.stdout
    ), done.stdout


def test_a_function_only_in_a_migration_fails(tmp_path: Path) -> None:
    migration = (
        GOOD["db/migrations/0002_second.sql"]
        + "\n-- (a trigger function, as one of 0001 was)\n"
        + "CREATE FUNCTION rara_notify_ready() RETURNS trigger\n"
        + "LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;\n"
    )
    done = check_tree(SCRIPT, tmp_path, {**GOOD, "db/migrations/0002_second.sql": migration})
    assert done.returncode == 1
    assert (
        "db/migrations/0002_second.sql:7: rara_notify_ready is defined here and in no file of "
        "db/functions/" in done.stdout
    ), done.stdout


def test_a_function_only_in_the_baseline_fails_and_the_retired_chain_is_not_read(
    tmp_path: Path,
) -> None:
    retired = "CREATE FUNCTION rara_gone() RETURNS integer LANGUAGE sql AS $$ SELECT 1 $$;\n"
    baseline = (
        "CREATE FUNCTION rara_step_end() RETURNS integer LANGUAGE sql AS $$ SELECT 1 $$;\n"
        "CREATE FUNCTION rara_notify_run() RETURNS trigger\n"
        "LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;\n"
    )
    files = {**GOOD, "db/retired/0001_first.sql": retired, "db/baseline.sql": baseline}
    done = check_tree(SCRIPT, tmp_path, files)
    assert done.returncode == 1
    assert done.stdout.splitlines()[:-1] == [
        "db/baseline.sql:2: rara_notify_run is defined here and in no file of db/functions/: "
        "put its current definition, with its rara_grant, in the function file of its floor"
    ], done.stdout


@pytest.mark.parametrize(
    ("order", "finding"),
    [
        ("base.sql\nsteps.sql\n", "db/functions/lease.sql is not listed"),
        ("base.sql\nsteps.sql\nlease.sql\nmaps.sql\n", "maps.sql is no file of db/functions/"),
        ("base.sql\nsteps.sql\nlease.sql\nbase.sql\n", "base.sql is listed twice"),
    ],
)
def test_an_order_that_is_not_each_file_once_fails(
    tmp_path: Path, order: str, finding: str
) -> None:
    done = check_tree(SCRIPT, tmp_path, {**GOOD, "db/functions/ORDER": order})
    assert done.returncode == 1
    assert finding in done.stdout, done.stdout


def test_a_function_in_two_files_fails(tmp_path: Path) -> None:
    lease = GOOD["db/functions/lease.sql"] + fn("rara_run_count", "2")
    done = check_tree(SCRIPT, tmp_path, {**GOOD, "db/functions/lease.sql": lease})
    assert done.returncode == 1
    assert "rara_run_count is defined in db/functions/steps.sql too" in done.stdout, done.stdout


def test_the_repository_stands_on_its_floors() -> None:
    done = subprocess.run(
        [sys.executable, str(CI / SCRIPT)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
