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
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "rara.ui" in config["packages"]
    globs = config["package-data"]["rara.ui"]
    for path in [*(UI / "templates").rglob("*"), *(UI / "static").rglob("*")]:
        if path.is_file():
            name = path.relative_to(UI).as_posix()
            assert any(fnmatch(name, g) and name.count("/") == g.count("/") for g in globs), name


def test_no_asset_from_elsewhere() -> None:
    for path in [*(UI / "templates").glob("*.html"), *(UI / "static").glob("*.js")]:
        text = path.read_text()
        assert not re.search(r"""(src|href)=["']?(https?:)?//""", text), path
        assert not re.search(r"https?://", text), path
