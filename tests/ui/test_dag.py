"""The server-side DAG layout: columns by longest path, rows ordered by neighbours, edges from
each dependency's right side to its dependant's left, routed around every node's box, fast at
1,000 steps."""

from __future__ import annotations

import re
import time

from rara.ui.dag import (
    GAP_X,
    NODE_H,
    NODE_W,
    Layout,
    StepNode,
    layers,
    layout,
    transitive_reduction,
)


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
    # collect -> evaluate is implied by collect -> clean -> index -> evaluate: not drawn.
    assert {(e.source, e.target) for e in drawn.edges} == {
        ("collect", "clean"),
        ("clean", "index"),
        ("index", "evaluate"),
    }
    evaluate = next(n for n in drawn.nodes if n.key == "evaluate")
    assert "dependsOn: index, collect" in evaluate.title  # every declared one, named
    assert drawn.width >= x["evaluate"] + NODE_W


DEMO = {
    "collect": [],
    "clean": ["collect"],
    "index-shard": ["clean"],
    "index": ["clean", "index-shard"],
    "evaluate": ["clean", "index"],
    "adapt": ["clean", "index", "evaluate"],
    "release": ["index", "evaluate", "adapt"],
}


def test_the_demo_reduces_to_its_chain() -> None:
    assert transitive_reduction(DEMO) == {
        "collect": [],
        "clean": ["collect"],
        "index-shard": ["clean"],
        "index": ["index-shard"],
        "evaluate": ["index"],
        "adapt": ["evaluate"],
        "release": ["adapt"],
    }


def test_reduction_keeps_what_no_other_path_implies() -> None:
    # A diamond with a shortcut: a->d is implied by a->b->d; b and c both stay before d.
    graph = {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c", "a", "b"], "e": ["a", "nowhere"]}
    assert transitive_reduction(graph) == {
        "a": [],
        "b": ["a"],
        "c": ["a"],
        "d": ["b", "c"],  # order kept, the repeat and the implied edge gone
        "e": ["a"],  # an unknown key is no edge
    }


def test_reduction_leaves_a_cycle_as_declared() -> None:
    graph = {"a": ["c"], "b": ["a"], "c": ["b", "a"], "root": [], "x": ["root"]}
    reduced = transitive_reduction(graph)
    assert reduced["c"] == ["b", "a"]
    assert reduced["a"] == ["c"]
    assert reduced["x"] == ["root"]


def test_reduction_of_a_long_chain_with_every_shortcut() -> None:
    # Each of 300 steps depends on every step before it: only the chain remains.
    graph = {f"s{i}": [f"s{j}" for j in range(i)] for i in range(300)}
    started = time.perf_counter()
    reduced = transitive_reduction(graph)
    print(
        f"300 steps, {sum(map(len, graph.values()))} edges reduced in "
        f"{(time.perf_counter() - started) * 1000:.0f} ms"
    )
    assert reduced == {f"s{i}": [f"s{i - 1}"] if i else [] for i in range(300)}


def test_unknown_dependencies_and_cycles_still_draw() -> None:
    steps = [
        StepNode("a", ["b"], "ready"),
        StepNode("b", ["a"], "ready"),
        StepNode("c", ["nowhere"], "ready"),
    ]
    placed = {n.key for n in layout(steps).nodes}
    assert placed == {"a", "b", "c"}


def _thousand(long_edges: bool) -> list[StepNode]:
    """50 layers of 20 steps, each depending on two of the layer before; with ``long_edges``
    also on one three to six layers back."""

    def depends_on(layer: int, i: int) -> list[str]:
        if not layer:
            return []
        if not long_edges:
            return [f"l{layer - 1}-s{i}", f"l{layer - 1}-s{(i + 1) % 20}"]
        back = 3 + i % 4
        far = [f"l{layer - back}-s{(i * 3) % 20}"] if layer >= back else []
        return [f"l{layer - 1}-s{i}", f"l{layer - 1}-s{(i + 7) % 20}", *far]

    return [
        StepNode(f"l{layer}-s{i}", depends_on(layer, i), "blocked")
        for layer in range(50)
        for i in range(20)
    ]


def _timed(steps: list[StepNode]) -> tuple[Layout, float]:
    started = time.perf_counter()
    drawn = layout(steps)
    took = time.perf_counter() - started
    print(f"{len(steps)} steps, {len(drawn.edges)} edges laid out in {took * 1000:.0f} ms")
    return drawn, took


def test_a_thousand_steps_lay_out() -> None:
    # Its time is printed, not asserted (23 ms here idle; bench.ui_pages times the page).
    drawn, _ = _timed(_thousand(long_edges=False))
    assert len(drawn.nodes) == 1000
    assert len(drawn.edges) == 49 * 20 * 2
    assert len({(n.x, n.y) for n in drawn.nodes}) == 1000  # no two steps on one spot


def _bezier(
    p0: tuple[float, float],
    p1: tuple[float, float],
    p2: tuple[float, float],
    p3: tuple[float, float],
    t: float,
) -> tuple[float, float]:
    u = 1 - t
    return (
        u**3 * p0[0] + 3 * u * u * t * p1[0] + 3 * u * t * t * p2[0] + t**3 * p3[0],
        u**3 * p0[1] + 3 * u * u * t * p1[1] + 3 * u * t * t * p2[1] + t**3 * p3[1],
    )


def _path_points(path: str) -> list[tuple[float, float]]:
    """Points along an SVG path of the three commands the layout writes (M, C, H)."""
    points: list[tuple[float, float]] = []
    at = (0.0, 0.0)
    for command, args in re.findall(r"([MCH])([^MCH]*)", path):
        numbers = [float(n) for n in re.findall(r"-?[0-9.]+", args)]
        if command == "M":
            at = (numbers[0], numbers[1])
            points.append(at)
        elif command == "H":
            end = (numbers[0], at[1])
            points += [(at[0] + (end[0] - at[0]) * i / 16, at[1]) for i in range(1, 17)]
            at = end
        else:
            c1, c2, end = (
                (numbers[0], numbers[1]),
                (numbers[2], numbers[3]),
                (numbers[4], numbers[5]),
            )
            points += [_bezier(at, c1, c2, end, i / 16) for i in range(1, 17)]
            at = end
    return points


def _edges_through_boxes(drawn: Layout) -> list[tuple[str, str, str]]:
    """(edge source, target, node) for every sampled point of an edge strictly inside a node's
    box, its own ends excepted (they touch their nodes' sides)."""
    by_x: dict[int, list[tuple[str, int]]] = {}
    for n in drawn.nodes:
        by_x.setdefault(n.x, []).append((n.key, n.y))
    hits = []
    for e in drawn.edges:
        for px, py in _path_points(e.path):
            for x, column in by_x.items():
                if not x < px < x + NODE_W:
                    continue
                for key, y in column:
                    if y < py < y + NODE_H:
                        hits.append((e.source, e.target, key))
    return hits


def test_skip_edges_route_around_the_nodes_they_pass() -> None:
    """clean feeds adapt directly, and no other path leads there from it: that edge skips
    three columns, and is drawn through a lane of its own in each, not behind their nodes."""
    steps = [
        StepNode("collect", [], "succeeded"),
        StepNode("clean", ["collect"], "succeeded"),
        StepNode("index-shard", ["collect"], "succeeded", group=True, children=4),
        StepNode("index", ["index-shard"], "succeeded"),
        StepNode("evaluate", ["index"], "running"),
        StepNode("adapt", ["clean", "evaluate"], "blocked"),
    ]
    drawn = layout(steps)
    assert len(drawn.edges) == 6  # no dependsOn here is implied by another
    assert _edges_through_boxes(drawn) == []
    skip = next(e for e in drawn.edges if (e.source, e.target) == ("clean", "adapt"))
    assert len(skip.points) == 2 + 2 * 2  # a waypoint (two points) per column crossed
    label = next(n.label for n in drawn.nodes if n.key == "index-shard")
    assert label == "index-shard ×4"


def test_a_thousand_steps_with_long_edges_draw_every_edge_clear_of_the_nodes() -> None:
    """1,000 steps where every step also depends on one three to six columns back."""
    steps = _thousand(long_edges=True)
    drawn, _ = _timed(steps)
    reduced = transitive_reduction({s.key: s.depends_on for s in steps})
    expected = {(d, key) for key, ds in reduced.items() for d in ds}
    assert {(e.source, e.target) for e in drawn.edges} == expected
    assert any(e.points[-1][0] - e.points[0][0] > 2 * (NODE_W + GAP_X) for e in drawn.edges)
    assert _edges_through_boxes(drawn) == []
    assert len({(n.x, n.y) for n in drawn.nodes}) == 1000
