"""`.ci/check-links.py` (run by `make lint`): the repository stands alone.

Each case is a small git work tree of its own, checked by the real script in a real process
(``tests.support.ci_checks``): a bad one must fail naming the file and line, a good one
must pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.ci_checks import check_tree

SCRIPT = "check-links.py"
# Built, not written out, so that this file does not trip the check it tests.
OUTSIDE = ".." + "/shared"

GOOD = {
    "README.md": "See [the design](docs/design.md), [docs](docs/) and [a section](#set-up).\n",
    "docs/design.md": "Back to [the README](../README.md); [a site](https://example.org/x.md).\n"
    "```\n[not a link](../../../etc/passwd)\n```\n"
    "`[not a link either](nowhere.md)`\n",
    "tests/test_x.py": 'assert ids == ["b/two.md"]  # a file a test makes, quoted\n',
}


def test_a_tree_that_stands_alone_passes(tmp_path: Path) -> None:
    done = check_tree(SCRIPT, tmp_path, GOOD)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("name", "text", "finding"),
    [
        (
            "README.md",
            f"Design: [design]({OUTSIDE}/DESIGN.md)\n",
            "README.md:1: names a folder outside the repository",
        ),
        (
            "Makefile",
            f"# the notes in {OUTSIDE}/notes say why\n",
            "Makefile:1: names a folder outside the repository",
        ),
        (
            "docs/a.md",
            "[up and out](../../elsewhere/README.md)\n",
            "docs/a.md:1: link ../../elsewhere/README.md points above the repository's root",
        ),
        (
            "docs/a.md",
            "read `../../notes/x.txt`\n",
            "docs/a.md:1: `../../notes/x.txt` is a path above the repository's root",
        ),
        (
            "docs/a.md",
            "[gone](missing.md) and ![picture](img/none.png)\n",
            "docs/a.md:1: link missing.md: no file or folder docs/missing.md in the repository",
        ),
        (
            "docs/a.md",
            "[ref]: ../nowhere/\n",
            "docs/a.md:1: link ../nowhere/: no file or folder nowhere in the repository",
        ),
        (
            ".ci/x.sh",
            "# why: notes/real-cluster.md, obstacle 1\n",
            ".ci/x.sh:1: names notes/real-cluster.md, which is no file of the repository",
        ),
    ],
)
def test_a_path_outside_or_a_broken_link_fails(
    tmp_path: Path, name: str, text: str, finding: str
) -> None:
    done = check_tree(SCRIPT, tmp_path, {**GOOD, name: text})
    assert done.returncode == 1
    assert finding in done.stdout, done.stdout


def test_an_ignored_file_does_not_make_a_link_good(tmp_path: Path) -> None:
    """A clone has no ignored files: a link to one is broken for every reader but this one."""
    done = check_tree(
        SCRIPT,
        tmp_path,
        {
            **GOOD,
            ".gitignore": "local/\n",
            "local/notes.md": "mine\n",
            "docs/a.md": "[notes](../local/notes.md)\n",
        },
    )
    assert done.returncode == 1
    assert "link ../local/notes.md: no file or folder local/notes.md" in done.stdout
