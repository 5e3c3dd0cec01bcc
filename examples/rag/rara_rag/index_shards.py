"""The BM25 index built in shards: what the demo's ``index-shard`` map and ``index`` join do.

``clean`` cuts its passages into contiguous shards (``corpus.split_shards``); each child of
the map reads one shard and tokenizes it (``tokenize_shard``: the per-passage work of an index,
and all of its Python-level work — lower-casing, the token regex, stopwords) into a *token
shard*: the shard's passage ids, its own sorted vocabulary, and each passage's tokens as
positions in it. ``merge`` then makes the one index over every passage from the shards, in
shard order: the union of their vocabularies, sorted, is the vocabulary ``index.build`` would
have made, each shard's positions are remapped into it (a numpy take), and bm25s computes the
scores from the same token ids ``build`` gives it. So the sharded index is the unsharded one,
byte for byte — same document frequencies, same average length, same digest — whatever the
number of shards.

Why the join, not per-shard indexes searched and combined: BM25's idf and length norm are
corpus-wide, so a shard's own index scores differently from the corpus's; combining them
would need global statistics in every shard (a second pass) or change the scores. Tokens are
what a shard can finish alone. They are the Python-speed part of an index (a regex and a set
lookup per token); what stays in the join — the remap and bm25s's scoring — runs at numpy
speed. On the demo's corpus all of it is small: for 2,565 passages, 0.2 s of tokenizing and
encoding in the children against 0.26 s of merging, measured on one core; it is the shape of
the work, not its size, that the demo shows.

A token shard's bytes are a function of its passages only (gzip without a timestamp, sorted
JSON), so a retried child writes the same artifact, and the chaos check can compare it.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from rara_rag.corpus import Passage
from rara_rag.index import BM25Index, tokenize

FORMAT = "rara.bm25-tokens/1"
MEDIA_TYPE = "application/vnd.rara.bm25-tokens+json+gzip"


def tokenize_shard(passages: Sequence[Passage]) -> bytes:
    """One shard's tokens: passage ids, the shard's sorted vocabulary, and per passage its
    token count, then all tokens as vocabulary positions (flat)."""
    if not passages:
        raise ValueError("cannot tokenize an empty shard")
    docs = [tokenize(p.text) for p in passages]
    vocab = sorted({t for doc in docs for t in doc})
    position = {t: i for i, t in enumerate(vocab)}
    doc = {
        "format": FORMAT,
        "passages": [p.id for p in passages],
        "vocab": vocab,
        "lengths": [len(d) for d in docs],
        "ids": [position[t] for d in docs for t in d],
    }
    data = json.dumps(doc, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()
    return gzip.compress(data, mtime=0)


def read_shard(data: bytes) -> dict[str, Any]:
    try:
        doc: dict[str, Any] = json.loads(gzip.decompress(data))
    except (OSError, EOFError, ValueError) as exc:  # bad gzip, truncated, bad JSON
        raise ValueError(f"not a {FORMAT} artifact: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} artifact")
    if sum(doc["lengths"]) != len(doc["ids"]) or len(doc["lengths"]) != len(doc["passages"]):
        raise ValueError(f"{FORMAT} artifact: lengths, ids and passages disagree")
    return doc


def merge(passages: Sequence[Passage], shards: Sequence[bytes]) -> BM25Index:
    """The index over ``passages`` from their token shards, in order: identical to
    ``index.build(passages)``. The shards must cover the passages exactly, in order."""
    docs = [read_shard(s) for s in shards]
    covered = [pid for d in docs for pid in d["passages"]]
    if covered != [p.id for p in passages]:
        raise ValueError(
            f"the {len(docs)} token shards cover {len(covered)} passages, not the "
            f"{len(passages)} given, in their order"
        )
    vocab_list = sorted({t for d in docs for t in d["vocab"]})
    vocab = {t: i for i, t in enumerate(vocab_list)}
    ids: list[list[int]] = []
    for d in docs:
        # The shard's positions, remapped into the whole vocabulary (both sorted).
        remap = np.searchsorted(vocab_list, d["vocab"]) if d["vocab"] else np.zeros(0, int)
        flat = remap[np.asarray(d["ids"], dtype=np.int64)].tolist() if d["ids"] else []
        start = 0
        for length in d["lengths"]:
            ids.append(flat[start : start + length])
            start += length
    return BM25Index.from_token_ids(passages, ids, vocab)
