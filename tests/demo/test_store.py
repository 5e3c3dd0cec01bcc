"""Where the demo keeps its artifacts: RARA_ARTIFACTS, else .rara/artifacts (made absolute)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rara_rag.demo.store import describe, location


def test_location_defaults_to_the_local_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RARA_ARTIFACTS", raising=False)
    assert location() == str(tmp_path / ".rara/artifacts")
    monkeypatch.setenv("RARA_ARTIFACTS", "shared/arts")
    assert location() == str(tmp_path / "shared/arts")  # the same for children started elsewhere
    assert describe(location()) == str(tmp_path / "shared/arts")


def test_an_s3_location_is_described_without_its_parameters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = "s3://bucket/demo?endpoint=http://127.0.0.1:9000&region=us-east-1&attempts=3"
    monkeypatch.setenv("RARA_ARTIFACTS", url)
    assert location() == url
    assert describe(url) == "s3://bucket/demo/ at http://127.0.0.1:9000"
    assert describe("s3://bucket") == "s3://bucket/"
