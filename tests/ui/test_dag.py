"""The server-side DAG layout: columns by longest path, rows ordered by parents, edges from
each dependency's right side to its dependant's left, linear at 1,000 steps."""

from __future__ import annotations

import time

from rara.ui.dag import GAP_X, NODE_W, StepNode, layers, layout


def test_columns_are_longest_paths() -> None:
    steps = [
        StepNode("collect", [], "succeeded"),
        StepNode("clean", ["collect"], "running"),
        StepNode("index", ["clean"], "blocked"),
        StepNode("evaluate", ["index", "collect"], "blocked"),
    ]
    assert layers(steps) == {"collect": 0, "clean": 1, "index": 2, "evaluate": 3}
    drawn = layout(steps)
    x = {n.key: n.x for n in drawn.nodes}
    assert x["evaluate"] - x["index"] == NODE_W + GAP_X
    assert {(e.source, e.target) for e in drawn.edges} == {
        ("collect", "clean"),
        ("clean", "index"),
        ("index", "evaluate"),
        ("collect", "evaluate"),
    }
    assert drawn.width >= x["evaluate"] + NODE_W


def test_unknown_dependencies_and_cycles_still_draw() -> None:
    steps = [
        StepNode("a", ["b"], "ready"),
        StepNode("b", ["a"], "ready"),
        StepNode("c", ["nowhere"], "ready"),
    ]
    placed = {n.key for n in layout(steps).nodes}
    assert placed == {"a", "b", "c"}


def test_a_thousand_steps_lay_out_fast() -> None:
    steps = [
        StepNode(
            f"l{layer}-s{i}",
            [f"l{layer - 1}-s{i}", f"l{layer - 1}-s{(i + 1) % 20}"] if layer else [],
            "blocked",
        )
        for layer in range(50)
        for i in range(20)
    ]
    started = time.perf_counter()
    drawn = layout(steps)
    assert time.perf_counter() - started < 2.0  # ~25 ms; generous for a loaded machine
    assert len(drawn.nodes) == 1000
    assert len(drawn.edges) == 49 * 20 * 2
    assert len({(n.x, n.y) for n in drawn.nodes}) == 1000  # no two steps on one spot
