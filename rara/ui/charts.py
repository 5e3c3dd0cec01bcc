"""Chart data for uPlot, shaped on the server: one aligned x array per chart and a series
per line (uPlot's own data layout), nulls where a line has no point (drawn as gaps spanned).

- ``metric_charts``: per step and metric, the values a step reported with its progress, one
  line per attempt. A step that reports its own counter (``step``: a training step) is
  plotted against it, so a resumed adaptation's loss curve continues where the checkpoint
  left it, each resume marked; otherwise against time (UTC). The step's primary metric
  (``loss``) comes first. The page draws them, and the live view sends them again for the
  running steps while they report (rara.ui.live): the same shaping either way.
- ``metric_view``: those charts, and the metrics with one value (reported once, or never
  changing: the adaptation's ``before/*`` scores) as rows rather than flat charts. A metric
  charted against a counter is charted only where it says more than the counter: one whose
  every point lies on one straight line against it (``epoch`` = ``step`` / steps per epoch)
  is the counter in another unit, and is a row with its last value.
  Each attempt has its own colour and dash (``attempt_style``), so two attempts' identical
  curves show as two lines; a byte count (rara.ui.numbers) has ``unit: "bytes"``.

The results of a definition's runs are charted by rara.ui.result_charts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rara.ui.data import MetricPoint
from rara.ui.numbers import is_byte_count

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


def number_of(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


# The dash of each attempt's line after the first (solid): where two attempts drew the same
# curve, the later one's gaps show the earlier one beneath it.
ATTEMPT_DASHES = ((), (8, 4), (2, 3), (10, 3, 2, 3))


def attempt_colour(attempt: int) -> str:
    return ATTEMPT_COLOURS[(attempt - 1) % len(ATTEMPT_COLOURS)]


def attempt_dash(attempt: int) -> list[int]:
    return list(ATTEMPT_DASHES[(attempt - 1) % len(ATTEMPT_DASHES)])


def chart(
    title: str, x_label: str, time: bool, lines: dict[str, dict[float, float]]
) -> dict[str, Any]:
    """One chart in uPlot's layout: the x values of every line, a series per line."""
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

    @property
    def follows_counter(self) -> bool:
        """Every point on one straight line against the step's counter (three at least):
        the counter itself in another unit, which a chart would only draw as a diagonal."""
        if self.counter is None:
            return False
        points = sorted({(x, v) for _, x, v in self.points})
        if len({x for x, _ in points}) < 3:
            return False
        (x0, v0), (x1, v1) = points[0], points[-1]
        slope = (v1 - v0) / (x1 - x0)
        return all(abs(v - (v0 + slope * (x - x0))) <= 1e-9 * max(1.0, abs(v)) for x, v in points)


def _metrics(points: Sequence[MetricPoint]) -> list[_Metric]:
    """Every (step, metric) in the order first reported, with its points."""
    counters: dict[str, str] = {}
    for p in points:
        if p.key not in counters:
            for c in COUNTERS:
                if c in p.metrics and number_of(p.metrics[c]) is not None:
                    counters[p.key] = c
                    break
    raw: dict[tuple[str, str], list[tuple[int, float | None, float, float]]] = {}
    for p in points:
        counter = counters.get(p.key)
        at = number_of(p.metrics.get(counter)) if counter else None
        when = p.created_at.timestamp()
        for name, value in p.metrics.items():
            number = number_of(value)
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
    drawn = chart(
        f"{m.key} · {m.name}",
        m.counter or "time (UTC)",
        m.counter is None,
        {f"attempt {a}": line for a, line in lines.items()},
    )
    for series, attempt in zip(drawn["series"], lines, strict=False):
        series["color"] = attempt_colour(attempt)
        series["dash"] = attempt_dash(attempt)
    if is_byte_count(m.name):
        drawn["unit"] = "bytes"
    marks = []
    if m.counter is not None:
        for attempt, line in list(lines.items())[1:]:
            start = min(line)
            marks.append({"x": start, "label": f"attempt {attempt} from {m.counter} {start:g}"})
    drawn.update(id=f"{m.key}:{m.name}", key=m.key, primary=m.name in PRIMARY, marks=marks)
    return drawn


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
        if m.single or m.follows_counter:
            attempt, _, value = m.points[-1]
            rows.append(MetricRow(m.key, m.name, value, attempt, len(m.points)))
        else:
            charted.append(m)
    charted.sort(key=lambda m: m.name not in PRIMARY)  # stable: otherwise as reported
    return [_metric_chart(m) for m in charted[:MAX_CHARTS]], rows
