"""Screens as a person sees them: `rara runs watch` and `rara runs show` in a real terminal
(tmux) at 80 and 160 columns. The captured panes are printed (kept in the test's output) and
checked for what made them unreadable before: a title glued to the last progress line, a
digest cut short, text cut mid-word without an ellipsis."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.runs import define, start, wait_run

RARA = str(Path(sys.executable).with_name("rara"))
pytestmark = pytest.mark.skipif(
    shutil.which("tmux") is None, reason="tmux is not installed (.ci/install-system-deps.sh)"
)


def tmux_screen(socket: str, width: int, command: str, env: dict[str, str]) -> str:
    """Run ``command`` in a fresh tmux pane ``width`` columns wide; its screen (scrollback
    included, wrapped lines kept as the terminal shows them) once the command has ended."""
    session = f"w{width}"
    tmux = ["tmux", "-u", "-L", socket]  # -u: UTF-8, as a person's terminal is
    subprocess.run(
        [
            *tmux,
            "new-session",
            "-d",
            "-s",
            session,
            "-x",
            str(width),
            "-y",
            "50",
            *[f"-e{k}={v}" for k, v in env.items()],
        ],
        check=True,
        timeout=30,
    )
    subprocess.run(
        [*tmux, "set-option", "-t", session, "history-limit", "5000"], check=True, timeout=30
    )
    done = f"done-{session}"
    subprocess.run(
        [
            *tmux,
            "send-keys",
            "-t",
            session,
            f"clear; {command}; tmux -L {socket} wait-for -S {done}",
            "Enter",
        ],
        check=True,
        timeout=30,
    )
    subprocess.run([*tmux, "wait-for", done], check=True, timeout=120)  # the command's end
    return subprocess.run(
        [*tmux, "capture-pane", "-p", "-t", session, "-S", "-5000"],
        check=True,
        timeout=30,
        capture_output=True,
        text=True,
    ).stdout


@pytest.mark.parametrize("width", [80, 160])
def test_watch_and_show_read_well_in_a_terminal(
    conn: psycopg.Connection[Any], thread_worker: Any, database_url: str, width: int
) -> None:
    thread_worker()
    define(
        conn,
        "screens",
        [
            {
                "key": "produce",
                "capability": "test.produce@1",
                "input": {"text": "a corpus of a few words"},
            },
            {
                "key": "chatter",
                "capability": "test.chatty@1",
                "dependsOn": ["produce"],
                "input": {"calls": 5, "seconds": 0.05},
            },
        ],
    )
    run_id = start(conn, "screens")
    wait_run(conn, run_id)
    socket = f"rara-test-{os.getpid()}"
    env = {"DATABASE_URL": database_url, "TERM": "xterm-256color", "LANG": "C.UTF-8"}
    try:
        screen = tmux_screen(
            socket,
            width,
            f"{RARA} runs watch {run_id} && {RARA} runs show {run_id} --events --artifacts",
            env,
        )
    finally:
        subprocess.run(["tmux", "-u", "-L", socket, "kill-server"], timeout=30, check=False)
    print(f"--- {width} columns ---\n{screen}")
    lines = screen.splitlines()
    assert all(len(line) <= width for line in lines)
    assert any(line.strip() == f"run {run_id}" for line in lines), (
        "the summary's title starts a line of its own"
    )
    digest = conn.execute("SELECT digest FROM rara_step_artifacts LIMIT 1").fetchone()
    assert digest is not None
    # The digest is printed whole on one line (a table at 160 columns, a line at 80).
    assert any(digest[0] in line for line in lines), screen
    assert not re.search(r"\w_\s*│", screen), "no cell cut mid-word without an ellipsis"
