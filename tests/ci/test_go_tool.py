"""`.ci/go-tool.sh`: the one place that builds and caches the pinned Go tools.

Each case runs the real script with a tools folder of its own (``RARA_TOOLS_DIR``) and, where
it must not build, a PATH without go: a cached binary is handed back as it is, a missing one
is built only where go is, and a wrong request names what is allowed.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / ".ci" / "go-tool.sh"
BASH = shutil.which("bash") or "/bin/bash"


def go_tool(tools: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    # No go on this PATH (an empty folder): whatever passes here was not built.
    path = tools / "no-go"
    path.mkdir(exist_ok=True)
    return subprocess.run(
        [BASH, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": str(path), "HOME": str(tools), "RARA_TOOLS_DIR": str(tools), **env},
    )


def test_an_unknown_tool_or_mode_is_refused_with_the_names_allowed(tmp_path: Path) -> None:
    for args in (["kubectl"], [], ["helm", "install"]):
        done = go_tool(tmp_path, *args)
        assert done.returncode == 2, args
        assert "helm|versitygw|buf|protoc-gen-go|protoc-gen-go-grpc [build|check]" in done.stderr


def test_a_cached_tool_is_handed_back_without_go(tmp_path: Path) -> None:
    cached = tmp_path / "helm-v3.22.0"
    cached.write_text("#!/bin/sh\n")
    cached.chmod(0o755)
    assert go_tool(tmp_path, "helm", "check").returncode == 0
    done = go_tool(tmp_path, "helm")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(cached)


def test_a_bumped_pin_is_missing_until_built_and_needs_go(tmp_path: Path) -> None:
    cached = tmp_path / "helm-v3.22.0"
    cached.write_text("#!/bin/sh\n")
    cached.chmod(0o755)
    bumped = {"RARA_HELM_VERSION": "v3.99.0"}
    assert go_tool(tmp_path, "helm", "check", **bumped).returncode == 1
    done = go_tool(tmp_path, "helm", **bumped)
    assert done.returncode == 1
    assert "go is not on PATH (needed for helm)" in done.stderr
    assert not (tmp_path / "helm-v3.99.0").exists()
