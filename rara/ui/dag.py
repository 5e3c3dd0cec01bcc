"""A run's steps as a layered drawing of their ``dependsOn`` graph, laid out on the server.

Sugiyama's scheme, kept linear enough for 1,000 steps:

0. Transitive edges are not drawn: ``a -> c`` is left out where ``a -> b -> c`` already says
   that ``c`` runs after ``a`` (``transitive_reduction``). Pipelines list every input they
   read (the demo's ``release`` depends on ``index``, ``evaluate`` and ``adapt``, each of which
   follows the one before), and drawn each as its own edge they bury the order in long
   parallel lines; a faint edge would still need a lane through every column it crosses. A
   node's tooltip names every dependency it declares, so nothing declared is hidden.
1. Layers by longest path: a step sits one column right of its deepest dependency.
2. An edge that skips columns gets a waypoint in every column it crosses (a "dummy" slot, as
   tall as a line, not a node), so it is drawn through a gap of its own instead of behind the
   nodes of those columns.
3. Barycentre sweeps, one down and one up, order each column by where its neighbours sit, which
   untangles the usual fan-out/fan-in pipelines.
4. Edges are drawn as straight runs through their waypoints inside a column and as curves
   between columns, where no node is: no edge passes through a node's box.

The page draws with no script at all (the live view only recolours it)."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

NODE_W = 168
NODE_H = 34
LANE_H = 10  # the slot of an edge passing through a column
GAP_X = 56
GAP_Y = 14
PAD = 8
LABEL_CHARS = 20
SWEEPS = 2  # down, then up: more rarely helps a pipeline and costs ~4 ms a pass at 1,000


@dataclass(frozen=True, slots=True)
class StepNode:
    key: str
    depends_on: Sequence[str]
    status: str
    # A map step is a group: drawn "key xN" (with a multiplication sign; N once it has
    # expanded), a line per child in its tooltip.
    group: bool = False
    children: int | None = None
    details: Sequence[str] = field(default_factory=tuple)
    # A pill on the node's corner ("cached", "resumed": a step that did not run), its
    # tooltip, and where it links (the run it came from; "" for none).
    badge: str = ""
    badge_title: str = ""
    badge_href: str = ""


# Named tuples, not frozen dataclasses: a 1,000-step page makes thousands of these per view,
# and a frozen dataclass sets each field through object.__setattr__ (twice the layout's time).
class PlacedNode(NamedTuple):
    key: str
    label: str
    status: str
    x: int
    y: int
    group: bool = False  # a map step: drawn as a stack
    title: str = ""
    badge: str = ""
    badge_title: str = ""
    badge_href: str = ""


class PlacedEdge(NamedTuple):
    source: str
    target: str
    path: str
    points: tuple[tuple[int, int], ...]  # start, a waypoint per column crossed, end


@dataclass(frozen=True, slots=True)
class Layout:
    nodes: list[PlacedNode]
    edges: list[PlacedEdge]
    width: int
    height: int
    node_w: int = NODE_W
    node_h: int = NODE_H


def _label(s: StepNode) -> str:
    suffix = f" ×{s.children if s.children is not None else '…'}" if s.group else ""
    room = LABEL_CHARS - len(suffix)
    key = s.key if len(s.key) <= room else s.key[: room - 1] + "…"
    return key + suffix


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


def transitive_reduction(depends_on: dict[str, Sequence[str]]) -> dict[str, list[str]]:
    """Each step's dependencies less those implied by another of them (``a`` is left out of
    ``c``'s when ``c`` also depends on ``b`` and ``b`` on ``a``, directly or not), in their
    order; repeats and unknown keys dropped. Ancestor sets are bit sets (Python ints), built in
    topological order: linear in edges times steps/64 words, ~10 ms at 1,000 steps. A step on
    a cycle, or after one, keeps its dependencies as declared."""
    deps = {k: [d for d in dict.fromkeys(v) if d in depends_on] for k, v in depends_on.items()}
    bit = {key: 1 << i for i, key in enumerate(depends_on)}
    dependants: dict[str, list[str]] = {k: [] for k in deps}
    waiting = {k: len(v) for k, v in deps.items()}
    for key, ds in deps.items():
        for d in ds:
            dependants[d].append(key)
    order = [k for k, n in waiting.items() if n == 0]
    ancestors: dict[str, int] = {}
    reduced = dict(deps)
    for key in order:  # grows as steps become ready (Kahn's algorithm)
        implied = 0
        for d in deps[key]:
            implied |= ancestors[d]
        reduced[key] = [d for d in deps[key] if not implied & bit[d]]
        ancestors[key] = implied | sum(bit[d] for d in reduced[key])
        for nxt in dependants[key]:
            waiting[nxt] -= 1
            if waiting[nxt] == 0:
                order.append(nxt)
    return reduced


# A slot in a column: a step's key, or a number for an edge's waypoint there (numbers hash
# faster than tuples, and a 1,000-step page lays this out on every view).
Slot = str | int


def _chains(
    steps: Sequence[StepNode], column: dict[str, int]
) -> tuple[list[tuple[str, str, list[Slot]]], dict[int, list[Slot]]]:
    """Each drawable edge as its chain of slots (source, waypoints…, target), and the slots of
    every column. An edge that goes right to left (only in a cycle) is not drawn."""
    columns: dict[int, list[Slot]] = {}
    for s in steps:
        columns.setdefault(column[s.key], []).append(s.key)
    chains: list[tuple[str, str, list[Slot]]] = []
    waypoints = itertools.count()
    drawn = transitive_reduction({s.key: s.depends_on for s in steps})
    for s in steps:
        for d in drawn[s.key]:
            if d not in column or column[d] >= column[s.key]:
                continue
            chain: list[Slot] = [d]
            for c in range(column[d] + 1, column[s.key]):
                waypoint = next(waypoints)
                columns[c].append(waypoint)
                chain.append(waypoint)
            chain.append(s.key)
            chains.append((d, s.key, chain))
    return chains, columns


def _order(columns: dict[int, list[Slot]], chains: list[tuple[str, str, list[Slot]]]) -> None:
    """Barycentre sweeps: each slot moves to the mean position of its neighbours in the column
    it is compared with (left on the way down, right on the way up); ties keep their order."""
    left: dict[Slot, list[Slot]] = {}
    right: dict[Slot, list[Slot]] = {}
    for _, _, chain in chains:
        for a, b in itertools.pairwise(chain):
            right.setdefault(a, []).append(b)
            left.setdefault(b, []).append(a)
    position: dict[Slot, float] = {}
    for slots in columns.values():
        for i, slot in enumerate(slots):
            position[slot] = i
    at = position.__getitem__
    order = sorted(columns)
    for sweep in range(SWEEPS):
        down = sweep % 2 == 0
        neighbours = left if down else right
        for c in order if down else reversed(order):
            slots = columns[c]
            key: dict[Slot, float] = {}
            for slot in slots:
                near = neighbours.get(slot)
                key[slot] = sum(map(at, near)) / len(near) if near else position[slot]
            slots.sort(key=key.__getitem__)
            for i, slot in enumerate(slots):
                position[slot] = i


def layout(steps: Sequence[StepNode]) -> Layout:
    """The drawing of ``steps``: the geometry of their shape (cached: every view of a run,
    and every run of a version, has the same one) with each step's status and labels."""
    shape = tuple((s.key, tuple(s.depends_on)) for s in steps)
    at, edges, width, height = _geometry(shape)
    nodes = []
    for s in steps:
        title = f"{s.key}: {s.status}" if s.status else s.key  # a definition's: no status
        if s.badge_title:
            title += "\n" + s.badge_title
        if s.details:
            title += "\n" + "\n".join(s.details)
        if s.depends_on:  # every one declared: the drawing leaves out the implied ones
            title += "\ndependsOn: " + ", ".join(dict.fromkeys(s.depends_on))
        x, y = at[s.key]
        nodes.append(
            PlacedNode(
                s.key,
                _label(s),
                s.status,
                x,
                y,
                s.group,
                title,
                s.badge,
                s.badge_title,
                s.badge_href,
            )
        )
    return Layout(nodes=nodes, edges=list(edges), width=width, height=height)


# A live run page is rendered again on every status change, by every viewer: the layout of a
# shape is computed once. Bounded: a few MB at most for 1,000-step shapes.
@functools.lru_cache(maxsize=16)
def _geometry(
    shape: tuple[tuple[str, tuple[str, ...]], ...],
) -> tuple[dict[str, tuple[int, int]], tuple[PlacedEdge, ...], int, int]:
    """Each step's top-left corner, the edges, the width and height of a shape."""
    steps = [StepNode(key, depends_on, "") for key, depends_on in shape]
    column = layers(steps)
    chains, columns = _chains(steps, column)
    _order(columns, chains)
    # y of each slot: nodes a node's height apart, waypoints a lane's.
    top: dict[Slot, int] = {}
    height = 0
    for slots in columns.values():
        y = PAD
        for slot in slots:
            top[slot] = y
            y += (NODE_H if isinstance(slot, str) else LANE_H) + GAP_Y
        height = max(height, y - GAP_Y + PAD)
    step = NODE_W + GAP_X
    at = {key: (PAD + column[key] * step, top[key]) for key, _ in shape}
    edges = []
    for source, target, chain in chains:
        if len(chain) == 2:  # the common case, next column: one curve
            x1, y1 = PAD + column[source] * step + NODE_W, top[source] + NODE_H // 2
            x2, y2 = x1 + GAP_X, top[target] + NODE_H // 2
            mid = (x1 + x2) // 2
            path = f"M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}"
            edges.append(PlacedEdge(source, target, path, ((x1, y1), (x2, y2))))
            continue
        points: list[tuple[int, int]] = []
        for i, slot in enumerate(chain):
            x = PAD + (column[source] + i) * step
            if isinstance(slot, str):
                y = top[slot] + NODE_H // 2
                points.append((x + NODE_W, y) if i == 0 else (x, y))
            else:  # through the column on the waypoint's lane
                y = top[slot] + LANE_H // 2
                points += [(x, y), (x + NODE_W, y)]
        edges.append(PlacedEdge(source, target, _path(points), tuple(points)))
    width = PAD + (max(column.values(), default=0) + 1) * step - GAP_X + PAD
    return at, tuple(edges), width, height


def _path(points: list[tuple[int, int]]) -> str:
    """Curves across the gaps between columns (pairs of points: leaving one column, entering
    the next), straight lines along a waypoint's lane inside a column."""
    (x, y), rest = points[0], points[1:]
    parts = [f"M{x},{y}"]
    for i, (nx, ny) in enumerate(rest):
        if i % 2 == 0:  # across a gap: both control points stay inside it
            mid = (x + nx) // 2
            parts.append(f"C{mid},{y} {mid},{ny} {nx},{ny}")
        else:
            parts.append(f"H{nx}")
        x, y = nx, ny
    return " ".join(parts)
