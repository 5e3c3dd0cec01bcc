"""A real executor on loopback (port 0) per test, with the test plugins and a few more."""

from __future__ import annotations

import pytest

from tests.executor.support import Executor, StartExecutor


@pytest.fixture
async def executor(start_executor: StartExecutor) -> Executor:
    return await start_executor()
