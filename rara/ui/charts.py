"""Chart data for uPlot, shaped on the server: one aligned x array per chart and a series
per line (uPlot's own data layout), nulls where a line has no point (drawn as gaps spanned).

- ``metric_charts``: per step and metric, the values a step reported with its progress over
  time, one line per attempt: a resumed adaptation's loss curve continues where the
  checkpoint left it.
- ``result_charts``: per step, the numeric fields of its results across a definition's
  recent runs (recall@k, MRR of each nightly refresh)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rara.ui.data import MetricPoint, ResultPoint

MAX_CHARTS = 24
MAX_SERIES = 12


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _chart(
    title: str, x_label: str, time: bool, lines: dict[str, dict[float, float]]
) -> dict[str, Any]:
    xs = sorted({x for points in lines.values() for x in points})
    return {
        "title": title,
        "xLabel": x_label,
        "time": time,
        "x": xs,
        "series": [
            {"label": label, "values": [points.get(x) for x in xs]}
            for label, points in list(lines.items())[:MAX_SERIES]
        ],
    }


def metric_charts(points: Sequence[MetricPoint]) -> list[dict[str, Any]]:
    grouped: dict[tuple[str, str], dict[str, dict[float, float]]] = {}
    for p in points:
        for name, raw in p.metrics.items():
            value = _number(raw)
            if value is None:
                continue
            lines = grouped.setdefault((p.key, name), {})
            lines.setdefault(f"attempt {p.attempt}", {})[p.created_at.timestamp()] = value
    return [
        _chart(f"{key} · {name}", "time", True, lines)
        for (key, name), lines in list(grouped.items())[:MAX_CHARTS]
    ]


def result_charts(points: Sequence[ResultPoint]) -> list[dict[str, Any]]:
    grouped: dict[str, dict[str, dict[float, float]]] = {}
    for p in points:
        for name, raw in p.result.items():
            value = _number(raw)
            if value is None:
                continue
            grouped.setdefault(p.key, {}).setdefault(name, {})[float(p.run_id)] = value
    return [
        _chart(f"{key}: results by run", "run", False, lines)
        for key, lines in list(grouped.items())[:MAX_CHARTS]
    ]
