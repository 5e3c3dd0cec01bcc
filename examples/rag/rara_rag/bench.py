"""Demo-scale run of the whole refresh computation, printing one JSON line of numbers.

``python -m rara_rag.bench [--corpus stdlib] [--train N] [--epochs 1] [--threads N]`` —
collect a built-in corpus, clean, index, derive the query set, evaluate BM25, adapt MiniLM
with LoRA (hard negatives mined with the index) and evaluate it before/after/hybrid on the
held-out split, with bootstrap intervals. A smoke test of the ML stack (``rara-rag``'s
dependencies) on a new machine, and a way to try one setting; docs/demo.md's numbers, settings
chosen on validation queries, come from ``python -m rara_rag.tune``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
import time

from rara_rag import corpus, index
from rara_rag import evaluate as ev


def main(argv: list[str] | None = None) -> dict[str, float | str]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--corpus", choices=corpus.BUILTIN, default="stdlib")
    ap.add_argument("--test-fraction", type=float, default=0.5)
    ap.add_argument("--val-fraction", type=float, default=0.2)
    ap.add_argument("--hard-negatives", type=int, default=1)
    ap.add_argument("--train", type=int, default=None, help="training pairs (cap)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--negatives", choices=["in-batch", "all"], default=None)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-adapt", action="store_true", help="BM25 only (no torch needed)")
    args = ap.parse_args(argv)

    out: dict[str, float | str] = {}
    t = time.perf_counter()
    passages = corpus.clean(corpus.collect(corpus=args.corpus))
    bm25 = index.build(passages)
    blob = bm25.to_bytes()
    out.update(passages=float(len(passages)), index_bytes=float(len(blob)))
    out["index_sha256"] = hashlib.sha256(blob).hexdigest()
    qs = ev.build_query_set(
        passages,
        seed=args.seed,
        max_train=args.train,
        test_fraction=args.test_fraction,
        val_fraction=args.val_fraction,
    )
    out.update(ev.prefixed(ev.evaluate_bm25(qs), "bm25"))
    out["time/prepare_s"] = time.perf_counter() - t
    if not args.no_adapt:
        from rara_rag import adapt

        overrides = {
            k: v
            for k, v in {
                "learning_rate": args.lr,
                "negatives": args.negatives,
                "num_threads": args.threads,
            }.items()
            if v is not None
        }
        cfg = adapt.AdaptConfig(
            epochs=args.epochs, batch_size=args.batch_size, seed=args.seed, **overrides
        )
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            result = adapt.adapt_query_set(
                qs, tmp, index=bm25, hard_negatives=args.hard_negatives, config=cfg
            )
            out["time/adapt_total_s"] = time.perf_counter() - t
        out.update(result.metrics)
    print(json.dumps(out, sort_keys=True))
    return out


if __name__ == "__main__":
    main()
