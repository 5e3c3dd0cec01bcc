"""A run's steps as a layered drawing of their ``dependsOn`` graph, laid out on the server.

Longest-path layers (a step sits one column right of its deepest dependency), then one
barycentre sweep orders each column by where its dependencies sit, which untangles the usual
fan-out/fan-in pipelines. Linear in steps plus edges: a 1,000-step run lays out in
milliseconds, and the page draws with no script at all (the live view only recolours it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

NODE_W = 168
NODE_H = 34
GAP_X = 56
GAP_Y = 14
PAD = 8
LABEL_CHARS = 20


@dataclass(frozen=True, slots=True)
class StepNode:
    key: str
    depends_on: Sequence[str]
    status: str


@dataclass(frozen=True, slots=True)
class PlacedNode:
    key: str
    label: str
    status: str
    x: int
    y: int


@dataclass(frozen=True, slots=True)
class PlacedEdge:
    source: str
    target: str
    path: str


@dataclass(frozen=True, slots=True)
class Layout:
    nodes: list[PlacedNode]
    edges: list[PlacedEdge]
    width: int
    height: int
    node_w: int = NODE_W
    node_h: int = NODE_H


def _label(key: str) -> str:
    return key if len(key) <= LABEL_CHARS else key[: LABEL_CHARS - 1] + "…"


def layers(steps: Sequence[StepNode]) -> dict[str, int]:
    """Column of each step: 0 for roots, else one more than its deepest dependency. Unknown
    dependencies are ignored; a cycle (which definitions refuse) cannot loop: each step is
    visited once, in an order where its known dependencies come first when there is one."""
    known = {s.key for s in steps}
    deps = {s.key: [d for d in s.depends_on if d in known] for s in steps}
    dependants: dict[str, list[str]] = {s.key: [] for s in steps}
    waiting = {k: len(v) for k, v in deps.items()}
    for key, ds in deps.items():
        for d in ds:
            dependants[d].append(key)
    order = [s.key for s in steps if waiting[s.key] == 0]
    column: dict[str, int] = {}
    i = 0
    while i < len(order):
        key = order[i]
        i += 1
        column[key] = max((column[d] + 1 for d in deps[key] if d in column), default=0)
        for nxt in dependants[key]:
            waiting[nxt] -= 1
            if waiting[nxt] == 0:
                order.append(nxt)
    if len(column) < len(steps):  # only on a cycle: place what is left after the rest
        last = max(column.values(), default=-1)
        for s in steps:
            if s.key not in column:
                last += 1
                column[s.key] = last
    return column


def layout(steps: Sequence[StepNode]) -> Layout:
    column = layers(steps)
    by_key = {s.key: s for s in steps}
    columns: dict[int, list[str]] = {}
    for s in steps:
        columns.setdefault(column[s.key], []).append(s.key)
    row: dict[str, float] = {}
    for c in sorted(columns):
        keys = columns[c]
        for index, key in enumerate(keys):
            parents = [row[d] for d in by_key[key].depends_on if d in row]
            row[key] = sum(parents) / len(parents) if parents else float(index)
        keys.sort(key=lambda k: row[k])
        for index, key in enumerate(keys):
            row[key] = float(index)
    nodes = [
        PlacedNode(
            key=s.key,
            label=_label(s.key),
            status=s.status,
            x=PAD + column[s.key] * (NODE_W + GAP_X),
            y=PAD + int(row[s.key]) * (NODE_H + GAP_Y),
        )
        for s in steps
    ]
    at = {n.key: n for n in nodes}
    edges = []
    for s in steps:
        target = at[s.key]
        for d in s.depends_on:
            source = at.get(d)
            if source is None:
                continue
            x1, y1 = source.x + NODE_W, source.y + NODE_H // 2
            x2, y2 = target.x, target.y + NODE_H // 2
            mid = (x1 + x2) // 2
            edges.append(PlacedEdge(d, s.key, f"M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}"))
    width = max((n.x for n in nodes), default=0) + NODE_W + PAD
    height = max((n.y for n in nodes), default=0) + NODE_H + PAD
    return Layout(nodes=nodes, edges=edges, width=width, height=height)
