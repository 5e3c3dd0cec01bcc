"""The fleet bench (bench.fleet) run for real at a tiny size, on its own embedded PostgreSQL
with real workers in a host process: every figure is measured, and the capacity and its
projection follow from the rows as docs/performance.md says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.fleet import _capacity, measure, rows, summary


@pytest.mark.timeout(300)
def test_a_tiny_fleet_is_measured(tmp_path: Path) -> None:
    said: list[str] = []
    r = measure(
        [0, 3], per_host=3, held=1, window=2.0, probe_hz=20, settle=1.0, logs=tmp_path,
        say=said.append,
    )  # fmt: skip
    empty, fleet = r["rows"]
    assert (empty["workers"], fleet["workers"]) == (0, 3)
    for row in (empty, fleet):
        assert 0 < row["lease_ms"]["p50"] <= row["lease_ms"]["p99"]
        assert row["server_ms_per_s"] > 0
    assert empty["hosts_ms_per_s"] == 0  # no host yet
    assert fleet["hosts_ms_per_s"] > 0
    # Each worker holds connections of its own: the lease loop's, the ending's, the
    # heartbeat's, the listener's, its pool's.
    assert fleet["connections"] - empty["connections"] >= 3 * 4
    assert len(said) == 2
    report = dict(rows(r))
    assert "fleet of 3 workers" in report
    assert set(summary(r)) >= {"fleet_capacity_workers"}


def _row(workers: int, p99: float, server: float, connections: int) -> dict[str, Any]:
    return {
        "workers": workers,
        "lease_ms": {"p50": 1.0, "p99": p99, "mean": 1.0},
        "server_ms_per_s": server,
        "hosts_ms_per_s": 0.0,
        "connections": connections,
    }


def test_the_capacity_is_the_largest_fleet_under_twice_the_empty_p99() -> None:
    r = _capacity(
        [
            _row(0, 2.0, 100.0, 4),
            _row(50, 3.9, 200.0, 254),
            _row(100, 4.1, 300.0, 504),
            _row(200, 3.0, 500.0, 1004),  # below again: noise, not capacity
        ],
        project_cores=16,
        cores_here=2,
    )
    assert r["capacity_workers"] == 50
    assert r["capacity_reached"]
    assert r["server_ms_per_s_per_worker"] == 2.0  # (500 - 100) / 200
    assert r["connections_per_worker"] == 5.0
    # The server used 200 ms/s at the capacity: 10% of 2 cores here; 10% of 16 cores is
    # 1,600 ms/s, at 2 ms/s a worker.
    assert r["projected_workers"] == 800
