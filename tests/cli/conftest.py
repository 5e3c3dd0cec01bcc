"""Fixtures of the CLI's tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables 200 columns wide: COLUMNS, which the CLI's consoles read at each use
    (rara.cli.common.WideWhenPiped). Not by setting a console's width: the monkeypatch's undo
    would set it back to the width it read then, fixed for every later test of the process."""
    monkeypatch.setenv("COLUMNS", "200")
