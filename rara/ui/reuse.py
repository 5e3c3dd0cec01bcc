"""Steps that did not run: reused from the step cache or by a resume (``reused_from`` of the
step row; docs/step-cache.md). One badge for all the run page's views (steps table, DAG node,
timeline), the same words as ``rara runs show``, and a link to the source run while it is
still there (``rara runs prune`` may have deleted it; a cache entry outlives its run)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rara.cache import describe_reuse

BADGES = {"cache": "cached", "resume": "resumed"}


@dataclass(frozen=True, slots=True)
class Reuse:
    via: str  # cache | resume
    run: int | None  # the run it was reused from
    run_kept: bool  # that run is still in the database: link to it
    description: str  # "cache: run 5 step clean attempt 1", as `rara runs show` says it

    @property
    def badge(self) -> str:
        return BADGES.get(self.via, "reused")

    @property
    def label(self) -> str:
        """``cached from run 5``: the badge's text where there is room for it."""
        return self.badge + (f" from run {self.run}" if self.run is not None else "")

    @property
    def href(self) -> str | None:
        return f"/runs/{self.run}" if self.run is not None and self.run_kept else None

    @property
    def title(self) -> str:
        gone = "" if self.run_kept or self.run is None else " (that run was pruned)"
        return f"{self.badge}: reused from {self.description.split(': ', 1)[-1]}{gone}"


def reuse_of(reused_from: Mapping[str, Any] | None, run_kept: bool | None) -> Reuse | None:
    """The badge of a step row's ``reused_from`` (None: the step ran)."""
    if not reused_from:
        return None
    run = reused_from.get("run")
    return Reuse(
        via=str(reused_from.get("via", "cache")),
        run=int(run) if isinstance(run, int | str) and str(run).isdigit() else None,
        run_kept=bool(run_kept),
        description=describe_reuse(reused_from),
    )


@dataclass(frozen=True, slots=True)
class ReuseSummary:
    """How many of a run's steps were reused, counted as the run counts its steps (a map
    step and each of its children), and the runs a resume took them from."""

    total: int
    cached: int
    resumed: int
    resumed_from: list[Reuse]  # one per source run of a resume (normally one)


def summarise(reuses: Iterable[Reuse | None]) -> ReuseSummary:
    found = [r for r in reuses if r is not None]
    sources: dict[int | None, Reuse] = {}
    for r in found:
        if r.via == "resume":
            sources.setdefault(r.run, r)
    return ReuseSummary(
        total=len(found),
        cached=sum(r.via == "cache" for r in found),
        resumed=sum(r.via == "resume" for r in found),
        resumed_from=list(sources.values()),
    )
