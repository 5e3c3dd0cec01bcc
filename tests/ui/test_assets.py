"""Every file of the dashboard ships: the package-data globs of pyproject.toml cover each
template and static asset (a new folder or suffix would otherwise be left out of the wheel),
and no page refers to anything outside the package (no CDN)."""

from __future__ import annotations

import re
import tomllib
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UI = ROOT / "rara" / "ui"


def test_package_data_covers_every_asset() -> None:
    """Each asset's folder is a listed (data) package whose globs match the file."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    for path in [*(UI / "templates").rglob("*"), *(UI / "static").rglob("*")]:
        if path.is_file():
            package = ".".join(("rara", *path.parent.relative_to(ROOT / "rara").parts))
            assert package in config["packages"], f"{package} (for {path.name}) is not listed"
            globs = config["package-data"].get(package, [])
            assert any(fnmatch(path.name, g) for g in globs), f"{path.name} not in {package}"


def test_no_asset_from_elsewhere() -> None:
    for path in [*(UI / "templates").glob("*.html"), *(UI / "static").glob("*.js")]:
        text = path.read_text()
        assert not re.search(r"""(src|href)=["']?(https?:)?//""", text), path
        assert not re.search(r"https?://", text), path
