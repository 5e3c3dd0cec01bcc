"""How the demo reports a refresh: one count of a run's steps, the one `rara runs list` gives."""

from __future__ import annotations

from rara_rag.demo.refresh import Measured, Reuse


def test_a_refresh_counts_every_step_and_says_which_compute_nothing() -> None:
    shards = {f"index-shard[{i}]": {"via": "cache"} for i in range(4)}
    downstream = {k: {"via": "cache"} for k in ("index", "evaluate", "adapt")}
    reuse = Reuse(
        {"clean": {"via": "cache"}, **shards, **downstream},
        ["collect"],
        {"index-shard": "a map: its children are counted", "release": "the gate"},
    )
    assert reuse.steps == 7 + 4  # the definition's 7 steps and the map's 4 children
    first = Measured(1, "first run", 10.0, 8.0, Reuse({}, ["collect"], {}))
    line = Measured(2, "documents unchanged", 0.5, 0.1, reuse).describe(first)
    assert line.startswith(
        "run 2, documents unchanged: of its 11 steps, 8 reused (8 from the cache), 1 ran"
        " (collect), 2 compute nothing themselves (index-shard, a map: its children are"
        " counted; release, the gate)\n"
    ), line


def test_a_refresh_says_why_each_step_was_recomputed_or_reused() -> None:
    """A line per step that computes or was reused, keys aligned, after the counts: plain
    text, so that it reads the same in a pipe or a log."""
    why = {
        "collect": "recomputed: its definition has no `cache:`",
        "index-shard[0]": "reused: cache: run 1 step index-shard[0] attempt 1",
        "adapt": "recomputed: reads (clean/passages.jsonl) differ from run 1's entry",
    }
    reuse = Reuse({"index-shard[0]": {"via": "cache"}}, ["collect", "adapt"], {}, why)
    first = Measured(1, "first run", 10.0, 8.0, Reuse({}, ["collect"], {}))
    text = Measured(3, "one document changed", 5.0, 4.0, reuse).describe(first)
    assert text.splitlines()[2:] == [
        "    collect         recomputed: its definition has no `cache:`",
        "    index-shard[0]  reused: cache: run 1 step index-shard[0] attempt 1",
        "    adapt           recomputed: reads (clean/passages.jsonl) differ from run 1's entry",
    ]
