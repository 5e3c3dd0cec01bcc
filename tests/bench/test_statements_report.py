"""The statements bench's attribution (bench.statements): each work node's own share of a
plan, on canned auto_explain plans (no database)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from bench.statements import _blank, _own, table


def _node(kind: str, ms: float, wal: int = 0, **extra: Any) -> dict[str, Any]:
    base = {"Node Type": kind, "Actual Total Time": ms, "Actual Loops": 1, "WAL Records": wal}
    return base | extra


def test_a_write_is_charged_its_own_time_not_its_inputs() -> None:
    scan = _node("Index Scan", 2.0, **{"Relation Name": "t", "Index Name": "t_pkey"})
    update = _node(
        "ModifyTable", 5.0, wal=4, Operation="Update", **{"Relation Name": "t", "Plans": [scan]}
    )
    top = _node("Result", 6.0, Plans=[update])
    into: dict[str, dict[str, float]] = defaultdict(_blank)
    _own(top, into)
    assert into["Update on t"]["ms"] == 3.0
    assert into["Update on t"]["wal_records"] == 4
    assert into["Index Scan on t (t_pkey)"]["ms"] == 2.0
    assert "Result" not in into, "a node that only moves rows goes to the rest"


def test_a_cte_is_not_subtracted_from_the_node_beside_it() -> None:
    # A CTE is a subplan of the statement's top node but runs where it is scanned: the
    # write it holds is charged once, and no other node is charged less for it.
    insert = _node(
        "ModifyTable",
        4.0,
        wal=2,
        Operation="Insert",
        **{"Relation Name": "a", "Subplan Name": "CTE history", "Parent Relationship": "InitPlan"},
    )
    scan = _node("Index Scan", 1.0, **{"Relation Name": "r", "Index Name": "r_pkey"})
    update = _node(
        "ModifyTable", 3.0, Operation="Update", **{"Relation Name": "r", "Plans": [insert, scan]}
    )
    into: dict[str, dict[str, float]] = defaultdict(_blank)
    _own(update, into)
    assert into["Insert on a"]["ms"] == 4.0
    assert into["Update on r"]["ms"] == 2.0


def test_the_table_names_each_statement_and_its_rest() -> None:
    per_call = {
        "fixed_us_per_call": 300.0,
        "us_per_step": 25.0,
        "us_per_step_at_1": 325.0,
        "us_per_step_at_500": 25.6,
    }
    node = {"us": 8.0, "wal_records": 4.7, "wal_bytes": 550.0, "buffers": 9.0}
    statement = {"us_instrumented": 30.0, "rest_us": 22.0, "nodes": {"Update on rara_steps": node}}
    r = {
        "batch": 500,
        "steps_per_run": 1,
        "per_call": {"step_lease": per_call},
        "by_node": {"step_lease": statement | {"triggers_us": {}}},
    }
    text = table(r)
    assert "step_lease 300.0 us + 25.0 us" in text
    assert "Update on rara_steps" in text
    assert "22.00 us  the rest" in text
