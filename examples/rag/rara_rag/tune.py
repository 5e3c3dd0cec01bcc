"""Choose the adaptation's hyper-parameters on validation queries, then score the choice on
the test queries once, for several training seeds. Prints docs/demo.md's tables (markdown).

``python -m rara_rag.tune [--seeds 0 1 2] [--split-seeds 0 1 2]``

1. The demo's data: the stdlib corpus cleaned as the ``clean`` step does, the ``index``
   step's BM25 index, and the query set of seed 0 split by document into test, validation
   and train (``TEST_FRACTION`` and ``VAL_FRACTION`` of the queries, as the demo splits it).
2. Every candidate in ``CANDIDATES`` (one change at a time from ``START``) trains with seed
   0 and is scored on the *validation* split: MRR@10 after minus before, with its paired
   bootstrap interval. The highest difference wins; the test split plays no part.
3. The winner trains with each of ``--seeds`` (LoRA initialisation, batch order, dropout,
   bootstrap draws; the data split stays seed 0's) and is scored on the *test* split.
   Seed 0's table is the one ``make demo`` prints with the same settings.
4. The winner again on other data splits: ``--split-seeds`` reseed the query set (which
   sentence of each passage is the query, which documents are test, validation and train)
   and the training alike, as the demo's ``seed`` input does.

The frozen passage tower's embeddings are computed once per passage list and shared by every
candidate (``adapt``'s ``embedding_cache``), so a candidate costs its training and two
encodings of the short queries. One thread, as the demo: ~15 minutes on a free CPU core.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

from rara_rag import adapt, corpus, index
from rara_rag import evaluate as ev
from rara_rag.demo.plugins import TEST_FRACTION, VAL_FRACTION

#: Where the search starts: the settings the demo had before they were chosen this way.
START: dict[str, Any] = {
    "train": 512,
    "epochs": 2,
    "learning_rate": 1e-3,
    "hard_negatives": 1,
    "target_modules": ("query", "key", "value", "dense"),
}
#: (name, change from START). Only changes that keep the demo within ~3 CPU-minutes on this
#: project's 2-core machine: more epochs, pairs or negatives would not (START already takes
#: ~60 s of training and ~90 s of passage embedding there).
CANDIDATES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("start: 512 pairs, 2 epochs, lr 1e-3, 1 BM25 negative, LoRA q/k/v/dense r 8", {}),
    ("lr 3e-4", {"learning_rate": 3e-4}),
    ("lr 3e-3", {"learning_rate": 3e-3}),
    ("1 epoch", {"epochs": 1}),
    ("in-batch negatives only", {"hard_negatives": 0}),
    ("LoRA on attention query/value only", {"target_modules": ("query", "value")}),
    ("LoRA rank 16, alpha 32", {"rank": 16, "alpha": 32}),
)
KEY = "mrr@10"


class Bench:
    """The demo's data, built once, and a passage-embedding cache shared by every training."""

    def __init__(self, threads: int) -> None:
        self.passages = corpus.clean(corpus.collect(corpus="stdlib"))
        self.bm25 = index.build(self.passages)
        self.threads = threads
        self.sets: dict[tuple[int | None, int], ev.QuerySet] = {}
        self.cache: dict[tuple[str, ...], Any] = {}

    def query_set(self, train: int | None, data_seed: int = 0) -> ev.QuerySet:
        if (train, data_seed) not in self.sets:
            self.sets[train, data_seed] = ev.build_query_set(
                self.passages,
                seed=data_seed,
                test_fraction=TEST_FRACTION,
                val_fraction=VAL_FRACTION,
                max_train=train,
            )
        return self.sets[train, data_seed]

    def run(
        self, change: Mapping[str, Any], split: ev.Split, seed: int, data_seed: int = 0
    ) -> dict[str, float]:
        settings = {**START, **change}
        train, negatives = settings.pop("train"), settings.pop("hard_negatives")
        config = adapt.AdaptConfig(
            batch_size=32, seed=seed, num_threads=self.threads, checkpoint_every=10**9, **settings
        )
        with tempfile.TemporaryDirectory(prefix="rara-tune-") as tmp:
            result = adapt.adapt_query_set(
                self.query_set(train, data_seed),
                tmp,
                index=self.bm25,
                hard_negatives=negatives,
                config=config,
                eval_split=split,
                embedding_cache=self.cache,
            )
        return result.metrics

    def bm25_test(self) -> dict[str, float]:
        qs = self.query_set(START["train"])
        test = qs.split("test")
        ranks = ev.bm25_rankings(qs, "test", depth=10)
        return ev.bootstrap(ev.per_query(ranks, test, ev.DEFAULT_KS), seed=0)


def interval(m: Mapping[str, float], key: str, signed: bool = False) -> str:
    f = "{:+.3f}" if signed else "{:.3f}"
    return f"{f.format(m[key])} [{f.format(m[key + '_lo'])}, {f.format(m[key + '_hi'])}]"


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def select(bench: Bench) -> tuple[str, dict[str, Any]]:
    """The validation sweep: prints its table, returns the winning candidate."""
    rows: list[tuple[float, str, dict[str, Any]]] = []
    print("| candidate (seed 0) | validation MRR@10 after − before | after | train s |")
    print("|---|---|---|---|")
    for name, change in CANDIDATES:
        _log(f"validation: {name}")
        m = bench.run(change, "val", seed=0)
        print(
            f"| {name} | {interval(m, 'diff/' + KEY, signed=True)} | {m['after/' + KEY]:.3f} "
            f"| {m['time/train_s']:.0f} |",
            flush=True,
        )
        rows.append((m["diff/" + KEY], name, change))
    queries = int(m["eval_queries"])
    best = max(rows, key=lambda r: r[0])  # first listed wins a tie
    print(f"\n{queries} validation queries; chosen: **{best[1]}**\n")
    return best[1], best[2]


def test(
    bench: Bench, change: Mapping[str, Any], seeds: Sequence[int]
) -> dict[int, dict[str, float]]:
    """The chosen settings on the test split, once per seed: prints the tables."""
    diffs: list[float] = []
    per_seed: dict[int, dict[str, float]] = {}
    for seed in seeds:
        _log(f"test: seed {seed}")
        per_seed[seed] = bench.run(change, "test", seed=seed)
    print("| training seed | before | after | after − before (paired 95% interval) |")
    print("|---|---|---|---|")
    for seed, m in per_seed.items():
        print(
            f"| {seed} | {m['before/' + KEY]:.3f} | {m['after/' + KEY]:.3f} "
            f"| {interval(m, 'diff/' + KEY, signed=True)} |"
        )
        diffs.append(m["diff/" + KEY])
    spread = statistics.stdev(diffs) if len(diffs) > 1 else 0.0
    above = sum(m[f"diff/{KEY}_lo"] > 0 for m in per_seed.values())
    print(
        f"\nMRR@10 after − before over {len(diffs)} seeds: mean {statistics.fmean(diffs):+.4f}, "
        f"sd {spread:.4f}, min {min(diffs):+.4f}, max {max(diffs):+.4f}; interval above zero "
        f"for {above} of {len(diffs)}; {int(per_seed[seeds[0]]['eval_queries'])} test queries\n"
    )
    first = per_seed[seeds[0]]
    rows = {"BM25 index": bench.bm25_test()}
    for prefix, label in (
        ("before", "MiniLM before LoRA"),
        ("after", "MiniLM after LoRA"),
        ("hybrid", "hybrid: BM25 + after (RRF)"),
        ("diff", "after − before (paired)"),
    ):
        cut = len(prefix) + 1
        rows[label] = {k[cut:]: v for k, v in first.items() if k.startswith(prefix + "/")}
    print(f"seed {seeds[0]}, test split:\n")
    print("| retriever | recall@1 | recall@5 | recall@10 | MRR@10 |")
    print("|---|---|---|---|---|")
    for label, m in rows.items():
        signed = label.startswith("after −")
        cells = [interval(m, k, signed) for k in ("recall@1", "recall@5", "recall@10", KEY)]
        print(f"| {label} | {' | '.join(cells)} |")
    return per_seed


def other_splits(
    bench: Bench, change: Mapping[str, Any], split_seeds: Sequence[int], done: Mapping[int, Any]
) -> None:
    """The chosen settings on the test split of other query sets (``done``: seed 0's)."""
    print("\n| split and training seed | test queries | before | after | after − before |")
    print("|---|---|---|---|---|")
    for seed in split_seeds:
        _log(f"test: split seed {seed}")
        m = done[seed] if seed == 0 and 0 in done else bench.run(change, "test", seed, seed)
        print(
            f"| {seed} | {int(m['eval_queries'])} | {m['before/' + KEY]:.3f} "
            f"| {m['after/' + KEY]:.3f} | {interval(m, 'diff/' + KEY, signed=True)} |",
            flush=True,
        )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--split-seeds", type=int, nargs="*", default=[0, 1, 2])
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    bench = Bench(args.threads)
    change = select(bench)[1]
    done = test(bench, change, args.seeds)
    if args.split_seeds:
        other_splits(bench, change, args.split_seeds, done)


if __name__ == "__main__":
    main()
