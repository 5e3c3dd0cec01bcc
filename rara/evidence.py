"""An approval's evidence as a person reads it: a shown value that is a table of metrics is
drawn as one, in `rara approvals show` and on the dashboard (docs/waits.md, "Approvals").

The convention is the one evaluation steps already follow (the demo's, rara_rag.evaluate):
an object of numbers is a table. A key ``ROW/COLUMN`` puts its number in that row and column
(``before/recall@10``, ``diff/mrr@10``); a key without ``/`` is a column of one row named by
what was shown; ``COLUMN_lo`` and ``COLUMN_hi`` beside ``COLUMN`` are its interval, drawn in
its cell (``0.512 [0.471, 0.553]``), not as columns of their own. Anything else (a string, a
nested object, a list, keys with and without ``/`` mixed) is not a table and is shown as
JSON, so nothing is ever hidden.

PostgreSQL's jsonb keeps no key order, so the table makes its own: columns and rows in natural
order (``recall@5`` before ``recall@10``), a row named ``diff`` last and signed (a difference,
after - before).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_BOUNDS = ("_lo", "_hi")


@dataclass(frozen=True, slots=True)
class Cell:
    value: float
    lo: float | None = None
    hi: float | None = None

    def text(self, signed: bool = False) -> str:
        if self.lo is None and float(self.value).is_integer():
            return str(int(self.value))  # a count (queries: 39), stored as JSON's 39.0
        spec = "+.3f" if signed else ".3f"
        shown = f"{self.value:{spec}}"
        if self.lo is not None and self.hi is not None:
            shown += f" [{self.lo:{spec}}, {self.hi:{spec}}]"
        return shown


@dataclass(frozen=True, slots=True)
class MetricTable:
    columns: list[str]
    rows: list[tuple[str, dict[str, Cell]]]

    def text_rows(self) -> list[tuple[str, list[str]]]:
        """Each row's name and its cells as text, in column order ("" where it has none). A
        row named ``diff`` (a difference, after - before) is signed."""
        return [
            (name, [cells[c].text(name == "diff") if c in cells else "" for c in self.columns])
            for name, cells in self.rows
        ]


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def metric_table(value: Any, shown: str) -> MetricTable | None:
    """``value`` as a table (module docstring), or None when it is not one. ``shown``: what
    was shown (``evaluate.result.bm25``), whose last part names a table's only row."""
    if not isinstance(value, dict) or not value or not all(map(_number, value.values())):
        return None
    grouped = ["/" in key for key in value]
    if any(grouped) and not all(grouped):
        return None  # half rows, half not: no one table says it right
    single = shown.rsplit(".", 1)[-1]
    raw: dict[str, dict[str, float]] = {}
    for key, number in value.items():
        row, column = key.split("/", 1) if "/" in key else (single, key)
        raw.setdefault(row, {})[column] = number
    columns: list[str] = []
    rows = []
    for row, numbers in raw.items():
        cells = {}
        for column, number in numbers.items():
            base = column[:-3] if column.endswith(_BOUNDS) else None
            if base is not None and base in numbers:
                continue  # drawn in its column's cell
            cells[column] = Cell(number, numbers.get(f"{column}_lo"), numbers.get(f"{column}_hi"))
            if column not in columns:
                columns.append(column)
        rows.append((row, cells))
    columns.sort(key=_natural)
    rows.sort(key=lambda row: (row[0] == "diff", _natural(row[0])))
    return MetricTable(columns, rows)


def _natural(text: str) -> list[tuple[int, str | int]]:
    """Sorts ``recall@5`` before ``recall@10``: digit runs compare as numbers."""
    return [(1, int(part)) if part.isdigit() else (0, part) for part in re.split(r"(\d+)", text)]
