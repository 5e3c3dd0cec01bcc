"""The waits bench (bench.waits) run for real at tiny sizes, on its own embedded PostgreSQL with
two worker processes: every figure is measured (nothing left out or made up), and the report
(table, goals, ``make bench``'s summary) is built from them."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from bench.common import Server, bench_database
from bench.proc_cpu import TICK_SECONDS
from bench.run import summary
from bench.waits import measure, rows, table


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    logs = tmp_path_factory.mktemp("logs")
    with bench_database() as url:
        return measure(
            Server(url),
            Path(logs),
            idle_runs=40,
            window=1.0,
            timers=30,
            spread=2.0,
            signals=10,
            say=lambda _: None,
        )


def test_each_part_is_measured_at_the_sizes_asked(result: dict[str, Any]) -> None:
    idle, timers, signals = result["idle"], result["timers"], result["signals"]
    assert result["workers"] == 2
    assert idle["runs"] == 40
    assert idle["window_s"] == 1.0
    for state in ("none", "waiting"):
        # Two live workers and a server spend some CPU in a second; none is negative.
        assert set(idle[state]) == {"server_ms_per_s", "workers_ms_per_s"}
        assert all(v >= 0 for v in idle[state].values())
    assert len(idle["none_windows"]) == 2
    assert idle["difference_ms_per_s"] == pytest.approx(
        sum(idle["waiting"][k] - idle["none"][k] for k in idle["none"]), abs=0.02
    )
    # At least the meter's resolution: a 10 ms tick of each side over a 1 s window.
    assert idle["noise_ms_per_s"] >= 2 * TICK_SECONDS * 1000
    assert timers["timers"] == 30
    assert timers["started_before_first_due"] is True
    late = timers["lateness_ms"]
    # A timer never ends before its time, and the firing loop ends each within seconds.
    assert 0 <= late["min"] <= late["p50"] <= late["p99"] <= late["max"] < 10_000
    assert signals["signals"] == 10
    for key in ("call_to_ready_ms", "call_to_leased_ms", "sent_to_ready_ms", "sent_to_leased_ms"):
        assert signals[key]["p50"] <= signals[key]["p99"]
    # The dependant is ready in the signal's transaction, and leased after.
    assert signals["sent_to_ready_ms"]["p99"] == 0
    assert signals["sent_to_leased_ms"]["p50"] > 0
    assert signals["call_to_leased_ms"]["p50"] >= signals["call_to_ready_ms"]["p50"]


def test_the_table_has_each_goal_with_whether_it_is_met(result: dict[str, Any]) -> None:
    lines = rows(result)
    goals = {figure: (goal, met) for figure, _, goal, met in lines if goal}
    idle = result["idle"]
    assert goals["CPU difference, server + workers"] == (
        f"within noise {idle['noise_ms_per_s']:.2f} ms/s",
        "yes" if abs(idle["difference_ms_per_s"]) <= idle["noise_ms_per_s"] else "no",
    )
    late = result["timers"]["lateness_ms"]["p99"]
    assert goals["timer lateness (30 over 2 s)"] == (
        "p99 <= 1000 ms",
        "yes" if late <= 1000 else "no",
    )
    text = table(result)
    assert text.splitlines()[0].split() == ["figure", "measured", "goal", "met?"]
    assert "server CPU, 0 / 40 waiting runs (1 s)" in text
    assert "signal call -> dependant leased (10)" in text


def test_a_goal_missed_says_no() -> None:
    missed: dict[str, Any] = {
        "idle": {
            "runs": 10_000,
            "window_s": 10.0,
            "none": {"server_ms_per_s": 5.0, "workers_ms_per_s": 10.0},
            "waiting": {"server_ms_per_s": 9.0, "workers_ms_per_s": 10.0},
            "difference": {"server_ms_per_s": 4.0, "workers_ms_per_s": 0.0},
            "difference_ms_per_s": 4.0,
            "noise_ms_per_s": 3.0,
        },
        "timers": {
            "timers": 2_000,
            "spread_s": 20.0,
            "lateness_ms": {"p50": 900.0, "p99": 1500.0, "max": 1600.0},
        },
        "signals": {
            "signals": 500,
            **{
                k: {"p50": 1.0, "p99": 2.0}
                for k in (
                    "call_to_ready_ms",
                    "call_to_leased_ms",
                    "sent_to_ready_ms",
                    "sent_to_leased_ms",
                )
            },
        },
    }
    met = [m for _, _, goal, m in rows(missed) if goal]
    assert met == ["no", "no"]
    within = copy.deepcopy(missed)
    within["idle"]["difference_ms_per_s"] = -2.5
    assert next(m for _, _, goal, m in rows(within) if goal) == "yes"


def test_the_summary_takes_the_waits_goals(result: dict[str, Any]) -> None:
    out = summary({"waits": result})
    assert out["waits_idle_cpu_difference_ms_per_s"] == result["idle"]["difference_ms_per_s"]
    assert out["waits_timer_lateness_p99_ms"] == result["timers"]["lateness_ms"]["p99"]
    assert out["waits_signal_to_leased_p99_ms"] == result["signals"]["call_to_leased_ms"]["p99"]
