"""The repository as the `.ci/check-*.py` scripts read it: its files, and Markdown's fences.

"The repository" is what git knows: tracked files plus new ones it does not ignore, so an
ignored file on this machine (`.rara/`, `.venv/`) counts for nobody. A line inside a fenced
code block of Markdown is an example, not prose; each check decides what an example means
to it (check-links skips it, check-query-names reads it as code).

Imported by the scripts beside it (a script's folder is first on its import path).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")


def root_of(argv: list[str]) -> Path:
    """The work tree to check: ROOT when given (the tests' own trees), else this repository."""
    return Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[1]


def repository_files(root: Path) -> list[str]:
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # A file deleted from the work tree but still in the index is gone for a reader.
    return sorted(name for name in set(listed.split("\0")) if name and (root / name).is_file())


def text_files(root: Path, files: list[str]) -> Iterator[tuple[str, str]]:
    """(name, text) of each of ``files`` that is UTF-8 text; a picture has nothing to read."""
    for name in files:
        try:
            yield name, (root / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue


def markdown_lines(text: str) -> Iterator[tuple[int, str, bool]]:
    """(line number, line, inside a fenced block) of each line but the fences' own."""
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        opened = FENCE.match(line)
        if fence is not None:
            # A fence closes with a run of its own character at least as long as its opening.
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
            else:
                yield number, line, True
            continue
        if opened:
            fence = opened.group(1)
            continue
        yield number, line, False
