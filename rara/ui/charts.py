"""Chart data for uPlot, shaped on the server: one aligned x array per chart and a series
per line (uPlot's own data layout), nulls where a line has no point (drawn as gaps spanned).

- ``metric_charts``: per step and metric, the values a step reported with its progress, one
  line per attempt. A step that reports its own counter (``step``: a training step) is
  plotted against it, so a resumed adaptation's loss curve continues where the checkpoint
  left it, each resume marked; otherwise against time (UTC). The step's primary metric
  (``loss``) comes first. The page draws them, and the live view sends them again for the
  running steps while they report (rara.ui.live): the same shaping either way.
- ``metric_view``: those charts, and the metrics with one value (reported once, or never
  changing: the adaptation's ``before/*`` scores) as rows rather than flat charts.
- ``result_charts``: per step, the numeric fields of its results across a definition's
  recent runs (recall@k, MRR of each nightly refresh)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rara.ui.data import MetricPoint, ResultPoint

MAX_CHARTS = 24
MAX_SERIES = 12
# A step's own counter, when it reports one: the x of its charts instead of time.
COUNTERS = ("step", "global_step", "iteration")
# What a step's charts lead with when it reports it.
PRIMARY = ("loss", "train/loss", "val/loss")
# One colour per attempt, by its number. None is the failure colour (the timeline's and the
# badges' red, --failed in app.css) or close to it: a successful attempt is never drawn red.
ATTEMPT_COLOURS = (
    "#2563eb",
    "#16a34a",
    "#9333ea",
    "#0891b2",
    "#4d7c0f",
    "#334155",
    "#0f766e",
    "#854d0e",
    "#4f46e5",
    "#ca8a04",
)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def attempt_colour(attempt: int) -> str:
    return ATTEMPT_COLOURS[(attempt - 1) % len(ATTEMPT_COLOURS)]


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


@dataclass(frozen=True, slots=True)
class _Metric:
    key: str
    name: str
    counter: str | None  # the x: the step's counter, or None for time
    points: list[tuple[int, float, float]]  # attempt, x, value

    @property
    def single(self) -> bool:
        return len({value for _, _, value in self.points}) <= 1


def _metrics(points: Sequence[MetricPoint]) -> list[_Metric]:
    """Every (step, metric) in the order first reported, with its points."""
    counters: dict[str, str] = {}
    for p in points:
        if p.key not in counters:
            for c in COUNTERS:
                if c in p.metrics and _number(p.metrics[c]) is not None:
                    counters[p.key] = c
                    break
    raw: dict[tuple[str, str], list[tuple[int, float | None, float, float]]] = {}
    for p in points:
        counter = counters.get(p.key)
        at = _number(p.metrics.get(counter)) if counter else None
        when = p.created_at.timestamp()
        for name, value in p.metrics.items():
            number = _number(value)
            if number is None or name == counter:
                continue
            raw.setdefault((p.key, name), []).append((p.attempt, at, when, number))
    found = []
    for (key, name), rows in raw.items():
        # Against the counter only when every report of the metric carries it.
        counted = key in counters and all(at is not None for _, at, _, _ in rows)
        found.append(
            _Metric(
                key,
                name,
                counters[key] if counted else None,
                [(a, at if counted and at is not None else t, v) for a, at, t, v in rows],
            )
        )
    return found


def _metric_chart(m: _Metric) -> dict[str, Any]:
    lines: dict[int, dict[float, float]] = {}
    for attempt, x, value in m.points:
        lines.setdefault(attempt, {})[x] = value
    chart = _chart(
        f"{m.key} · {m.name}",
        m.counter or "time (UTC)",
        m.counter is None,
        {f"attempt {a}": line for a, line in lines.items()},
    )
    for series, attempt in zip(chart["series"], lines, strict=False):
        series["color"] = attempt_colour(attempt)
    marks = []
    if m.counter is not None:
        for attempt, line in list(lines.items())[1:]:
            start = min(line)
            marks.append({"x": start, "label": f"attempt {attempt} from {m.counter} {start:g}"})
    chart.update(id=f"{m.key}:{m.name}", key=m.key, primary=m.name in PRIMARY, marks=marks)
    return chart


def metric_charts(points: Sequence[MetricPoint]) -> list[dict[str, Any]]:
    return metric_view(points)[0]


@dataclass(frozen=True, slots=True)
class MetricRow:
    key: str
    name: str
    value: float
    attempt: int
    reports: int


def metric_view(points: Sequence[MetricPoint]) -> tuple[list[dict[str, Any]], list[MetricRow]]:
    """The charts, and the metrics with a single value as rows (the last attempt's value)
    rather than flat charts."""
    charted: list[_Metric] = []
    rows: list[MetricRow] = []
    for m in _metrics(points):
        if m.single:
            attempt, _, value = m.points[-1]
            rows.append(MetricRow(m.key, m.name, value, attempt, len(m.points)))
        else:
            charted.append(m)
    charted.sort(key=lambda m: m.name not in PRIMARY)  # stable: otherwise as reported
    return [_metric_chart(m) for m in charted[:MAX_CHARTS]], rows


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
