"""The package list in pyproject.toml is the map of the code: every folder of Python files in
the `rara` namespace is a listed package at the path its import name says, and nothing in the
repository is a symlink (a module has exactly one path)."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def package_dir(name: str) -> Path:
    """The folder setuptools takes `name` from: its nearest mapped ancestor, then the rest."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        mapped = CONFIG["package-dir"].get(".".join(parts[:cut]))
        if mapped:
            return ROOT.joinpath(mapped, *parts[cut:])
    return ROOT.joinpath(*parts)


def test_every_python_folder_is_a_listed_package() -> None:
    listed = set(CONFIG["packages"])
    found: set[str] = set()
    for base in (ROOT, ROOT / "worker", ROOT / "executor", ROOT / "operator"):
        for module in (base / "rara").rglob("*.py"):
            found.add(".".join(module.parent.relative_to(base).parts))
    assert found - listed == set(), "folders of Python files missing from pyproject's packages"


def test_listed_packages_live_where_their_names_say() -> None:
    for name in CONFIG["packages"]:
        folder = package_dir(name)
        assert folder.is_dir(), f"{name}: {folder} is not a folder"
        if name.startswith("rara.") and name.count(".") == 1 and name != "rara.sql":
            assert folder.relative_to(ROOT).parts[-2:] == tuple(name.split(".")), name


def test_no_symlinks_in_the_repository() -> None:
    files = subprocess.run(
        ["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    links = [line.split("\t", 1)[1] for line in files if line.startswith("120000")]
    assert links == []


def test_operator_folder_is_no_package() -> None:
    # `operator` is a standard-library module: the folder must stay a namespace root.
    assert not (ROOT / "operator" / "__init__.py").exists()
    assert not (ROOT / "operator" / "rara" / "__init__.py").exists()
