"""Settings sources and the handler registry."""

from __future__ import annotations

from pathlib import Path

import pytest

from rara.worker.registry import Registry, RegistryError, load_registry
from rara.worker.settings import WorkerSettings


def test_settings_defaults_env_file_and_flags(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    a, b = WorkerSettings(), WorkerSettings()
    assert a.id != b.id  # host:pid:random, unique per instance
    assert a.id.count(":") == 2
    assert (a.lease_seconds, a.heartbeat_interval, a.jitter) == (30.0, 10.0, 0.2)
    monkeypatch.setenv("RARA_WORKER_HANDLERS", "one.handlers, two.handlers")
    monkeypatch.setenv("RARA_WORKER_LEASE_SECONDS", "12")
    file = tmp_path / "worker.yaml"
    file.write_text("lease_seconds: 99\nconcurrency: 3\njitter: 0.5\n")
    s = WorkerSettings.load(file, jitter=0.1, concurrency=None)
    assert s.handlers == ["one.handlers", "two.handlers"]
    assert s.lease_seconds == 12  # env beats the file
    assert s.concurrency == 3  # file beats the default; None flags are "not given"
    assert s.jitter == 0.1  # flags beat everything
    with pytest.raises(ValueError, match="heartbeat_seconds"):
        WorkerSettings(lease_seconds=1, heartbeat_seconds=2)
    # a GPU executor's one slot cannot be held back from every namespace
    with pytest.raises(ValueError, match=r"held_back_slots \(1\) must be fewer than concurrency"):
        WorkerSettings(concurrency=1, held_back_slots=1)


def test_registry_rules() -> None:
    registry = Registry()

    @registry.handler("corpus.collect@1")
    async def collect(ctx: object) -> None: ...

    def clean(ctx: object) -> None: ...

    registry.register("corpus.clean@2", clean)
    assert registry.capabilities() == {"corpus.collect@1", "corpus.clean@2"}
    assert registry.is_async("corpus.collect@1")
    assert not registry.is_async("corpus.clean@2")
    with pytest.raises(RegistryError, match="twice"):
        registry.register("corpus.clean@2", collect)
    with pytest.raises(RegistryError, match="name@major"):
        registry.register("NoVersion", clean)
    merged = load_registry(["tests.worker.handlers", "tests.support.bench_handlers"])
    assert "test.noop@1" in merged
    assert "bench.noop@1" in merged
    with pytest.raises(RegistryError, match="must define"):
        load_registry(["rara.worker.settings"])
