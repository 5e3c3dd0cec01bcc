"""docs/guide.md, run as written: its ```bash blocks in order as one script (its ```python
blocks that are no file run in between, as `python -` would), in a fresh folder, against a
database of the test's own, with the repository's virtual environment first on PATH; each
block marked `<!-- file: PATH -->` must be the file `rara init` writes at PATH."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rara.cli.init import project_files

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guide.md"
BLOCK = re.compile(r"(?:<!-- file: (?P<file>\S+) -->\n)?```(?P<lang>\w+)\n(?P<body>.*?)```", re.S)


def blocks() -> list[tuple[str | None, str, str]]:
    return [(m["file"], m["lang"], m["body"]) for m in BLOCK.finditer(GUIDE.read_text())]


def guide_script() -> str:
    parts = ["set -euo pipefail"]
    for file, lang, body in blocks():
        if file is None and lang == "bash":
            parts.append(body)
        elif file is None and lang == "python":
            parts.append(f"python - <<'PY'\n{body}PY")
    return "\n".join(parts) + "\n"


def test_the_files_shown_are_the_files_rara_init_writes() -> None:
    shown = {file: body for file, _, body in blocks() if file}
    written = project_files("hello")
    assert set(shown) == {"hello/handlers.py", "workflow.yaml", "tests/test_handlers.py"}
    for path, body in shown.items():
        assert body == written[path], path


@pytest.mark.timeout(240)
def test_the_guide_runs_as_written(database_url: str, tmp_path: Path) -> None:
    script = tmp_path / "guide.sh"
    script.write_text(guide_script())
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RARA_", "PYTHON", "VIRTUAL_ENV", "PYTEST"))
    }
    # The virtual environment of this test (rara, python, pytest); the database of this test,
    # on whose server the scaffolded test makes and drops a database of its own.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["DATABASE_URL"] = database_url
    log = tmp_path / "guide.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            ["bash", str(script)], cwd=tmp_path, env=env, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            proc.wait(timeout=200)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # the background worker, if a line failed
            proc.wait()
    output = log.read_text()
    print(output)
    assert proc.returncode == 0, output
    assert "hello version 1 sha256:" in output, output
    assert "(created)" in output, output
    assert re.search(r"^greet succeeded", output, re.M), output
    assert re.search(r"greeting\.txt sha256:[0-9a-f]{64}", output), output
    assert "succeeded {'greeting': 'Hello, Grace!'}" in output, output
    assert re.search(r"^1 passed", output, re.M), output


def test_init_refuses_a_folder_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "hello").mkdir()
    (tmp_path / "hello" / "notes.txt").write_text("mine")
    rara = Path(sys.executable).parent / "rara"
    refused = subprocess.run(
        [str(rara), "init", "hello"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert refused.returncode == 2
    assert refused.stderr.strip() == "error: hello already exists and is not an empty folder"
    assert [p.name for p in (tmp_path / "hello").iterdir()] == ["notes.txt"]
    bad = subprocess.run(
        [str(rara), "init", "Hello_World"], cwd=tmp_path, capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    assert bad.returncode == 2
    assert "project name 'Hello_World'" in bad.stderr
    (tmp_path / "empty").mkdir()
    made = subprocess.run(
        [str(rara), "init", "hello-2", "--dir", "empty"], cwd=tmp_path, capture_output=True,
        text=True, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "empty" / "hello_2" / "handlers.py").is_file()
    assert "hello-2.greet@1" in (tmp_path / "empty" / "workflow.yaml").read_text()
