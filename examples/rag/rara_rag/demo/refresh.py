"""The demo's refreshes: the pipeline again on the same documents, then after one changed.

A refresh pipeline runs every night on a corpus of which a few documents changed. The demo
keeps its corpus where such a pipeline would, in a file it re-reads (``documents.jsonl``
under ``.rara/demo/corpus``, the built-in corpus written out once), and runs it three times:
the first run computes everything; the second, on the same file, reuses every step but
collect (the step that reads the outside world has no ``cache:``, so it always looks); the
third, after one word of one document changed, recomputes what that change reaches. Each
step's line says whether it was reused, and if it was recomputed, why: what of its key differs
from the entry that matches it best (rara.cache_explain). What each run cost is the CPU time
the worker and the executor used while it ran, read from the operating system (psutil), not
estimated.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]  # (no stubs pinned: two calls)
import psycopg

from rara import cache_explain
from rara.cache import describe_reuse
from rara_rag import corpus
from rara_rag.demo.processes import Child


class RefreshFailed(RuntimeError):
    """A refresh run did not succeed: the demo fails, naming it."""


def write_corpus(path: Path, name: str) -> Path:
    """The built-in corpus ``name`` as ``path`` (JSON lines), written afresh: every ``make
    demo`` starts from the same bytes, so its first run can reuse an earlier demo's steps."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(corpus.documents_to_jsonl(corpus.builtin(name)))
    return path


_WORD = re.compile(r"\b[a-z]{6,}\b")


def change_one_document(path: Path, limit: int | None) -> str:
    """Change one word of one document in the file, keeping its word count (so its passages
    keep their boundaries, and the shard that holds them is the only one that changes);
    returns the document's id. The document is the first with a long word from three eighths
    of the way in: inside a shard, not on the edge of one."""
    docs = corpus.documents_from_jsonl(path.read_text(encoding="utf-8"), path)
    kept = len(docs) if limit is None else min(limit, len(docs))
    for i in range(kept * 3 // 8, kept):
        match = _WORD.search(docs[i].text)
        if match is not None:
            text = docs[i].text[: match.start()] + "refreshed" + docs[i].text[match.end() :]
            docs[i] = corpus.Document(docs[i].id, text, docs[i].source)
            path.write_bytes(corpus.documents_to_jsonl(docs))
            return docs[i].id
    raise ValueError(f"no document of {path} has a word to change")


def cpu_seconds(children: list[Child]) -> float:
    """User and system CPU seconds the services used so far (threads included)."""
    total = 0.0
    for child in children:
        if child.proc is not None and child.alive():
            times = psutil.Process(child.proc.pid).cpu_times()
            total += times.user + times.system
    return total


@dataclass(frozen=True)
class Reuse:
    """A run's steps as the cache left them, counted as `rara runs list` and the dashboard
    count a run's steps (each step of the definition, and each child of a map): reused, ran,
    or neither — a map's own step (its children compute) and the gate (it computes nothing:
    each run's gate waits for its own decision)."""

    reused: dict[str, Any]  # step key -> reused_from
    ran: list[str]
    neither: dict[str, str]  # step key -> why it computes nothing itself
    # step key -> "reused: …" or "recomputed: <why>" (rara.cache_explain), in the run's order
    why: dict[str, str] = field(default_factory=dict)

    @property
    def steps(self) -> int:
        return len(self.reused) + len(self.ran) + len(self.neither)

    def lines(self) -> list[str]:
        """A line per step that computes or was reused: its key, then why."""
        width = max((len(k) for k in self.why), default=0)
        return [f"{key:<{width}}  {why}" for key, why in self.why.items()]


NO_CACHE = "recomputed: its definition has no `cache:`"


def reuse_of(url: str, run_id: int) -> Reuse:
    """The run's steps as the cache left them (``Reuse``), each with why."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT key, reused_from, CASE WHEN s.wait IS NOT NULL THEN 'the gate'"
            " WHEN EXISTS (SELECT 1 FROM rara_steps c WHERE c.map_parent = s.id)"
            " THEN 'a map: its children are counted' END"
            # (a map's children right after it: they are inserted when it expands, later)
            " FROM rara_steps s WHERE run_id = %s ORDER BY coalesce(map_parent, id), id",
            (run_id,),
        ).fetchall()
        reasons = {}
        for key, reused, neither in rows:
            if reused is not None:  # (from the cache or, in a resumed run, its first run)
                reasons[key] = f"reused: {describe_reuse(reused)}"
            elif neither is None:
                explained = cache_explain.explain(conn, run_id, key)
                reasons[key] = NO_CACHE if explained is None else explained.summary()
    return Reuse(
        {k: r for k, r, _ in rows if r is not None},
        [k for k, r, why in rows if r is None and why is None],
        {k: why for k, r, why in rows if r is None and why is not None},
        reasons,
    )


@dataclass(frozen=True)
class Measured:
    """A run of the demo: its wall time, the services' CPU while it ran, and its reuse."""

    run_id: int
    label: str
    wall: float
    cpu: float
    reuse: Reuse

    def describe(self, first: Measured) -> str:
        """One paragraph on this run against the first."""
        via = Counter(r.get("via", "cache") for r in self.reuse.reused.values())
        reused = ", ".join(f"{n} from the {v}" for v, n in sorted(via.items()))
        neither = "; ".join(f"{k}, {why}" for k, why in self.reuse.neither.items())
        return (
            f"run {self.run_id}, {self.label}: of its {self.reuse.steps} steps,"
            f" {len(self.reuse.reused)} reused{f' ({reused})' if reused else ''},"
            f" {len(self.reuse.ran)} ran ({', '.join(self.reuse.ran) or 'none'}),"
            f" {len(self.reuse.neither)} compute nothing themselves ({neither or 'none'})\n"
            f"  {self.wall:.1f} s wall against {first.wall:.1f} s; CPU {self.cpu:.1f} s against"
            f" {first.cpu:.1f} s ({self.cpu / first.cpu:.1%} of the first run's compute)"
            + "".join(f"\n    {line}" for line in self.reuse.lines())
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "run": self.run_id,
            "label": self.label,
            "wall_s": round(self.wall, 3),
            "cpu_s": round(self.cpu, 3),
            "steps": self.reuse.steps,
            "reused": sorted(self.reuse.reused),
            "ran": self.reuse.ran,
            "neither": sorted(self.reuse.neither),
            "why": self.reuse.why,
        }
