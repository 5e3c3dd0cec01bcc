"""A map step as the group of its children: how many, how each one did, when the group ran and
on which workers. A map step never runs itself (its row is a join: attempt 0, no worker), so
its duration and workers are its children's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from rara.ui.data import MapChild, StepLine
from rara.ui.render import took

SHOWN_CHILDREN = 100  # a map's children listed on its run's page: a map may have 100,000


@dataclass(frozen=True, slots=True)
class MapGroup:
    key: str
    total: int | None  # the map's list (children not inserted yet count); None: not expanded
    children: list[MapChild]
    started_at: datetime | None  # the first child's lease
    finished_at: datetime | None  # the last child's end, once every child has ended
    workers: list[str]

    def counts(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for c in self.children:
            found[c.status] = found.get(c.status, 0) + 1
        return found

    @property
    def done(self) -> float:
        """The share of its children that have ended (a map's progress: it reports none)."""
        total = max(self.total or 0, len(self.children))
        ended = sum(c.status in ("succeeded", "failed", "cancelled") for c in self.children)
        return ended / total if total else 0.0

    @property
    def shown(self) -> list[MapChild]:
        """The children a page lists (the first SHOWN_CHILDREN); ``more`` counts the rest."""
        return self.children[:SHOWN_CHILDREN]

    @property
    def more(self) -> int:
        """Children not listed: those read past SHOWN_CHILDREN and those not inserted yet."""
        return max((self.total or 0), len(self.children)) - len(self.shown)

    def lines(self, now: datetime) -> list[str]:
        """A line per child listed: its status, duration and worker (the DAG node's tooltip),
        then ``… N more children``."""
        lines = [
            f"{c.key}: {c.status}"
            + (f", {took(c.started_at, c.finished_at, now)}" if c.started_at else "")
            + (f" on {c.worker}" if c.worker else "")
            for c in self.shown
        ]
        return lines + ([f"… {self.more} more children"] if self.more else [])


def map_groups(steps: Sequence[StepLine], children: Sequence[MapChild]) -> dict[str, MapGroup]:
    by_parent: dict[str, list[MapChild]] = {}
    for c in children:
        by_parent.setdefault(c.parent, []).append(c)
    groups = {}
    for s in steps:
        if not s.is_map:
            continue
        mine = by_parent.get(s.key, [])
        starts = [c.started_at for c in mine if c.started_at is not None]
        ends = [c.finished_at for c in mine if c.finished_at is not None]
        groups[s.key] = MapGroup(
            key=s.key,
            total=s.map_total,
            children=mine,
            started_at=min(starts, default=None),
            finished_at=max(ends) if mine and len(ends) == (s.map_total or -1) else None,
            workers=sorted({c.worker for c in mine if c.worker}),
        )
    return groups
