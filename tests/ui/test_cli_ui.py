"""`rara ui` refuses, before serving anything, a configuration that would let anyone act."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.ui import RARA


def _ui(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RARA, "ui", "--database-url", "postgresql://nobody@127.0.0.1:1/x", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_actions_need_an_identity() -> None:
    done = _ui("--no-read-only")
    assert done.returncode == 2
    assert "--no-read-only needs an identity" in done.stderr


def test_a_short_or_missing_token_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "short").write_text("abc\n")
    done = _ui("--no-read-only", "--token-file", str(tmp_path / "short"))
    assert done.returncode == 2
    assert "shorter than 16 characters" in done.stderr
    done = _ui("--token-file", str(tmp_path / "missing"))
    assert done.returncode == 2
    assert "cannot read" in done.stderr


def test_a_session_lifetime_under_a_second_is_refused() -> None:
    done = _ui("--no-read-only", "--session-seconds", "0")
    assert done.returncode == 2
    assert "--session-seconds" in done.stderr


def test_user_roles_need_the_header_that_names_the_user() -> None:
    done = _ui("--user-roles")
    assert done.returncode == 2
    assert "--user-roles needs --auth-header" in done.stderr


def test_a_token_file_of_people_names_each_line_it_refuses(tmp_path: Path) -> None:
    """A token file of ``NAME TOKEN`` lines: a line that is not one, a short token, a name or
    a token twice is refused at start, naming the file and the line."""
    cases = {
        "ana@example.com aaaaaaaaaaaaaaaa\nbo@example.com\n": "line 2: expected NAME TOKEN",
        "ana@example.com short\n": "line 1: ana@example.com's token is shorter than 16",
        "ana aaaaaaaaaaaaaaaa\nana bbbbbbbbbbbbbbbb\n": "line 2: ana has a token already",
        "ana aaaaaaaaaaaaaaaa\nbo aaaaaaaaaaaaaaaa\n": "line 2: bo's token is another person's",
        "# nobody\n\n": "no token in it",
    }
    for n, (text, said) in enumerate(cases.items()):
        (tmp_path / f"tokens{n}").write_text(text)
        done = _ui("--no-read-only", "--token-file", str(tmp_path / f"tokens{n}"))
        assert done.returncode == 2, text
        assert f"--token-file {tmp_path / f'tokens{n}'}" in done.stderr, done.stderr
        assert said in " ".join(done.stderr.split()), done.stderr
