"""Browser tests of the dashboard: a real `rara ui` process, a real PostgreSQL (the fresh
database of tests/conftest.py), real workers, and Debian's chromium driven by Playwright
(``executable_path``: Playwright never downloads a browser here)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.ui import CHROMIUM


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Per module, not per session: Playwright's sync API keeps an event loop running in this
    thread while it is open, and the async tests of later modules need the thread's loop."""
    if CHROMIUM is None:
        pytest.skip(
            "no chromium: install Debian's package (apt-get install chromium; "
            ".ci/install-system-deps.sh does) or set RARA_TEST_CHROMIUM"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1360, "height": 900}, accept_downloads=True)
    opened = context.new_page()
    opened.set_default_timeout(30_000)
    dialogs: list[str] = []
    opened.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    opened.dialogs = dialogs
    yield opened
    context.close()
