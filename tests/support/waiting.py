"""The one way a test waits for state in another process or the database: poll against a
deadline, never a fixed sleep, and fail with what was awaited."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(probe: Callable[[], T], timeout: float = 30.0, message: str = "condition", *,
               interval: float = 0.02) -> T:
    """Call ``probe`` until it returns a truthy value, and return that value; after ``timeout``
    seconds raise TimeoutError naming ``message`` (what the test waited for)."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)
