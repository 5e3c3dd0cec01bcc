"""An approval's shown value drawn as a table of metrics (rara.evidence), or left as JSON
when it is not one: nothing a gate shows is dropped or reshaped into something it is not."""

from __future__ import annotations

from typing import Any

import pytest

from rara.evidence import metric_table


def test_rows_columns_and_intervals() -> None:
    table = metric_table(
        {
            "diff/mrr@10": -0.0125, "diff/mrr@10_lo": -0.04, "diff/mrr@10_hi": 0.004,
            "before/recall@10": 0.8, "before/recall@5": 0.6, "before/mrr@10": 0.5,
            "after/mrr@10": 0.49, "after/mrr@10_lo": 0.39, "after/mrr@10_hi": 0.61,
        },
        "adapt.result.quality",
    )  # fmt: skip
    assert table is not None
    assert table.columns == ["mrr@10", "recall@5", "recall@10"]
    assert table.text_rows() == [
        ("after", ["0.490 [0.390, 0.610]", "", ""]),
        ("before", ["0.500", "0.600", "0.800"]),
        ("diff", ["-0.013 [-0.040, +0.004]", "", ""]),
    ]


def test_an_object_without_rows_is_one_row_named_by_what_was_shown() -> None:
    table = metric_table(
        {"recall@1": 0.25, "recall@1_lo": 0.1, "recall@1_hi": 0.4, "queries": 39.0, "x_lo": 1},
        "evaluate.result.bm25",
    )
    assert table is not None
    # A bound without its value is a column of its own; a whole number reads as a count.
    assert table.text_rows() == [("bm25", ["39", "0.250 [0.100, 0.400]", "1"])]
    assert table.columns == ["queries", "recall@1", "x_lo"]


@pytest.mark.parametrize(
    "value",
    [
        None,
        {},
        [0.1, 0.2],
        "0.5",
        {"recall": 0.5, "note": "fine"},  # not all numbers
        {"recall": 0.5, "ok": True},  # a boolean is no metric
        {"before/recall": 0.5, "steps": 3},  # rows and no rows mixed
        {"before": {"recall": 0.5}},  # nested
    ],
)
def test_anything_else_stays_json(value: Any) -> None:
    assert metric_table(value, "step.result.x") is None
