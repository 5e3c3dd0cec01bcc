"""S3 fixtures: a real S3 server (versitygw) on 127.0.0.1, a fresh bucket per test."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.artifacts.s3_server import S3Server, server_binary


@pytest.fixture(scope="session")
def s3_binary() -> Path:
    """The server binary, built once (cached by version); the tests skip, saying why, only
    when it cannot be built here."""
    pytest.importorskip("minio", reason="the s3 extra is not installed (pip install '.[s3]')")
    binary, why = server_binary()
    if binary is None:
        pytest.skip(why)
    return binary


@pytest.fixture(scope="module")
def s3_server(s3_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One server per module; tests that kill it use :func:`own_s3_server`."""
    server = S3Server(s3_binary, tmp_path_factory.mktemp("s3") / "data")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def own_s3_server(s3_binary: Path, tmp_path: Path) -> Iterator[S3Server]:
    server = S3Server(s3_binary, tmp_path / "s3-data")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """The server, with its credentials in the environment (by reference, as in a pod)."""
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    return s3_server


@pytest.fixture
def bucket(s3_env: S3Server) -> str:
    name = f"t-{uuid.uuid4().hex[:12]}"
    s3_env.make_bucket(name)
    return name


@pytest.fixture
def s3_url(s3_env: S3Server, bucket: str) -> Callable[..., str]:
    """``s3_url(**query)``: the URL of this test's bucket (prefix ``arts``), 5 MiB parts."""

    def make(**query: str) -> str:
        return s3_env.url(bucket, "arts", **{"part_size": "5", **query})

    return make
