"""A definition's results across its recent runs (recall@k and MRR of each nightly refresh,
the documents it read): charts of what changed from run to run, a table of what did not.

- A result's numbers are found at any depth: ``{"bm25": {"recall@5": …}}`` is the field
  ``bm25/recall@5``. An interval's bounds (``X_lo``/``X_hi`` beside ``X``) are left out, and a
  field whose values repeat an earlier field's run for run (the demo's ``quality/*``, a copy
  of ``metrics/*``) is drawn once.
- One scale per chart: scores (every value within [-1, 1] and not all whole numbers) of one
  object share a chart, a line each (``bm25``: recall@1, recall@5, MRR); every other field
  (a count of documents, of characters, a size, a duration) has a chart of its own, so
  documents and characters never share an axis.
- A field with the same value in every run (or one run so far) is a row of ``unchanged``
  with its value, formatted as the dashboard formats numbers (rara.ui.numbers)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from rara.ui.charts import MAX_CHARTS, MAX_SERIES, chart, number_of
from rara.ui.data import ResultPoint
from rara.ui.numbers import is_byte_count, metric

_BOUNDS = ("_lo", "_hi")


@dataclass(frozen=True, slots=True)
class Unchanged:
    key: str
    field: str
    text: str
    runs: int


def _leaves(value: Any, path: str = "") -> Iterator[tuple[str, float]]:
    if isinstance(value, dict):
        for name, inner in value.items():
            yield from _leaves(inner, f"{path}/{name}" if path else str(name))
    elif (number := number_of(value)) is not None:
        yield path, number


def _fields(points: Sequence[ResultPoint]) -> dict[str, dict[str, dict[float, float]]]:
    """Per step, each numeric field's value by run, intervals' bounds and copies left out."""
    found: dict[str, dict[str, dict[float, float]]] = {}
    for p in points:
        for name, value in _leaves(p.result):
            found.setdefault(p.key, {}).setdefault(name, {})[float(p.run_id)] = value
    for key, fields in found.items():
        seen: set[tuple[tuple[float, float], ...]] = set()
        kept = {}
        for name, by_run in fields.items():
            if name.endswith(_BOUNDS) and name[:-3] in fields:
                continue
            values = tuple(sorted(by_run.items()))
            if values in seen:
                continue
            seen.add(values)
            kept[name] = by_run
        found[key] = kept
    return found


def _score(by_run: dict[float, float]) -> bool:
    values = by_run.values()
    return all(-1 <= v <= 1 for v in values) and not all(v.is_integer() for v in values)


def result_view(
    points: Sequence[ResultPoint],
) -> tuple[list[dict[str, Any]], list[Unchanged]]:
    """The charts (uPlot's layout, as rara.ui.charts shapes them) and the unchanged fields."""
    charts: list[dict[str, Any]] = []
    unchanged: list[Unchanged] = []
    for key, fields in _fields(points).items():
        scores: dict[str, dict[str, dict[float, float]]] = {}
        for name, by_run in fields.items():
            if len(set(by_run.values())) <= 1:
                last = by_run[max(by_run)]
                unchanged.append(Unchanged(key, name, metric(name, last), len(by_run)))
            elif _score(by_run):
                group, _, field = name.rpartition("/")
                scores.setdefault(group, {})[field] = by_run
            else:
                drawn = chart(f"{key} · {name}", "run", False, {name: by_run})
                if is_byte_count(name):
                    drawn["unit"] = "bytes"
                charts.append(drawn)
        for group, lines in scores.items():
            title = f"{key} · {group} scores" if group else f"{key} · scores"
            charts.append(chart(title, "run", False, dict(list(lines.items())[:MAX_SERIES])))
    return charts[:MAX_CHARTS], unchanged
