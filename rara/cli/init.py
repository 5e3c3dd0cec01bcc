"""``rara init NAME``: a new folder holding the smallest workflow project — one handler, the
definition naming it, and a test that runs the handler as a worker would (rara.testing).
docs/guide.md walks through exactly these files."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

from rara.cli.common import console, reports_errors
from rara.errors import InputInvalid

# A definition name (rara.definitions.model.NAME_PATTERN) that is also, with - as _, a Python
# package name and the first part of a capability.
NAME = re.compile(r"^[a-z][a-z0-9-]{0,62}$")

HANDLERS = '''\
"""The handlers of the {name} workflow, served by `rara worker --handlers {package}.handlers`."""

from rara.context import OutputArtifact, StepContext, StepOutcome
from rara.worker.registry import Registry

registry = Registry()


@registry.handler("{name}.greet@1")
def greet(ctx: StepContext) -> StepOutcome:
    """Greets the run input's `name`; the greeting is also stored as an artifact."""
    greeting = f"Hello, {{ctx.input.get('name', 'world')}}!"
    ctx.progress(1.0, "greeted")
    ref = ctx.artifacts.put_bytes(greeting.encode(), "text/plain")
    return StepOutcome(
        result={{"greeting": greeting}},
        artifacts=[OutputArtifact("greeting.txt", ref, "text/plain")],
    )
'''

WORKFLOW = """\
apiVersion: rara.dev/v1alpha1
kind: WorkflowDefinition
metadata:
  name: {name}
spec:
  steps:
    - key: greet
      capability: {name}.greet@1
      timeout: 1m
      retry: {{maxAttempts: 3, initialDelay: 1s}}
      inputSchema:
        type: object
        properties:
          name: {{type: string, minLength: 1}}
"""

TEST = """\
from pathlib import Path

from rara.testing import run_step, temporary_database

from {package}.handlers import registry


def test_greet(tmp_path: Path) -> None:
    with temporary_database() as url:
        step = run_step(
            registry,
            "{name}.greet@1",
            {{"name": "Ada"}},
            database_url=url,
            artifacts=tmp_path / "artifacts",
        )
    assert step.status == "succeeded", step.error
    assert step.result == {{"greeting": "Hello, Ada!"}}
    assert step.read_artifact("greeting.txt") == b"Hello, Ada!"
"""

# At the project's root: pytest puts this folder on sys.path, so the tests import the package.
CONFTEST = '''\
"""Makes this folder importable in the tests (pytest's rootdir conftest)."""
'''


def project_files(name: str) -> dict[str, str]:
    """The files of a new project ``name``, by path relative to its folder."""
    if not NAME.match(name):
        raise InputInvalid(
            f"project name {name!r}: lowercase letters, digits and -, starting with a letter"
        )
    package = name.replace("-", "_")
    values = {"name": name, "package": package}
    return {
        f"{package}/__init__.py": "",
        f"{package}/handlers.py": HANDLERS.format(**values),
        "workflow.yaml": WORKFLOW.format(**values),
        "conftest.py": CONFTEST,
        "tests/test_handlers.py": TEST.format(**values),
    }


@reports_errors
def init(
    name: Annotated[str, typer.Argument(help="the project: its folder, definition and package")],
    directory: Annotated[
        Path | None, typer.Option("--dir", help="the folder to create (default: ./NAME)")
    ] = None,
) -> None:
    """Start a workflow project: a handler, its definition and a test (docs/guide.md)."""
    files = project_files(name)
    folder = directory or Path(name)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise InputInvalid(f"{folder} already exists and is not an empty folder")
    for path, text in files.items():
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    console.print(f"created {folder}/: " + ", ".join(files), highlight=False)
    console.print(
        f"next: cd {folder} && rara definitions apply -f workflow.yaml"
        " && python -m pytest -q   (docs/guide.md)",
        highlight=False,
    )
