"""Why a step of a run hit or missed the step cache (docs/step-cache.md, "Seeing it").

A step's key is compared with the entry of its capability and step key that matches it best
(``rara.cache.best_match``: the fewest differing components, then input fields, then the most
artifacts read with the same bytes), not with the newest: after a few runs of other inputs
the newest entry is rarely the one that read the same bytes, and comparing with it would blame
parts that are not why the step missed. ``rara cache explain`` prints it whole; the demo's
refreshes print ``summary`` per step.
"""

from __future__ import annotations

from dataclasses import dataclass

from rara.cache import CacheKey, Difference, best_match, describe_reuse, difference
from rara.errors import NotFound
from rara.pg import cache
from rara.pg.queries import Conn


@dataclass(frozen=True, slots=True)
class Explanation:
    """A step's key against the entry that matches it best (none: no other live entry)."""

    step: cache.CachedStep
    key: CacheKey
    own: str  # the entry it reused (a hit) or wrote (a miss that succeeded): not compared
    candidates: int  # the other entries it was compared with
    best: cache.Candidate | None
    difference: Difference | None

    @property
    def hit(self) -> bool:
        return bool(self.step.reused_from)

    def summary(self) -> str:
        """One line: ``reused: cache: run 1 step clean attempt 1``, or ``recomputed: reads
        (collect/documents.jsonl) differ from run 1's entry``."""
        if self.hit:
            return f"reused: {describe_reuse(self.step.reused_from)}"
        if self.best is None or self.difference is None:
            return f"recomputed: no earlier entry of {self.step.capability} step {self.step.key}"
        if not self.difference.components:  # (written after this step looked, or expired then)
            return f"recomputed: no entry matched when it ran (run {self.best.source_run}'s does)"
        return (
            f"recomputed: {self.difference.describe()} differ from run"
            f" {self.best.source_run}'s entry"
        )

    @property
    def whole_input(self) -> bool:
        """The input differs and the step declares no fields it reads: every field of the
        run input is in its key, read or not (docs/step-cache.md, "The run input in the
        key")."""
        differs = self.difference is not None and "input" in self.difference.parts
        return differs and not self.step.input_declared


def explain(conn: Conn, run_id: int, step_key: str) -> Explanation | None:
    """STEP of run RUN_ID against its best-matching entry; None: the step has no key (its
    definition has no ``cache:``, or no worker leased it yet). NotFound: no such step."""
    found = cache.step(conn, run_id, step_key)
    if found is None:
        raise NotFound(f"run {run_id} has no step {step_key!r}")
    if found.cache is None:
        return None
    key = CacheKey(
        str(found.cache["base"]),
        dict(found.cache["parts"]),
        dict(found.cache.get("upstream") or {}),
        dict(found.cache.get("fields") or {}),
    )
    reused = found.reused_from
    own = str(reused.get("cache_key", "") if reused else found.cache.get("entry", ""))
    candidates = cache.candidates(conn, found.capability, found.key, own)
    differences = [difference(key, c.parts, c.reads, c.fields) for c in candidates]
    best = best_match(differences)
    return Explanation(
        found,
        key,
        own,
        len(candidates),
        None if best is None else candidates[best],
        None if best is None else differences[best],
    )
