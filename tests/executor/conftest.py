"""A real executor on loopback (port 0) per test, with the test plugins and a few more."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from rara.artifacts.store import LocalArtifactStore
from rara.executor.auth import AuthConfig
from rara.executor.client import ExecutorClient
from rara.executor.plugins import PluginRegistry
from rara.executor.server import create_server
from tests.executor import plugins as test_plugins
from tests.executor.support import TOKEN, Executor, StartExecutor, extra_plugins


@pytest.fixture
async def start_executor(tmp_path: Path) -> AsyncIterator[StartExecutor]:
    """Factory: start an executor with overrides; everything started is stopped after."""
    started: list[Executor] = []

    async def start(
        *, auth_config: AuthConfig | None = None, token: str | None = TOKEN, **kwargs: Any
    ) -> Executor:
        registry = PluginRegistry()
        test_plugins.register(registry)
        extra_plugins(registry)
        store = LocalArtifactStore(tmp_path / "artifacts", durable=False)
        kwargs.setdefault("max_concurrency", 4)
        kwargs.setdefault("cancel_grace", 0.5)
        server, port = create_server(
            registry, store, auth_config=auth_config or AuthConfig(token=token), **kwargs
        )
        await server.start()
        address = f"127.0.0.1:{port}"
        ex = Executor(server, address, ExecutorClient(address, token=token), store)
        started.append(ex)
        return ex

    yield start
    for ex in started:
        await ex.client.close()
        await ex.server.stop(1.0)


@pytest.fixture
async def executor(start_executor: StartExecutor) -> Executor:
    return await start_executor()
