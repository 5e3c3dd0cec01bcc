"""In-process handlers of the demo (``rara worker --handlers rara_rag.demo.handlers``)."""

from __future__ import annotations

import json
from typing import Any

from rara.context import OutputArtifact, StepContext, StepOutcome
from rara.errors import TerminalError
from rara.worker.registry import Registry
from rara_rag import corpus
from rara_rag.demo.artifacts import read_input

registry = Registry()
DEFAULT_CORPUS = "stdlib"


@registry.handler("corpus.collect@1")
def collect(ctx: StepContext) -> StepOutcome:
    """Read the corpus: ``paths`` (files or directories) or a built-in one by name, ``corpus``:
    ``stdlib`` (the default: the standard library's docstrings), ``pydoc`` (Python's help
    topics) or ``python`` (both). ``limit`` keeps the first N documents (by id)."""
    paths = ctx.input.get("paths")
    limit = ctx.input.get("limit")
    name = ctx.input.get("corpus", DEFAULT_CORPUS)
    try:
        docs = corpus.collect(paths, corpus=name)
    except corpus.CorpusError as exc:
        raise TerminalError(str(exc), code="BAD_CORPUS") from exc
    if limit is not None:
        if not isinstance(limit, int) or limit < 1:
            raise TerminalError(f"input 'limit' must be a positive integer, got {limit!r}")
        docs = docs[:limit]
    ctx.progress(1.0, f"{len(docs)} documents")
    ref = ctx.artifacts.put_bytes(
        corpus.documents_to_jsonl(docs), media_type="application/x-ndjson"
    )
    return StepOutcome(
        result={"documents": len(docs), "characters": sum(len(d.text) for d in docs)},
        artifacts=[OutputArtifact("documents.jsonl", ref, "application/x-ndjson")],
    )


@registry.handler("corpus.clean@1")
def clean(ctx: StepContext) -> StepOutcome:
    """Normalise, split into passages, deduplicate by content hash; then cut the passages into
    ``shards`` contiguous shards (default 1), an artifact each, listed in the result's
    ``shards`` for a map step (``index-shard`` in examples/rag-refresh.yaml) to spread."""
    raw = read_input(ctx, "documents.jsonl")
    docs = [corpus.Document(**json.loads(line)) for line in raw.decode().splitlines() if line]
    words = _positive_int(ctx.input, "words", 100)
    overlap = _positive_int(ctx.input, "overlap", 20, allow_zero=True)
    shards = _positive_int(ctx.input, "shards", 1)
    try:
        passages = corpus.clean(docs, words=words, overlap=overlap)
    except corpus.CorpusError as exc:
        raise TerminalError(str(exc), code="BAD_CORPUS") from exc
    ctx.progress(1.0, f"{len(passages)} passages")
    media = "application/x-ndjson"
    ref = ctx.artifacts.put_bytes(corpus.passages_to_jsonl(passages), media_type=media)
    outputs = [OutputArtifact("passages.jsonl", ref, media)]
    listed = []
    for i, shard in enumerate(corpus.split_shards(passages, shards)):
        name = f"passages-{i:03d}.jsonl"
        shard_ref = ctx.artifacts.put_bytes(corpus.passages_to_jsonl(shard), media_type=media)
        outputs.append(OutputArtifact(name, shard_ref, media))
        listed.append({"artifact": name, "passages": len(shard)})
    return StepOutcome(
        result={"documents": len(docs), "passages": len(passages), "shards": listed},
        artifacts=outputs,
    )


def _positive_int(values: Any, name: str, default: int, allow_zero: bool = False) -> int:
    value = values.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < (0 if allow_zero else 1):
        kind = "non-negative" if allow_zero else "positive"
        raise TerminalError(f"input {name!r} must be a {kind} integer, got {value!r}")
    return value
