"""The peer comparison's bookkeeping: a peer that cannot be had here is skipped with its reason
(never a number), and the rara/peer ratios are taken against the right rara figure.

bench's own tests: tests/bench/ is the one folder of tests that imports bench (pyproject.toml's
import contracts)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from bench.peers import harness, river_peer, temporal_build
from bench.run import vs_peers


def test_river_without_go_is_unavailable_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A PATH with what build.sh needs before it looks for go, and no go.
    for tool in ("bash", "dirname"):
        found = shutil.which(tool)
        assert found is not None
        (tmp_path / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(harness.PeerUnavailable, match="go is not installed"):
        river_peer.build()


def test_temporal_without_go_is_unavailable_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # No build cached (an empty cache folder) and no go on PATH: skipped with why, nothing run.
    (tmp_path / "bin").mkdir()
    bash = shutil.which("bash")
    assert bash is not None
    (tmp_path / "bin" / "bash").symlink_to(bash)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(harness.PeerUnavailable, match="go is not installed"):
        temporal_build.build()


def test_an_unavailable_peer_is_a_skipped_row(monkeypatch: pytest.MonkeyPatch) -> None:
    def unavailable(peer: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        raise harness.PeerUnavailable(f"{peer}: go is not installed")

    monkeypatch.setattr(harness, "run_peer", unavailable)
    rows = harness.run_all("postgresql://unused/x", ("river",))
    assert rows == [{"peer": "river", "skipped": "river: go is not installed"}]


def test_ratios_per_peer() -> None:
    results: dict[str, Any] = {
        "throughput": {
            "single": [{"steps_per_s": 4000.0}, {"steps_per_s": 6000.0}],
            "chain3": [{"steps_per_s": 4500.0}],
        },
        "latency": {"p50": 4.0, "p99": 10.0},
    }
    peers = {
        "river": {"jobs_per_s": 24000.0, "p50_ms": 2.0, "p99_ms": 5.0},
        "dbos-3step": {"jobs_per_s": 100.0, "p50_ms": 40.0, "p99_ms": 50.0},
        "temporal-3step": {"jobs_per_s": 50.0, "p50_ms": 80.0, "p99_ms": 100.0},
        "procrastinate": {"error": "failed"},
    }
    out = vs_peers(results, peers)
    assert out["river"] == {"drain": 0.25, "start_p50": 2.0, "start_p99": 2.0}
    # A 3-step workflow against a 3-step run: 4,500 steps/s are 1,500 runs/s.
    assert out["dbos-3step"] == {"drain": 15.0, "start_p50": 0.1, "start_p99": 0.2}
    assert out["temporal-3step"] == {"drain": 30.0, "start_p50": 0.05, "start_p99": 0.1}
    assert "procrastinate" not in out
