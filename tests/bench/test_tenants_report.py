"""The tenants bench's report (bench.tenants): its summary line and the goals' ratios that
``make bench`` takes from it, on a result of the shape ``measure`` returns (no database)."""

from __future__ import annotations

from typing import Any

from bench.common import percentiles
from bench.run import summary
from bench.tenants import WEIGHTS, A, B, _cost_ratios, _weight_error, line


def _cost(client: float, server: float) -> dict[str, Any]:
    return {
        size: {"client_us": {"p50": client}, "server_us": {"p50": server}} for size in ("10", "1")
    }


def _result() -> dict[str, Any]:
    one, spread = _cost(1000.0, 500.0), _cost(1100.0, 600.0)
    weighted = {A: 0.3, B: 0.7}
    return {
        "backlog": 100_000,
        "idle": {"p50": 2.0, "p99": 4.0},
        "behind_backlog": {"p50": 3.0, "p99": 6.0},
        "behind_vs_idle_p99": 1.5,
        "probe_ms": {"idle": {"p50": 0.1, "p99": 0.3}, "behind_backlog": {"p50": 0.5, "p99": 2.5}},
        "start_split_ms": {
            "idle": {"statement": {"p50": 0.9, "p99": 1.5}},
            "behind_backlog": {"statement": {"p50": 1.2, "p99": 4.2}},
        },
        "held_back": {
            "slots": 1,
            "behind_backlog": {"p50": 2.5, "p99": 5.0},
            "behind_vs_idle_p99": 1.25,
            "keyed_behind_vs_idle_p99": 1.5,
            "start_split_ms": {"statement": {"p50": 1.3, "p99": 3.8}},
        },
        "split_at_half": {A: 0.52, B: 0.48},
        "weights": WEIGHTS,
        "weighted_split_at_half": weighted,
        "weighted_error": _weight_error(weighted, WEIGHTS),
        "lease_cost": {"ready": 20_000, "namespaces": 100, "1": one, "100": spread},
        "lease_cost_ratio": _cost_ratios(one, spread),
        "lease_cost_wider_ratio": _cost_ratios(spread, _cost(1110.0, 610.0)),
        "lease_cost_beside_idle": _cost(1200.0, 700.0),
        "lease_cost_beside_idle_ratio": _cost_ratios(one, _cost(1200.0, 700.0)),
        "keys": {
            "keys": 10_000,
            "behind_backlog": {"p50": 3.0, "p99": 7.0},
            "behind_vs_idle_p99": 1.75,
            "split_at_half": {A: 0.5, B: 0.5},
            "lease_cost_ratio": _cost_ratios(one, _cost(1050.0, 550.0)),
        },
    }


def test_the_weighted_error_is_relative_to_b_s_fair_share() -> None:
    assert _weight_error({A: 0.3, B: 0.7}, WEIGHTS) == round(0.05 / 0.75, 3)


def test_the_line_names_each_goal_s_figure() -> None:
    text = line(_result())
    assert "p99 6 ms (1.5x), with 1 held-back slot: p50 2 ms p99 5 ms (1.2x)" in text
    assert "a SELECT 1 meanwhile: p99 2.5 ms (idle 0.3 ms)" in text
    assert "B's start statement alone: p99 3.8 ms held back, 4.2 ms plain (idle 1.5 ms)" in text
    assert "A 52%, B 48%" in text
    assert "weighted 1:3: B 70.0% (fair 75%, 6.7% off)" in text
    assert "p50 1000 / 1100 us (1.10x), among 1,000: 1.01x the 100's" in text
    assert "one busy beside 99 idle: 1.20x" in text
    assert "with 10,000 keys: behind p99 7 ms (1.8x; held back 1.5x), split A 50%, B 50%" in text
    assert "lease of 10 1.05x unkeyed" in text


def test_the_summary_takes_the_tenants_goals() -> None:
    out = summary({"tenants": _result()})
    assert out["tenants_behind_backlog_p99_vs_idle"] == 1.5
    assert out["tenants_held_back_behind_backlog_p99_vs_idle"] == 1.25
    assert out["tenants_weighted_error"] == 0.067
    assert out["tenants_lease_100_vs_1_namespaces"] == 1.1
    assert out["tenants_lease_1000_vs_100_namespaces"] == 1.01
    assert out["tenants_lease_beside_99_idle_vs_1"] == 1.2
    assert out["tenants_keyed_lease_vs_unkeyed"] == 1.05


def test_a_p99_is_the_nearest_rank_not_the_largest_sample() -> None:
    # With 20 samples a p99 can only be the max; from 100 on it leaves the largest out, which
    # is why the bench's B-behind-a-backlog figure takes 100 samples by default.
    assert percentiles([float(v) for v in range(1, 21)])["p99"] == 20.0
    hundred = percentiles([float(v) for v in range(1, 101)])
    assert (hundred["p50"], hundred["p99"]) == (50.0, 99.0)
    assert percentiles([7.0])["p99"] == 7.0
