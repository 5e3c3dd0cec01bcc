"""What the dashboard charts and what it tabulates (pure functions, no browser): a value is
charted only where it changes over a counter; single values are a compact table per step;
results across runs get one scale per chart, their nested quality metrics included."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rara.ui.charts import MetricRow, metric_view
from rara.ui.data import MetricPoint, ResultPoint
from rara.ui.result_charts import result_view
from rara.ui.single_values import step_values

T0 = datetime(2026, 12, 5, tzinfo=UTC)


def _training(attempts: int = 1) -> list[MetricPoint]:
    points = []
    for attempt in range(1, attempts + 1):
        for step in range(1, 9):
            metrics = {"loss": 1 / step, "step": float(step), "epoch": step / 4, "lr": 0.001}
            points.append(
                MetricPoint(1, "adapt", attempt, step, T0 + timedelta(seconds=step), 0.1, metrics)
            )
    return points


def test_a_counter_in_another_unit_and_a_constant_are_not_charted() -> None:
    charts, rows = metric_view(_training())
    assert [c["id"] for c in charts] == ["adapt:loss"]
    assert {(r.name, r.value) for r in rows} == {("epoch", 2.0), ("lr", 0.001)}


def test_attempts_differ_in_colour_and_dash() -> None:
    (loss,) = metric_view(_training(attempts=2))[0]
    first, second = loss["series"]
    assert (first["label"], second["label"]) == ("attempt 1", "attempt 2")
    assert first["color"] != second["color"]
    assert first["dash"] == []
    assert second["dash"] != []


def test_a_byte_count_chart_says_so() -> None:
    points = [
        MetricPoint(1, "index", 1, i, T0 + timedelta(seconds=i), None, {"written_bytes": i * i})
        for i in range(1, 5)
    ]
    (chart,) = metric_view(points)[0]
    assert chart["unit"] == "bytes"


def _adapt_rows() -> list[MetricRow]:
    scores = [
        MetricRow("adapt", f"{row}/{column}{bound}", 0.4298145167, 1, 1)
        for row in ("before", "after", "diff")
        for column in ("recall@5", "recall@10", "mrr@10")
        for bound in ("", "_lo", "_hi")
    ]
    rest = [
        MetricRow("adapt", "steps", 1154.0, 1, 1),
        MetricRow("adapt", "adapter_bytes", 1102899.0, 2, 3),
        MetricRow("adapt", "time/train_s", 12.3456, 1, 1),
    ]
    return scores + rest


def test_single_values_are_one_table_and_a_list_per_step() -> None:
    (adapt,) = step_values(_adapt_rows())
    assert adapt.table is not None
    assert adapt.table.columns == ["mrr@10", "recall@5", "recall@10"]
    rows = dict(adapt.table_rows())
    assert list(rows) == ["after", "before", "diff"]  # diff last
    assert rows["before"][0] == "0.4298 [0.4298, 0.4298]"
    assert rows["diff"][0] == "+0.4298 [+0.4298, +0.4298]"
    shown = {v.name: (v.text, v.title) for v in adapt.values}
    assert shown == {
        "steps": ("1,154", "attempt 1, reported 1 time"),
        "adapter_bytes": ("1.05 MiB", "attempt 2, reported 3 times"),
        "time/train_s": ("12.35", "attempt 1, reported 1 time"),  # one row: no table of it
    }


def _result(run: int, key: str, result: dict[str, object]) -> ResultPoint:
    return ResultPoint(run, 1, T0, key, result)


def test_results_get_one_scale_per_chart_and_their_nested_scores() -> None:
    points = []
    for run in (1, 2, 3):
        points.append(_result(run, "collect", {"documents": 350 + run, "characters": 10**6 * run}))
        quality = {"recall@5": 0.5 + run / 100, "recall@5_lo": 0.4, "mrr@10": 0.3 + run / 50}
        points.append(
            _result(run, "evaluate", {"bm25": quality, "queries": 39, "copy": dict(quality)})
        )
    charts, unchanged = result_view(points)
    titles = [c["title"] for c in charts]
    assert titles == [
        "collect · documents",
        "collect · characters",
        "evaluate · bm25 scores",
    ]
    scores = charts[2]
    assert [s["label"] for s in scores["series"]] == ["recall@5", "mrr@10"]  # no bound, no copy
    assert scores["x"] == [1.0, 2.0, 3.0]
    assert [(u.key, u.field, u.text, u.runs) for u in unchanged] == [
        ("evaluate", "queries", "39", 3)
    ]
