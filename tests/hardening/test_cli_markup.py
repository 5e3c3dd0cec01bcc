"""What a worker wrote is printed as it is: a step's error, result or progress message is data,
never Rich markup nor terminal control. Before, `rara runs show` printed a step error holding
`[link=http://x]click[/link]` as a terminal hyperlink (Rich read it as markup) and passed an
escape sequence in it to the terminal. Now every data string goes through ``literal``
(rara.cli.common): shown character for character, control characters as escapes. The real
command, in a subprocess whose Rich believes it writes to a colour terminal."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg

from rara.cli.common import literal, visible
from tests.support.runs import define, start, wait_run

MARKUP = "[link=http://x]click[/link] [bold red]boom :smile:"
EVIL = MARKUP + " \x1b[2J"  # and an escape sequence: clear the screen
SHOWN = MARKUP + " \\x1b[2J"
SGR = re.compile(r"\x1b\[[0-9;]*m")  # colours rara's own output may carry on a terminal


def _rara(database_url: str, *args: str) -> str:
    env = {**os.environ, "DATABASE_URL": database_url, "FORCE_COLOR": "1", "COLUMNS": "250"}
    env.pop("NO_COLOR", None)
    done = subprocess.run(
        [str(Path(sys.executable).parent / "rara"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr
    assert "\x1b]8;" not in done.stdout, done.stdout  # no terminal hyperlink
    assert "\x1b[2J" not in done.stdout, done.stdout  # no escape sequence of the worker's
    return SGR.sub("", done.stdout)


def test_a_workers_error_and_result_print_literally(
    conn: psycopg.Connection[Any], thread_worker: Any, database_url: str
) -> None:
    thread_worker()
    define(
        conn,
        "hostile",
        [
            {"key": "said", "capability": "test.report@1", "input": {"report": {"note": EVIL}}},
            {
                "key": "failed",
                "capability": "test.fail@1",
                "dependsOn": ["said"],
                "input": {"message": EVIL},
                "retry": {"maxAttempts": 1},
            },
        ],
    )
    run_id = start(conn, "hostile")
    wait_run(conn, run_id, status="failed")
    shown = _rara(database_url, "runs", "show", str(run_id), "--attempts")
    assert SHOWN in shown, shown  # the attempt's error
    watched = _rara(database_url, "runs", "watch", str(run_id))
    assert f"note={SHOWN}" in watched, watched  # the result, in the summary
    # the failed step's message beside its bar (a terminal: the live view), then the summary
    assert re.search(r"failed +━+ failed +[0-9:]+ " + re.escape(SHOWN), watched), watched


def test_literal_shows_every_control_character_and_keeps_text_as_it_is() -> None:
    assert literal(MARKUP).plain == MARKUP
    assert literal(MARKUP).spans == []
    assert visible("a\tb\nc\rd\x07e\x9bf\u202eg") == "a\tb\nc\\x0dd\\x07e\\x9bf\\u202eg"
