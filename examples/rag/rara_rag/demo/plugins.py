"""Executor plugins of the demo (``rara executor --plugins rara_rag.demo.plugins``).

Indexing (tokenized in shards by a map's children, then merged), evaluation and adaptation
need the ML stack (``rara-rag``'s dependencies) and, on Kubernetes, run in the GPU executor
pool. Each is deterministic given its inputs and seed.
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal, cast

from rara.context import OutputArtifact, StepContext, StepOutcome
from rara.errors import TerminalError
from rara.executor.plugins import PluginRegistry
from rara_rag import corpus, index, index_shards
from rara_rag import evaluate as ev
from rara_rag.demo.artifacts import read_input
from rara_rag.packing import pack_dir, unpack


def register(registry: PluginRegistry) -> None:
    registry.register("index.shard", 1, tokenize_shard)
    registry.register("index.build", 1, build_index)
    registry.register("eval.retrieval", 1, evaluate_retrieval)
    registry.register("adapt.lora", 1, adapt_lora, gpu=1)


def _passages(ctx: StepContext) -> list[corpus.Passage]:
    passages = corpus.passages_from_jsonl(read_input(ctx, "passages.jsonl"))
    if not passages:
        raise TerminalError("passages.jsonl is empty", code="BAD_INPUT")
    return passages


#: A token shard, each index-shard child's artifact; the index step reads them by their full
#: input names, ``<map>[<i>]/tokens.json.gz``, in index order.
TOKENS = "tokens.json.gz"
_SHARD_INPUT = re.compile(r"^.+\[(\d+)\]/" + re.escape(TOKENS) + "$")


def tokenize_shard(ctx: StepContext) -> StepOutcome:
    """A child of the ``index-shard`` map: tokenizes the shard of ``clean``'s passages its
    ``item`` names (``{"artifact": "passages-003.jsonl", ...}``) into ``tokens.json.gz``."""
    item = ctx.input.get("item")
    name = item.get("artifact") if isinstance(item, dict) else None
    if not isinstance(name, str):
        raise TerminalError(
            f"input 'item' must name a passages shard ({{'artifact': ...}}), got {item!r}",
            code="BAD_INPUT",
        )
    passages = corpus.passages_from_jsonl(read_input(ctx, name))
    if not passages:
        raise TerminalError(f"{name} is empty", code="BAD_INPUT")
    ctx.progress(0.1, f"tokenizing {len(passages)} passages of {name}")
    blob = index_shards.tokenize_shard(passages)
    ref = ctx.artifacts.put_bytes(blob, media_type=index_shards.MEDIA_TYPE)
    return StepOutcome(
        result={"shard": ctx.input.get("index"), "artifact": name, "passages": len(passages)},
        artifacts=[OutputArtifact(TOKENS, ref, index_shards.MEDIA_TYPE)],
    )


def build_index(ctx: StepContext) -> StepOutcome:
    """A BM25 index over the cleaned passages (bm25s), serialised deterministically. Given the
    token shards of a map's children (inputs ``<map>[<i>]/tokens.json.gz``), it merges them in
    index order (``index_shards.merge``); without, it tokenizes the passages itself. The bytes
    are the same either way."""
    passages = _passages(ctx)
    shards = sorted(
        (int(m.group(1)), name) for name in ctx.inputs if (m := _SHARD_INPUT.match(name))
    )
    if [i for i, _ in shards] != list(range(len(shards))):
        raise TerminalError(
            f"token shards {[n for _, n in shards]} are not 0..n-1", code="BAD_INPUT"
        )
    ctx.progress(0.1, f"indexing {len(passages)} passages from {len(shards) or 'no'} shards")
    try:
        built = (
            index_shards.merge(passages, [read_input(ctx, n) for _, n in shards])
            if shards
            else index.build(passages)
        )
    except ValueError as exc:
        raise TerminalError(str(exc), code="BAD_INPUT") from exc
    blob = built.to_bytes()
    ref = ctx.artifacts.put_bytes(blob, media_type="application/vnd.rara.bm25")
    return StepOutcome(
        result={"passages": len(passages), "index_bytes": len(blob), "shards": len(shards)},
        artifacts=[OutputArtifact("index.bm25", ref, "application/vnd.rara.bm25")],
    )


#: Shares of the queries whose documents are held out. Of the stdlib corpus's ~2,270: 0.5
#: for test (~1,150 queries, bootstrap intervals a few points wide), 0.2 for validation (~460,
#: which only ``rara_rag.tune`` scores, to choose hyper-parameters), the rest (~660) train.
TEST_FRACTION = 0.5
VAL_FRACTION = 0.2


def _query_set(ctx: StepContext, passages: list[corpus.Passage]) -> ev.QuerySet:
    seed = ctx.input.get("seed", 0)
    train = ctx.input.get("train")
    fraction = ctx.input.get("test_fraction", TEST_FRACTION)
    if not isinstance(seed, int) or (train is not None and not isinstance(train, int)):
        raise TerminalError("inputs 'seed' and 'train' must be integers")
    if not isinstance(fraction, int | float) or not 0 < fraction < 1 - VAL_FRACTION:
        raise TerminalError(
            f"input 'test_fraction' must be in (0, {1 - VAL_FRACTION:g}), got {fraction!r}"
        )
    return ev.build_query_set(
        passages, seed=seed, max_train=train, test_fraction=fraction, val_fraction=VAL_FRACTION
    )


def evaluate_retrieval(ctx: StepContext) -> StepOutcome:
    """recall@k and MRR (with bootstrap 95% intervals) of BM25 on the held-out queries."""
    passages = _passages(ctx)
    read_input(ctx, "index.bm25")  # the index this evaluation is about must exist and verify
    ks = tuple(ctx.input.get("ks", (1, 5, 10)))
    qs = _query_set(ctx, passages)
    ctx.progress(0.3, f"{len(qs.queries)} labelled queries")
    test = qs.split("test")
    rankings = ev.bm25_rankings(qs, "test", depth=max([*ks, 10]))
    metrics = ev.score(rankings, test, ks)
    metrics.update(ev.bootstrap(ev.per_query(rankings, test, ks), seed=qs_seed(ctx)))
    data = b"".join(json.dumps(asdict(q), sort_keys=True).encode() + b"\n" for q in qs.queries)
    ref = ctx.artifacts.put_bytes(data, media_type="application/x-ndjson")
    return StepOutcome(
        result={"bm25": metrics, "queries": len(qs.queries)},
        artifacts=[OutputArtifact("queries.jsonl", ref, "application/x-ndjson")],
    )


def qs_seed(ctx: StepContext) -> int:
    return _int(ctx, "seed", 0)


QUALITY_ROWS = ("before", "after", "hybrid", "diff")


def adapt_lora(ctx: StepContext) -> StepOutcome:
    """LoRA (QLoRA on CUDA with bitsandbytes) of all-MiniLM-L6-v2's query tower on the train
    split, with hard negatives mined by the ``index`` step's BM25 index; checkpoints through
    the checkpoint API and resumes from the latest one. Scores before, after and hybrid
    (BM25 + after, reciprocal rank fusion) with bootstrap intervals."""
    from rara_rag import adapt

    passages = _passages(ctx)
    bm25 = index.BM25Index.from_bytes(read_input(ctx, "index.bm25"))
    qs = _query_set(ctx, passages)
    quantize = ctx.input.get("quantize", "auto")
    if quantize not in ("auto", "never", "always"):
        raise TerminalError(f"input 'quantize' must be auto, never or always, got {quantize!r}")
    config = adapt.AdaptConfig(
        epochs=_int(ctx, "epochs", 2),
        batch_size=_int(ctx, "batch_size", 32),
        seed=_int(ctx, "seed", 0),
        checkpoint_every=_int(ctx, "checkpoint_every", 10),
        learning_rate=float(ctx.input.get("learning_rate", adapt.LEARNING_RATE)),
        num_threads=_int(ctx, "threads", 1) or None,  # 0: by load (not bit-reproducible)
        quantize=cast(Literal["auto", "never", "always"], quantize),
    )
    with tempfile.TemporaryDirectory(prefix="rara-adapt-") as tmp:
        work = Path(tmp)
        resume_from = _restore_checkpoint(ctx, work / "resume")

        def save_checkpoint(state: dict[str, Any], directory: Path) -> None:
            ref = ctx.artifacts.put_bytes(pack_dir(directory), media_type="application/gzip")
            ctx.save_checkpoint(state, ref)

        try:
            result = adapt.adapt_query_set(
                qs,
                work / "out",
                index=bm25,
                hard_negatives=_int(ctx, "hard_negatives", 1),
                config=config,
                resume_from=resume_from,
                progress=ctx.progress,
                save_checkpoint=save_checkpoint,
                cancelled=ctx.cancelled,
            )
        except adapt.ResumeMismatch as exc:
            raise TerminalError(f"checkpoint does not match this step's inputs: {exc}") from exc
        ref = ctx.artifacts.put_bytes(result.adapter_bytes(), media_type="application/gzip")
    return StepOutcome(
        result={
            "steps": result.steps,
            "resumed_from_step": result.resumed_from_step,
            "device": result.device,
            "quantized": result.quantized,
            "final_loss": result.losses[-1] if result.losses else None,
            "metrics": result.metrics,
            # The quality table alone, as the gate shows it (rara.evidence): each retriever's
            # metrics with their intervals, and the paired after - before difference.
            "quality": {
                k: v for k, v in result.metrics.items() if k.split("/", 1)[0] in QUALITY_ROWS
            },
        },
        artifacts=[OutputArtifact("adapter.tar.gz", ref, "application/gzip")],
    )


def _restore_checkpoint(ctx: StepContext, dest: Path) -> Path | None:
    checkpoint = ctx.checkpoint
    if checkpoint is None or checkpoint.artifact is None:
        return None
    ctx.progress(None, f"resuming from checkpoint {checkpoint.seq} of attempt {checkpoint.attempt}")
    return unpack(ctx.artifacts.get_bytes(checkpoint.artifact), dest)


def _int(ctx: StepContext, name: str, default: int) -> int:
    value = ctx.input.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TerminalError(f"input {name!r} must be a non-negative integer, got {value!r}")
    return value
