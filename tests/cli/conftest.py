"""Fixtures of the CLI's tests."""

from __future__ import annotations

import pytest

from rara.cli import common


@pytest.fixture
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables 200 columns wide. The CLI's console reads COLUMNS once, when rara.cli is first
    imported (a real command is a fresh process); tests invoke it in one process, where that
    was whatever the first import saw (80 without a terminal, as under pytest-xdist)."""
    monkeypatch.setattr(common.console, "width", 200)
