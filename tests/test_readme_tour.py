"""The README's CLI tour, run as written: the first ```bash block under "A five-minute tour",
in a fresh folder (its own embedded PostgreSQL and artifacts) with the repository's virtual
environment and examples, so the documentation cannot drift from what the commands do; then,
as the README says, its Python example with the tour's worker and executor started again."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from rara.pg.embedded import EmbeddedPostgres

ROOT = Path(__file__).resolve().parents[1]
TOUR_HEADING = "## A five-minute tour of the CLI"
PYTHON_HEADING = "Applications use the typed client"
EXECUTOR_PORT = 50051  # the address the tour gives the executor and the worker


def tour_script() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index(TOUR_HEADING) :]
    match = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert match, "the tour's ```bash block is missing"
    return match.group(1)


def python_example() -> str:
    """The README's ```python block after the tour, and the tour's two `&` lines that start
    the worker and the executor it needs (the tour's last line stopped them)."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index(PYTHON_HEADING) :]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, "the Python example's ```python block is missing"
    processes = [line for line in tour_script().splitlines() if line.rstrip().endswith("&")]
    assert len(processes) == 2, processes
    example = f"python - <<'PY'\n{match.group(1)}PY"
    return "\n".join([*processes, READY, example, "kill $(jobs -p) && wait\n"])


# The test's own line between the two: what the README's reader does by starting Python a while
# after the processes, since a start is refused until they serve every capability.
READY = """python - <<'PY'
import time, psycopg
from rara.definitions.parse import load_definition
from rara.pg import workers
from rara.pg.connect import database_url
spec = load_definition(open("examples/rag-refresh.yaml").read()).spec
need = {s.capability for s in spec.steps if not s.capability.startswith("rara.")}
with psycopg.connect(database_url(), autocommit=True) as conn:
    for _ in range(120):
        if need <= workers.capabilities(conn, 30):
            break
        time.sleep(0.5)
PY"""


def test_the_tour_block_is_found_and_uses_no_guessed_ids() -> None:
    script = tour_script()
    assert "rara runs start" in script
    assert not re.search(r"rara runs \w+ \d+", script), "run ids come from `runs start -q`"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_readme_tour_runs_as_written(tmp_path: Path) -> None:
    if not (ROOT / ".venv" / "bin" / "activate").exists():
        pytest.skip("no .venv: the tour starts with `source .venv/bin/activate` (make setup)")
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", EXECUTOR_PORT))
        except OSError:
            pytest.fail(f"127.0.0.1:{EXECUTOR_PORT}, the tour's executor address, is in use")
    work = tmp_path / "tour"
    (work / "examples").mkdir(parents=True)
    shutil.copy(ROOT / "examples" / "rag-refresh.yaml", work / "examples")
    (work / ".venv").symlink_to(ROOT / ".venv")
    script = work / "tour.sh"
    script.write_text("set -euo pipefail\n" + tour_script() + python_example())
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "DATABASE_URL" and not k.startswith(("RARA_", "PYTHON", "VIRTUAL_ENV"))
    }
    log = tmp_path / "tour.log"
    # Output to a file, and the wait on bash itself: a step that fails leaves the tour's
    # background worker and executor holding any pipe open; its session is killed after.
    with open(log, "w") as out:
        proc = subprocess.Popen(
            ["bash", str(script)],
            cwd=work,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=840)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            # The tour's own server (`rara db up` in work/): stopped, and its data removed.
            EmbeddedPostgres(work / ".rara" / "pg").destroy()
    output = log.read_text()
    print(output)  # kept in the test's output: what a person sees, in a pipe
    assert proc.returncode == 0, output
    assert "rag-refresh version 1 sha256:" in output
    assert "(created)" in output
    assert "(unchanged)" in output
    for step in ("collect", "clean", "index", "evaluate", "adapt"):
        assert re.search(rf"^{step} succeeded", output, re.MULTILINE), f"{step}:\n{output}"
    # `runs watch` stopped at the gate (exit 3), saying what moves it on; the gate showed the
    # quality table; the approval let the run succeed.
    assert re.search(r"^release waiting$", output, re.MULTILINE), output
    assert re.search(
        r"release waits for an approval \(deadline [^)]+\): rara approvals show \d+ release", output
    ), output
    assert "adapt.result.quality" in output
    assert re.search(r"│ diff\s+│ [+-]0\.\d{3} \[", output), output
    assert re.search(r"^run \d+: release approved by ", output, re.MULTILINE), output
    # The release: promoted, read back by name, fetched and verified file by file.
    assert re.search(r"rag-refresh@1\b", output), output
    assert re.search(r"^rag-refresh@1 \(current\): promoted by ", output, re.MULTILINE), output
    fetched = work / "served"
    assert sorted(str(p.relative_to(fetched)) for p in fetched.rglob("*") if p.is_file()) == [
        "adapt/adapter.tar.gz",
        "index/index.bm25",
    ]
    assert re.search(r"served/index/index\.bm25: sha256:[0-9a-f]{64} verified", output), output
    # `runs show --artifacts` in a pipe: one line per artifact, its digest whole.
    assert re.search(r"^adapt/\S+ sha256:[0-9a-f]{64} \d+B ", output, re.MULTILINE), output
    assert "(existing run for this key)" in output
    assert "had already ended" in output
    # The Python example: to the gate (until_person), approved, succeeded.
    assert "[PersonWait(step_key='release', kind='approval'" in output, output
    assert re.search(r"^succeeded$", output, re.MULTILINE), output
