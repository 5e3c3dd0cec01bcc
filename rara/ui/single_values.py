"""A step's metrics that have one value (reported once, or never changing) as a compact
block rather than a row or a chart each: an adaptation reports ~60 (each retriever's scores
with their intervals, its timings and sizes) and a line per value made its page thousands
of pixels tall.

Per step, the metrics named ``ROW/COLUMN`` whose rows share their columns (``before/``,
``after/`` and ``diff/`` each with ``recall@5``, ``mrr@10``…) are one table, as an approval's
evidence is (rara.evidence: ``_lo``/``_hi`` drawn in their column's cell); every other one is
a name and its value in a list that flows into columns. Values are formatted by
rara.ui.numbers (bytes by name)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rara.evidence import Cell, MetricTable, metric_table
from rara.ui.charts import MetricRow
from rara.ui.numbers import metric, number

_BOUNDS = ("_lo", "_hi")


@dataclass(frozen=True, slots=True)
class Value:
    name: str
    text: str
    title: str  # which attempt reported it, how often


@dataclass(frozen=True, slots=True)
class StepValues:
    key: str
    table: MetricTable | None
    values: list[Value]

    def table_rows(self) -> list[tuple[str, list[str]]]:
        """The table's rows as text, a ``diff`` row signed: rara.evidence's layout with the
        dashboard's digits."""
        if self.table is None:
            return []
        return [
            (name, [_cell(cells.get(c), name == "diff") for c in self.table.columns])
            for name, cells in self.table.rows
        ]


def _cell(cell: Cell | None, signed: bool) -> str:
    if cell is None:
        return ""
    text = number(cell.value, signed)
    if cell.lo is not None and cell.hi is not None:
        text += f" [{number(cell.lo, signed)}, {number(cell.hi, signed)}]"
    return text


def _column(name: str) -> str:
    column = name.split("/", 1)[1]
    return column[:-3] if column.endswith(_BOUNDS) else column


def _tabled(names: Sequence[str]) -> set[str]:
    """The ``ROW/COLUMN`` names whose row has the same columns as at least one other row."""
    columns: dict[str, set[str]] = {}
    for name in names:
        if "/" in name:
            columns.setdefault(name.split("/", 1)[0], set()).add(_column(name))
    shared: dict[frozenset[str], list[str]] = {}
    for row, found in columns.items():
        shared.setdefault(frozenset(found), []).append(row)
    rows = {row for group in shared.values() if len(group) > 1 for row in group}
    return {name for name in names if "/" in name and name.split("/", 1)[0] in rows}


def step_values(rows: Sequence[MetricRow]) -> list[StepValues]:
    """The single-value metrics, per step in the order first reported."""
    by_step: dict[str, list[MetricRow]] = {}
    for row in rows:
        by_step.setdefault(row.key, []).append(row)
    found = []
    for key, mine in by_step.items():
        tabled = _tabled([m.name for m in mine])
        table = metric_table({m.name: m.value for m in mine if m.name in tabled}, key)
        values = [
            Value(
                m.name,
                metric(m.name, m.value),
                f"attempt {m.attempt}, reported {m.reports} time{'s' if m.reports != 1 else ''}",
            )
            for m in mine
            if table is None or m.name not in tabled
        ]
        found.append(StepValues(key, table, values))
    return found
