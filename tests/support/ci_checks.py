"""The `.ci/check-*.py` scripts run as `make lint` runs them, on a small git work tree of a
test's own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CI = Path(__file__).resolve().parents[2] / ".ci"


def check_tree(script: str, tree: Path, files: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Write ``files`` (name: text) into ``tree``, make it a git work tree (untracked files are
    the repository's too) and run ``.ci/<script>`` on it in a real process."""
    for name, text in files.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    return subprocess.run(
        [sys.executable, str(CI / script), str(tree)], capture_output=True, text=True, check=False
    )
