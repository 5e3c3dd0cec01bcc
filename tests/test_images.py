"""charts/rara/images/third_party.py: what goes into the images' dependency layer."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "charts" / "rara" / "images" / "third_party.py"


def third_party(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *arguments],
        cwd=REPO, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip


def test_the_dependency_layer_holds_every_third_party_pin_and_no_first_party_one() -> None:
    out = third_party("pyproject.toml[s3]", "examples/rag/pyproject.toml")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    rara = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    rag = tomllib.loads((REPO / "examples/rag/pyproject.toml").read_text())["project"]
    expected = [
        *rara["dependencies"],
        *rara["optional-dependencies"]["s3"],
        *(r for r in rag["dependencies"] if not r.startswith("rara==")),
    ]
    assert lines == expected
    assert not any(line.split("==")[0] in {"rara", "rara-rag"} for line in lines)


def test_an_unknown_extra_is_named() -> None:
    out = third_party("pyproject.toml[nope]")
    assert out.returncode != 0
    assert "rara has no extra named 'nope'" in out.stderr
