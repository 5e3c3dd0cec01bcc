"""The one way a test waits for state in another process or the database: poll against a
deadline, never a fixed sleep, and fail with what was awaited."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")


def wait_until(
    probe: Callable[[], T],
    timeout: float = 30.0,
    message: str = "condition",
    *,
    interval: float = 0.02,
) -> T:
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


# ASYNC109: the same signature as wait_until on purpose (one contract for both).
@overload
async def wait_until_async(
    probe: Callable[[], Awaitable[T]],
    timeout: float = ...,  # noqa: ASYNC109
    message: str = ...,
    *,
    interval: float = ...,
) -> T: ...
@overload
async def wait_until_async(
    probe: Callable[[], T],
    timeout: float = ...,  # noqa: ASYNC109
    message: str = ...,
    *,
    interval: float = ...,
) -> T: ...
async def wait_until_async(
    probe: Callable[[], Any],
    timeout: float = 30.0,  # noqa: ASYNC109
    message: str = "condition",
    *,
    interval: float = 0.02,
) -> Any:
    """``wait_until`` for a test on the event loop: ``probe`` may be a coroutine function or a
    plain one, and the loop keeps running (the awaited work is on it) between tries."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {message}")
        await asyncio.sleep(interval)
