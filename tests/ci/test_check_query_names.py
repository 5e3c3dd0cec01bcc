"""`.ci/check-query-names.py` (run by `make lint`): the prose names statements that exist.

Each case is a small git work tree of its own, checked by the real script in a real process
(``tests.support.ci_checks``): a bad one must fail naming the file and line, a good one
must pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.ci_checks import check_tree

SCRIPT = "check-query-names.py"
# Built, not written out, so that this file does not trip the check it tests.
GONE_CALL = "rows = amany(conn, " + '"run_list_all", row)\n'

GOOD = {
    "db/queries/runs.sql": "-- name: run_get^\nSELECT 1;\n\n-- name: run_get_by_key$\nSELECT 1;\n"
    "-- name: run_cancel$\nSELECT 1;\n",
    "db/queries/lease.sql": "-- name: step_lease\n-- Leases (see run_get).\nSELECT 1;\n"
    "-- name: step_end_many\nSELECT 1;\n",
    "db/migrations/0001_old.sql": "-- run_refresh_many: applied, never edited\n",
    "docs/a.md": "`step_lease` and run_get; `run_id`, `step_key`, `rara_step_lease`, "
    "`runs.run_list`, db/queries/run_list.sql.\n"
    '```python\nrows = many(conn, "step_lease", row)\n```\n',
    "rara/x.py": '"""Reads ``run_get`` (sql("run_get_by_key"))."""\n'
    "# step_lease( is the lease\n"
    'run_list = "a string in code is no prose"\n',
}


def test_a_tree_that_names_what_exists_passes(tmp_path: Path) -> None:
    done = check_tree(SCRIPT, tmp_path, GOOD)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("name", "text", "finding"),
    [
        ("docs/a.md", "Ends by `run_count_many`.\n", "docs/a.md:1: `run_count_many`"),
        ("docs/a.md", 'ok\n```\nvalue(conn, "run_stop", bool)\n```\n', "docs/a.md:3: `run_stop`"),
        (
            "rara/x.py",
            '"""Typed.\n\nThe parent aggregation: step_complete_many."""\n',
            "rara/x.py:3: `step_complete_many`",
        ),
        ("rara/x.py", "x = 1  # written by step_cancel(_waiting)\n", "rara/x.py:1: `step_cancel`"),
        ("rara/x.py", GONE_CALL, "rara/x.py:1: `run_list_all`"),
        (
            "db/functions/runs.sql",
            "-- called as run_start_many\nSELECT 1;\n",
            "db/functions/runs.sql:1: `run_start_many`",
        ),
    ],
)
def test_a_statement_that_is_gone_fails(tmp_path: Path, name: str, text: str, finding: str) -> None:
    done = check_tree(SCRIPT, tmp_path, {**GOOD, name: text})
    assert done.returncode == 1
    assert finding in done.stdout, done.stdout
